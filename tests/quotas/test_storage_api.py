"""Storage as an API: department admins create, change and delete their department's volumes; a local
volume may not point at the portal itself or at the host's system directories."""

import os
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from accounts.models import AuditEvent
from clusters.models import Storage
from clusters.storage_paths import local_path_problems

JOB = {
    "name": "reader",
    "code_url": "https://git.example.com/r.git",
    "command": "python train.py",
    "gpus_per_worker": 0,
}


@pytest.fixture
def data_root(settings, tmp_path) -> Path:
    """The portal's data root for the test, inside tmp_path (so that tmp_path itself contains it)."""
    root = tmp_path / "portal"
    (root / "storage").mkdir(parents=True)
    settings.PORTAL_DATA_ROOT = root
    return root


@pytest.fixture
def datasets(tmp_path) -> Path:
    folder = tmp_path / "shared" / "datasets"
    folder.mkdir(parents=True)
    return folder


def create(world, user, **fields):
    body = {"department": "vision", "name": "vision-scratch", "kind": "local", **fields}
    return world.api(user).post("/api/v1/storage/", body, format="json")


def volume(name="vision-datasets") -> Storage:
    return Storage.objects.get(name=name)


def storage_audit() -> list[tuple[str, str, str]]:
    return list(
        AuditEvent.objects.filter(action__startswith="storage.")
        .order_by("id")
        .values_list("action", "target", "actor__username")
    )


# --- Who may do what --------------------------------------------------------------------------


def test_it_lets_a_dept_admin_create_a_volume_that_members_then_see(world, data_root, datasets):
    response = create(world, world.carol, local_path=str(datasets), description="Shared data sets")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert {key: body[key] for key in ("name", "department", "kind", "local_path", "pvc_name", "description")} == {
        "name": "vision-scratch",
        "department": "vision",
        "kind": "local",
        "local_path": str(datasets),
        "pvc_name": "",
        "description": "Shared data sets",
    }
    alice = world.api(world.alice)
    assert alice.get(f"/api/v1/storage/{body['id']}/").json() == body
    assert "vision-scratch" in [s["name"] for s in alice.get("/api/v1/storage/").json()["results"]]
    assert storage_audit() == [("storage.create", "vision-scratch", "carol")]


def test_it_lets_a_platform_admin_create_storage_in_any_department(world, data_root):
    response = create(world, world.admin, department="nlp", name="nlp-claims", kind="pvc", pvc_name="nlp-claims")
    assert response.status_code == 201, response.json()
    assert (volume("nlp-claims").department.slug, volume("nlp-claims").pvc_name) == ("nlp", "nlp-claims")
    assert storage_audit() == [("storage.create", "nlp-claims", "admin")]


def test_it_forbids_members_to_create_change_or_delete_storage(world, data_root, datasets):
    alice, target = world.api(world.alice), volume()
    answers = [
        create(world, world.alice, local_path=str(datasets)),
        alice.patch(f"/api/v1/storage/{target.pk}/", {"description": "mine now"}, format="json"),
        alice.delete(f"/api/v1/storage/{target.pk}/"),
    ]
    assert [answer.status_code for answer in answers] == [403, 403, 403]
    assert "Only admins of vision" in answers[0].json()["detail"]
    assert Storage.objects.filter(department__slug="vision").count() == 1
    assert volume().description == "Demo data sets"
    assert storage_audit() == []


def test_it_does_not_reveal_another_departments_volumes(world, data_root, datasets):
    bob, theirs = world.api(world.bob), volume()
    assert bob.get(f"/api/v1/storage/{theirs.pk}/").status_code == 404
    assert bob.patch(f"/api/v1/storage/{theirs.pk}/", {"description": "x"}, format="json").status_code == 404
    assert bob.delete(f"/api/v1/storage/{theirs.pk}/").status_code == 404
    created = create(world, world.bob, local_path=str(datasets))
    assert created.status_code == 400
    assert created.json()["department"] == ["You are not a member of a department called 'vision'."]
    assert world.api(world.carol).get(f"/api/v1/storage/{volume('nlp-corpora').pk}/").status_code == 404
    assert Storage.objects.count() == 2


# --- What a volume may be ---------------------------------------------------------------------


def test_it_reports_every_problem_of_a_request_at_once(world, data_root):
    response = create(
        world,
        world.carol,
        name="Not A Name",
        kind="local",
        local_path="data/scratch",
        description="x" * 201,
        size="10G",
    )
    assert response.status_code == 400
    errors = response.json()
    assert set(errors) == {"name", "local_path", "description", "size"}
    assert "Use lower-case letters, digits and '-'" in " ".join(errors["name"])
    assert errors["local_path"] == ["Give an absolute path without '..', e.g. /data/vision."]
    assert errors["size"] == ["Unknown field."]
    assert storage_audit() == []


