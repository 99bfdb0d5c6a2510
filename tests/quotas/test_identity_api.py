import pytest

from accounts.models import AuditEvent, Department
from clusters.models import Storage
from images.models import FrameworkImage
from quotas.models import Quota

ENDPOINTS = [
    "/api/v1/me/",
    "/api/v1/departments/",
    "/api/v1/departments/vision/",
    "/api/v1/priority-classes/",
    "/api/v1/clusters/",
    "/api/v1/images/",
    "/api/v1/storage/",
    "/api/v1/audit/",
]


@pytest.mark.parametrize("path", ENDPOINTS)
def test_it_answers_anonymous_callers_with_401(world, path):
    response = world.api().get(path)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_it_rejects_an_unknown_token(world):
    client = world.api()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert client.get("/api/v1/me/").status_code == 401


def test_it_gives_no_hint_which_credential_was_wrong(world):
    wrong_password = world.api().post("/api/v1/auth/token/", {"username": "alice", "password": "nope"}, format="json")
    wrong_user = world.api().post("/api/v1/auth/token/", {"username": "mallory", "password": "nope"}, format="json")
    assert wrong_password.status_code == wrong_user.status_code == 400
    assert (
        wrong_password.json()
        == wrong_user.json()
        == {"non_field_errors": ["Unable to sign in with that username and password."]}
    )


def test_it_names_every_missing_credential(world):
    response = world.api().post("/api/v1/auth/token/", {}, format="json")
    assert response.status_code == 400
    assert set(response.json()) == {"username", "password"}


def test_it_accepts_the_browser_session(world, client):
    client.force_login(world.alice)
    assert client.get("/api/v1/me/").json()["username"] == "alice"


def test_it_describes_the_caller(world):
    assert world.api(world.carol).get("/api/v1/me/").json() == {
        "username": "carol",
        "is_platform_admin": False,
        "departments": [{"slug": "vision", "name": "Computer Vision", "role": "dept_admin"}],
    }
    assert world.api(world.admin).get("/api/v1/me/").json()["is_platform_admin"] is True


def test_it_shows_members_only_their_departments(world):
    alice = world.api(world.alice).get("/api/v1/departments/").json()
    assert [d["slug"] for d in alice["results"]] == ["vision"]
    assert alice["results"][0]["role"] == "member"
    admin = world.api(world.admin).get("/api/v1/departments/").json()
    assert [d["slug"] for d in admin["results"]] == ["nlp", "vision"]


def test_it_hides_other_departments_with_404(world):
    assert world.api(world.alice).get("/api/v1/departments/nlp/").status_code == 404
    assert world.api(world.alice).get("/api/v1/departments/no-such-dept/").status_code == 404
    assert world.api(world.bob).put("/api/v1/departments/vision/quotas/", [], format="json").status_code == 404


def test_it_shows_a_department_with_quotas_and_live_usage(world):
    body = world.api(world.alice).get("/api/v1/departments/vision/").json()
    assert body["slug"] == "vision"
    assert body["quotas"] == [
        {"cluster": "local", "gpu_type": "sim", "nominal": 4, "borrowing_limit": None, "lending_limit": None}
    ]
    assert body["usage"] == [
        {
            "cluster": "local",
            "gpu_type": "sim",
            "nominal": 4,
            "borrowing_limit": None,
            "lending_limit": None,
            "in_use": 0.0,
            "borrowed": 0.0,
            "pending": 0.0,
        }
    ]


def test_it_lets_only_platform_admins_set_quotas(world):
    body = [{"cluster": "local", "gpu_type": "sim", "nominal": 2, "borrowing_limit": 2, "lending_limit": 1}]
    for user in (world.alice, world.carol):
        response = world.api(user).put("/api/v1/departments/vision/quotas/", body, format="json")
        assert response.status_code == 403
        assert "platform admins" in response.json()["detail"]
    assert Quota.objects.get(department__slug="vision").nominal == 4

    response = world.api(world.admin).put("/api/v1/departments/vision/quotas/", body, format="json")
    assert response.status_code == 200
    assert response.json()["quotas"] == body
    quota = Quota.objects.get(department__slug="vision")
    assert (quota.nominal, quota.borrowing_limit, quota.lending_limit) == (2, 2, 1)
    event = AuditEvent.objects.get(action="quota.set")
    assert (event.actor, event.department.slug) == (world.admin, "vision")
    assert event.data["before"][0]["nominal"] == 4 and event.data["after"][0]["nominal"] == 2


def test_it_reports_every_malformed_quota_field_at_once(world):
    body = [
        {"cluster": "local", "gpu_type": "A100", "nominal": 1},
        {"cluster": "elsewhere", "gpu_type": "sim", "nominal": 1},
        {"cluster": "local", "gpu_type": "sim", "nominal": 2, "lending_limit": 3},
        {"cluster": "local", "gpu_type": "sim", "nominal": -1, "borrowing_limit": "lots"},
    ]
    response = world.api(world.admin).put("/api/v1/departments/vision/quotas/", body, format="json")
    assert response.status_code == 400
    errors = response.json()["quotas"]
    assert errors[:3] == [{}, {}, {}]  # business rules are checked once every item parses
    assert errors[3]["nominal"] == ["Ensure this value is greater than or equal to 0."]
    assert errors[3]["borrowing_limit"] == ["A valid integer is required."]
    assert Quota.objects.get(department__slug="vision").nominal == 4  # nothing changed


