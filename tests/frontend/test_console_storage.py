"""The admin console's storage pages: create, edit, validate and delete a department's volumes."""

import pytest

from accounts.models import AuditEvent
from clusters.models import Storage
from tests.frontend.console_helpers import audit_actions, browser, submit, text

# --- Storage ------------------------------------------------------------------------------------


def test_a_dept_admin_creates_edits_and_deletes_storage(world, tmp_path):
    carol = browser(world.carol)
    (tmp_path / "scratch").mkdir()
    created = carol.post(
        "/console/departments/vision/storage/",
        {"name": "vision-scratch", "kind": "local", "local_path": f"{tmp_path}/scratch", "description": "Scratch"},
        follow=True,
    )
    assert "Storage vision-scratch created." in text(created)
    volume = Storage.objects.get(department__slug="vision", name="vision-scratch")
    assert (volume.kind, volume.local_path) == ("local", f"{tmp_path}/scratch")
    assert carol.get(f"/console/departments/vision/storage/{volume.pk}/").status_code == 200
    carol.post(
        f"/console/departments/vision/storage/{volume.pk}/",
        {"kind": "pvc", "pvc_name": "scratch-claim", "local_path": "/ignored"},
    )
    volume.refresh_from_db()
    assert (volume.kind, volume.pvc_name, volume.local_path) == ("pvc", "scratch-claim", "")
    assert "Delete storage volume vision-scratch?" in text(
        carol.get(f"/console/departments/vision/storage/{volume.pk}/delete/")
    )
    deleted = carol.post(f"/console/departments/vision/storage/{volume.pk}/delete/", follow=True)
    assert "Storage vision-scratch deleted." in text(deleted)
    assert not Storage.objects.filter(pk=volume.pk).exists()
    assert audit_actions(department__slug="vision") == [
        ("storage.create", "vision-scratch"),
        ("storage.update", "vision-scratch"),
        ("storage.delete", "vision-scratch"),
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"name": "scratch", "kind": "local", "local_path": "data/scratch"},
            "Give an absolute path without &#x27;..&#x27;",
        ),
        (
            {"name": "scratch", "kind": "local", "local_path": "/data/../etc"},
            "Give an absolute path without &#x27;..&#x27;",
        ),
        ({"name": "scratch", "kind": "local", "local_path": ""}, "Local storage needs the absolute path"),
        ({"name": "scratch", "kind": "pvc", "pvc_name": "Bad_Claim"}, "Give the PersistentVolumeClaim&#x27;s name"),
        (
            {"name": "Not A Name", "kind": "pvc", "pvc_name": "claim"},
            "Use lower-case letters, digits and &#x27;-&#x27;",
        ),
        ({"name": "vision-datasets", "kind": "pvc", "pvc_name": "claim"}, "already exists"),
        ({"name": "scratch", "kind": "local", "local_path": "/etc"}, "/etc is a system directory"),
    ],
)
def test_storage_is_validated_as_the_model_expects(world, data, message):
    response = browser(world.carol).post("/console/departments/vision/storage/", data)
    assert response.status_code == 400
    assert message in text(response)
    assert Storage.objects.filter(department__slug="vision").count() == 1
    assert not AuditEvent.objects.filter(action__startswith="storage.").exists()


def test_storage_that_an_unfinished_job_mounts_is_not_deleted(world):
    job = submit(world, world.alice, mounts=[{"storage": "vision-datasets", "path": "/data", "read_only": True}])
    volume = Storage.objects.get(name="vision-datasets")
    response = browser(world.carol).post(f"/console/departments/vision/storage/{volume.pk}/delete/")
    assert response.status_code == 409
    assert f"Jobs {job['id']} mount vision-datasets and have not finished" in text(response)
    assert Storage.objects.filter(pk=volume.pk).exists()


def test_storage_of_another_department_is_not_found(world):
    theirs = Storage.objects.get(name="nlp-corpora")
    carol = browser(world.carol)
    assert carol.get(f"/console/departments/vision/storage/{theirs.pk}/").status_code == 404
    assert carol.post(f"/console/departments/vision/storage/{theirs.pk}/delete/").status_code == 404
    assert carol.post(f"/console/departments/nlp/storage/{theirs.pk}/delete/").status_code == 404
    assert browser(world.admin).get(f"/console/departments/nlp/storage/{theirs.pk}/").status_code == 200
    assert Storage.objects.filter(pk=theirs.pk).exists()