def test_it_says_when_the_name_is_taken_in_the_department(world, data_root):
    response = create(world, world.carol, name="vision-datasets", kind="pvc", pvc_name="claim", local_path="relative")
    assert response.status_code == 400
    assert response.json() == {"name": ["Storage vision-datasets already exists in vision; choose another name."]}
    # Another department may use the same name.
    assert (
        create(world, world.admin, department="nlp", name="vision-datasets", kind="pvc", pvc_name="claim").status_code
        == 201
    )


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"kind": "local"}, "local_path", "Local storage needs the absolute path of a directory"),
        ({"kind": "pvc"}, "pvc_name", "PVC storage needs the name of a PersistentVolumeClaim"),
        ({"kind": "pvc", "pvc_name": "Bad_Claim"}, "pvc_name", "Give the PersistentVolumeClaim's name"),
        ({"kind": "nfs", "local_path": "/srv"}, "kind", '"nfs" is not a valid choice.'),
        ({"kind": "local", "local_path": "/srv/../etc"}, "local_path", "Give an absolute path without '..'"),
        ({"kind": "local", "local_path": "/srv/da\nta"}, "local_path", "Give a path of printable characters"),
        (
            {"kind": "local", "local_path": "/srv/"},
            "local_path",
            "Write the path without '.', '//' or a trailing '/': /srv.",
        ),
        ({"kind": "local", "local_path": "//srv/./data"}, "local_path", "/srv/data."),
    ],
)
def test_it_says_what_the_kind_needs(world, data_root, fields, field, message):
    body = {"department": "vision", "name": "vision-scratch", **fields}
    response = world.api(world.carol).post("/api/v1/storage/", body, format="json")
    assert response.status_code == 400
    assert message in " ".join(response.json()[field]), response.json()


def test_it_refuses_a_path_no_file_can_have(world, data_root):
    # JSON may carry a lone surrogate, which no file name on the host can hold.
    body = '{"department": "vision", "name": "vision-scratch", "kind": "local", "local_path": "/srv/\\ud800"}'
    response = world.api(world.carol).generic("POST", "/api/v1/storage/", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["local_path"] == ["Surrogate characters are not allowed: U+D800."]


def test_it_refuses_a_directory_that_does_not_exist_or_is_a_file(world, data_root, tmp_path):
    (tmp_path / "notes.txt").write_text("not a directory")
    missing = create(world, world.carol, local_path=f"{tmp_path}/nowhere")
    assert missing.json()["local_path"] == [
        f"There is no directory {tmp_path}/nowhere on this host; create it first "
        "(the portal does not create storage directories)."
    ]
    assert create(world, world.carol, local_path=f"{tmp_path}/notes.txt").json()["local_path"] == [
        f"{tmp_path}/notes.txt is a file, not a directory."
    ]


def _portal_paths(data_root: Path) -> dict[str, tuple[str, str]]:
    (data_root / "jobs").mkdir()
    checkout = django_settings.BASE_DIR
    return {
        "the data root": (str(data_root), "is the portal's data root"),
        "inside the data root": (str(data_root / "jobs"), "lies inside the portal's data root"),
        "above the data root": (str(data_root.parent), "contains the portal's data root"),
        "the storage area itself": (str(data_root / "storage"), "lies inside the portal's data root"),
        "the checkout": (str(checkout), "is the portal's checkout"),
        "inside the checkout": (str(checkout / "quotas"), "lies inside the portal's checkout"),
        "above the checkout": (str(checkout.parent), "contains the portal's checkout"),
        "the virtualenv": (sys.prefix, "the portal's"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "the data root",
        "inside the data root",
        "above the data root",
        "the storage area itself",
        "the checkout",
        "inside the checkout",
        "above the checkout",
        "the virtualenv",
    ],
)
def test_it_refuses_a_volume_on_the_portals_own_directories(world, data_root, case):
    path, message = _portal_paths(data_root)[case]
    response = create(world, world.carol, local_path=path)
    assert response.status_code == 400
    said = " ".join(response.json()["local_path"])
    if case == "above the checkout" and Path(data_root).is_relative_to(path):
        # A checkout under /tmp (as the test's data root is): its parent holds both; either is the reason given.
        assert "contains the portal's checkout" in said or "contains the portal's data root" in said, said
    else:
        assert message in said, response.json()
    assert not Storage.objects.filter(name="vision-scratch").exists()


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/", "/ is a system directory"),
        ("/etc", "/etc is a system directory"),
        ("/etc/ssl", "lies inside a system directory (/etc)"),
        ("/proc", "is a system directory"),
        ("/sys/kernel", "lies inside a system directory (/sys)"),
        ("/dev", "is a system directory"),
        ("/usr/local", "lies inside a system directory (/usr)"),
        ("/lib", "is a system directory"),
        ("/boot", "is a system directory"),
        ("/root", "is a system directory"),
        ("/run", "is a system directory"),
        ("/var", "contains a system directory"),
    ],
)
def test_it_refuses_a_volume_on_a_system_directory(world, data_root, path, message):
    response = create(world, world.carol, local_path=path)
    assert response.status_code == 400
    assert message in " ".join(response.json()["local_path"]), response.json()