def test_it_explains_business_rule_violations_with_numbers(world):
    body = [
        {"cluster": "local", "gpu_type": "A100", "nominal": 1},
        {"cluster": "elsewhere", "gpu_type": "sim", "nominal": 1},
        {"cluster": "local", "gpu_type": "sim", "nominal": 6, "lending_limit": 7},
        {"cluster": "local", "gpu_type": "sim", "nominal": 1},
    ]
    errors = world.api(world.admin).put("/api/v1/departments/vision/quotas/", body, format="json").json()["quotas"]
    assert errors[0] == {"gpu_type": ["Cluster 'local' has no 'A100' GPUs; it has: sim."]}
    assert errors[1] == {"cluster": ["No cluster named 'elsewhere'."]}
    assert errors[2] == {
        "lending_limit": ["Cannot lend 7 GPUs out of a nominal quota of 6."],
        "nominal": ["local/sim has 8 GPUs and other departments are guaranteed 4: at most 4 can be nominal here."],
    }
    assert errors[3] == {"gpu_type": ["local/sim is listed twice; give one quota per pool."]}


def test_it_wants_a_list_of_quotas(world):
    response = world.api(world.admin).put("/api/v1/departments/vision/quotas/", {"nominal": 3}, format="json")
    assert response.status_code == 400
    assert "JSON list" in response.json()["quotas"][0]


def test_it_lists_priority_classes_by_value(world):
    body = world.api(world.bob).get("/api/v1/priority-classes/").json()
    assert [(p["name"], p["value"], p["preemptible"]) for p in body["results"]] == [
        ("high", 1000, False),
        ("normal", 500, True),
        ("low", 100, True),
    ]


def test_it_lists_clusters_with_their_pools(world):
    body = world.api(world.bob).get("/api/v1/clusters/").json()
    assert body["results"] == [
        {
            "name": "local",
            "backend": "local",
            "pools": [
                {
                    "gpu_type": "sim",
                    "gpu_memory_gb": 16,
                    "nodes": 1,
                    "gpus_per_node": 8,
                    "total": 8,
                    "allocated": 0,
                    "shareable": True,
                    "placement": "binpack",
                }
            ],
            "health": "unknown",  # not checked yet (the reconcile checks it)
            "health_reason": "",
            "health_message": "",
            "health_checked_at": None,
        }
    ]


def test_it_shows_official_images_and_only_the_callers_custom_ones(world):
    FrameworkImage.objects.create(
        name="vision-detectron",
        framework="pytorch",
        image="reg/vision/det:1",
        department=Department.objects.get(slug="vision"),
    )
    names = lambda user: [i["name"] for i in world.api(user).get("/api/v1/images/").json()["results"]]  # noqa: E731
    assert names(world.alice) == ["python", "pytorch", "tensorflow", "vision-detectron"]
    assert names(world.bob) == ["python", "pytorch", "tensorflow"]
    assert "vision-detectron" in names(world.admin)


def test_it_shows_only_the_departments_storage(world):
    assert [s["name"] for s in world.api(world.alice).get("/api/v1/storage/").json()["results"]] == ["vision-datasets"]
    assert [s["name"] for s in world.api(world.bob).get("/api/v1/storage/").json()["results"]] == ["nlp-corpora"]
    assert Storage.objects.count() == 2


def test_it_paginates_with_a_capped_page_size(world):
    for n in range(210):
        FrameworkImage.objects.create(name=f"img-{n:03}", framework="python", image=f"r/{n}", official=True)
    page = world.api(world.alice).get("/api/v1/images/?page_size=500").json()
    assert page["count"] == 213
    assert len(page["results"]) == 200
    assert page["next"].endswith("page=2&page_size=500")
    assert world.api(world.alice).get("/api/v1/images/?page=99").status_code == 404


def test_it_shows_the_audit_log_to_admins_only(world):
    body = [{"cluster": "local", "gpu_type": "sim", "nominal": 3}]
    world.api(world.admin).put("/api/v1/departments/nlp/quotas/", body, format="json")
    assert world.api(world.alice).get("/api/v1/audit/").status_code == 403
    assert world.api(world.carol).get("/api/v1/audit/").json()["count"] == 0  # nlp is not hers
    events = world.api(world.admin).get("/api/v1/audit/").json()["results"]
    changes = [(e["actor"], e["action"], e["target"]) for e in events if not e["action"].startswith("token.")]
    assert changes == [("admin", "quota.set", "nlp")]
    # The tokens the test clients were given are in it too (department-less: platform admins only).
    assert {e["actor"] for e in events if e["action"] == "token.create"} == {"admin", "alice", "carol"}


def test_it_throttles_anonymous_callers(world, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"anon": "2/minute", "user": "3/minute"},
    }
    from django.core.cache import cache

    cache.clear()
    codes = [world.api().post("/api/v1/auth/token/", {}, format="json").status_code for _ in range(3)]
    assert codes == [400, 400, 429]
    user_codes = [world.api(world.alice).get("/api/v1/me/").status_code for _ in range(4)]
    assert user_codes == [200, 200, 200, 429]
    cache.clear()
