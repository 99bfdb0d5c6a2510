"""Lifting a lock-out (console button, Django admin, manage.py axes_reset_username) and the audit entries of
sign-ins, failures, lock-outs, sign-outs and tokens (issue 16, item 5; accounts/login.py, accounts/tokens.py)."""

from __future__ import annotations

from io import StringIO

from axes.models import AccessAttempt
from django.conf import settings
from django.core.management import call_command
from django.test import Client

from accounts.models import ApiToken, AuditEvent, Membership
from tests.security.test_login_lockout import WRONG, sign_in, signed_in, token_call


def lock_out(username: str) -> None:
    client = Client(REMOTE_ADDR="198.51.100.40")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, username, WRONG)
    assert sign_in(Client(), username, "anything").status_code == 429


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def actions(**filters) -> list[tuple[str, str]]:
    return list(AuditEvent.objects.filter(**filters).order_by("id").values_list("action", "target"))


def test_a_department_admin_sees_the_lock_out_and_lifts_it_on_the_members_page(world):
    lock_out("alice")
    carol = browser(world.carol)
    page = carol.get("/console/departments/vision/members/").content.decode()
    assert "Locked out of signing in until" in page and "Lift the lock-out of alice" in page
    alice = Membership.objects.get(user=world.alice, department__slug="vision")

    # bob is no admin of vision: refused, and alice stays locked.
    assert browser(world.bob).post(f"/console/departments/vision/members/{alice.pk}/unlock/").status_code == 404
    assert sign_in(Client(), "alice", world.password).status_code == 429

    lifted = carol.post(f"/console/departments/vision/members/{alice.pk}/unlock/", follow=True)
    assert "alice may sign in again" in lifted.content.decode()
    assert "Lift the lock-out of alice" not in lifted.content.decode()
    client = Client()
    assert sign_in(client, "alice", world.password).status_code == 302 and signed_in(client)
    assert AuditEvent.objects.filter(action="login.lockout_lifted", target="alice", actor=world.carol).exists()


def test_a_department_admin_cannot_lift_a_platform_admins_lock_out(world):
    Membership.objects.create(user=world.admin, department=world.carol.memberships.get().department)
    lock_out("admin")
    membership = Membership.objects.get(user=world.admin, department__slug="vision")
    page = browser(world.carol).get("/console/departments/vision/members/").content.decode()
    assert "Locked out of signing in" in page and "Lift the lock-out of admin" not in page
    assert browser(world.carol).post(f"/console/departments/vision/members/{membership.pk}/unlock/").status_code == 403
    assert sign_in(Client(), "admin", world.password).status_code == 429


def test_a_platform_admin_lifts_it_in_the_django_admin(world):
    lock_out("bob")
    admin = browser(world.admin)
    listing = admin.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200 and "bob" in listing.content.decode()
    ids = [str(pk) for pk in AccessAttempt.objects.filter(username="bob").values_list("pk", flat=True)]
    admin.post("/admin/axes/accessattempt/", {"action": "delete_selected", "_selected_action": ids, "post": "yes"})
    assert not AccessAttempt.objects.filter(username="bob").exists()
    assert sign_in(Client(), "bob", world.password).status_code == 302


def test_manage_py_axes_reset_username_lifts_it(world):
    lock_out("carol")
    call_command("axes_reset_username", "carol", stdout=StringIO())
    assert token_call(Client(), "carol", world.password).status_code == 200


def test_sign_ins_failures_lock_outs_and_sign_outs_are_audited(world):
    client = Client(REMOTE_ADDR="192.0.2.50")
    assert sign_in(client, "alice", world.password).status_code == 302
    client.post("/logout/")
    for _ in range(settings.AXES_FAILURE_LIMIT + 3):  # the 3 tries while locked are not entries each
        sign_in(client, "alice", WRONG)
    token_call(Client(), "nobody", WRONG)
    assert actions() == [
        ("login.succeeded", "alice"),
        ("login.logout", "alice"),
        *[("login.failed", "alice")] * (settings.AXES_FAILURE_LIMIT - 1),
        ("login.locked_out", "alice"),
        ("login.failed", "alice"),
        ("login.failed", "nobody"),
    ]
    succeeded = AuditEvent.objects.get(action="login.succeeded")
    assert succeeded.actor == world.alice and succeeded.data == {"address": "192.0.2.50", "path": "/login/"}
    locked = AuditEvent.objects.get(action="login.locked_out")
    assert locked.data["address"] == "192.0.2.50" and locked.data["until"] and locked.data["failures"] == 10
    assert AuditEvent.objects.filter(action="login.failed", target="nobody").get().data["known_user"] is False
    assert "password" not in str(list(AuditEvent.objects.values_list("data", flat=True))).lower()
    assert WRONG not in str(list(AuditEvent.objects.values_list("data", "target")))


def test_a_sign_in_for_a_token_is_audited_with_its_path(world):
    assert token_call(Client(), "bob", world.password).status_code == 200
    assert actions(action__startswith="login.") == [("login.succeeded", "bob")]
    assert AuditEvent.objects.get(action="login.succeeded").data["path"] == "/api/v1/auth/token/"


def test_token_creation_and_revocation_are_audited_by_the_page_and_the_api(world):
    api = world.api(world.alice)
    created = api.post("/api/v1/tokens/", {"name": "ci", "expires_in_days": 30}, format="json").json()
    api.delete(f"/api/v1/tokens/{created['id']}/")
    page = browser(world.alice)
    page.post("/tokens/", {"name": "laptop"})
    laptop = ApiToken.objects.get(name="laptop")
    page.post(f"/tokens/{laptop.pk}/revoke/")
    ci = ApiToken.objects.get(name="ci")
    token_events = actions(action__startswith="token.")
    assert token_events[1:] == [
        ("token.create", f"ci ({ci.prefix}…)"),
        ("token.revoke", f"ci ({ci.prefix}…)"),
        ("token.create", f"laptop ({laptop.prefix}…)"),
        ("token.revoke", f"laptop ({laptop.prefix}…)"),
    ]
    assert token_events[0][0] == "token.create"  # world.api's own token
    event = AuditEvent.objects.get(action="token.create", target__startswith="ci ")
    assert event.actor == world.alice and event.data["expires_at"] == created["expires_at"].replace("Z", "+00:00")
    assert created["key"] not in str(list(AuditEvent.objects.values_list("data", "target")))