def test_it_follows_symlinks_before_deciding(world, data_root, tmp_path):
    (tmp_path / "innocent").symlink_to("/etc")
    (tmp_path / "shortcut").symlink_to(data_root / "jobs", target_is_directory=True)
    (data_root / "jobs").mkdir()
    to_etc = create(world, world.carol, local_path=f"{tmp_path}/innocent")
    assert to_etc.json()["local_path"] == [
        f"{tmp_path}/innocent (which is /etc) is a system directory; jobs may not "
        "mount it. Choose a directory made for the data."
    ]
    into_portal = create(world, world.carol, local_path=f"{tmp_path}/shortcut")
    assert "lies inside the portal's data root" in into_portal.json()["local_path"][0]


def test_it_allows_volumes_in_the_portals_storage_area(world, data_root):
    (data_root / "storage" / "vision-scratch").mkdir()
    response = create(world, world.carol, local_path=str(data_root / "storage" / "vision-scratch"))
    assert response.status_code == 201, response.json()


# --- Changing and deleting --------------------------------------------------------------------


def test_it_changes_only_the_fields_sent_and_records_before_and_after(world, data_root, datasets):
    carol, target = world.api(world.carol), volume()
    path = target.local_path
    described = carol.patch(f"/api/v1/storage/{target.pk}/", {"description": "Images"}, format="json")
    assert described.status_code == 200, described.json()
    assert (described.json()["local_path"], described.json()["description"]) == (path, "Images")
    moved = carol.patch(f"/api/v1/storage/{target.pk}/", {"kind": "pvc", "pvc_name": "vision-claim"}, format="json")
    assert (moved.json()["kind"], moved.json()["pvc_name"], moved.json()["local_path"]) == ("pvc", "vision-claim", "")
    assert storage_audit() == [("storage.update", "vision-datasets", "carol")] * 2
    last = AuditEvent.objects.filter(action="storage.update").order_by("id").last().data
    assert (last["before"]["local_path"], last["after"]["pvc_name"]) == (path, "vision-claim")


def test_it_refuses_a_location_of_the_other_kind_and_a_new_name(world, data_root):
    carol, target = world.api(world.carol), volume()
    response = carol.patch(
        f"/api/v1/storage/{target.pk}/", {"pvc_name": "claim", "name": "renamed", "department": "nlp"}, format="json"
    )
    assert response.status_code == 400
    assert set(response.json()) == {"pvc_name", "name", "department"}
    assert 'send "kind": "pvc" too' in response.json()["pvc_name"][0]
    target.refresh_from_db()
    assert (target.name, target.kind, target.pvc_name) == ("vision-datasets", "local", "")


def test_it_validates_the_path_again_on_every_change(world, data_root):
    target = volume()
    Storage.objects.filter(pk=target.pk).update(local_path="/etc")  # as saved before the rule existed
    response = world.api(world.carol).patch(f"/api/v1/storage/{target.pk}/", {"description": "x"}, format="json")
    assert response.status_code == 400
    assert "/etc is a system directory" in response.json()["local_path"][0]


def test_it_deletes_a_volume_no_job_mounts(world, data_root):
    target = volume()
    response = world.api(world.carol).delete(f"/api/v1/storage/{target.pk}/")
    assert response.status_code == 204
    assert not Storage.objects.filter(pk=target.pk).exists()
    assert storage_audit() == [("storage.delete", "vision-datasets", "carol")]
    assert os.path.isdir(target.local_path), "the data stays"


def test_it_refuses_to_delete_a_volume_an_unfinished_job_mounts_and_names_the_jobs(world, data_root):
    mounts = [{"storage": "vision-datasets", "path": "/data", "read_only": True}]
    job = world.api(world.alice).post("/api/v1/jobs/", {**JOB, "department": "vision", "mounts": mounts}, format="json")
    assert job.status_code == 201, job.json()
    carol, target = world.api(world.carol), volume()
    refused = carol.delete(f"/api/v1/storage/{target.pk}/")
    assert refused.status_code == 409
    assert refused.json() == {
        "detail": f"Jobs {job.json()['id']} mount vision-datasets and have not finished; delete it when they have."
    }
    assert Storage.objects.filter(pk=target.pk).exists()
    assert world.api(world.alice).post(f"/api/v1/jobs/{job.json()['id']}/cancel/").status_code == 200
    assert carol.delete(f"/api/v1/storage/{target.pk}/").status_code == 204


def test_the_path_rule_refuses_what_no_file_name_can_hold_even_without_the_api():
    # The console's forms do not refuse lone surrogates as the API's JSON fields do.
    assert local_path_problems("/srv/\ud800", protected=[]) == [
        "Give a path of printable characters (no control characters), e.g. /data/vision."
    ]


def test_the_admin_site_refuses_the_same_paths(world, data_root, client):
    client.force_login(world.admin)
    form = {
        "department": volume().department_id,
        "name": "vision-scratch",
        "kind": "local",
        "local_path": "/etc",
        "pvc_name": "",
        "description": "",
    }
    response = client.post("/admin/clusters/storage/add/", form)
    assert response.status_code == 200  # the form again, with the reason
    assert "/etc is a system directory" in response.content.decode()
    assert not Storage.objects.filter(name="vision-scratch").exists()
