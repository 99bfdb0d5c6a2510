"""The Django admin (the platform admins' "Platform admin") is the portal's: its name, and plural names in English."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_admin_site_carries_the_portals_name(world):
    client = Client()
    client.force_login(world.admin)
    text = client.get("/admin/").content.decode()
    assert "<title>Platform administration | GPU Portal admin</title>" in text
    assert "GPU Portal administration" in text
    assert ">Deliveries</a>" in text and "Deliverys" not in text
    assert "Django administration" not in text


@pytest.mark.parametrize(
    ("label", "singular", "plural"),
    [
        ("webhooks.Delivery", "delivery", "deliveries"),
        ("accounts.ApiToken", "API token", "API tokens"),
        ("clusters.GpuPool", "GPU pool", "GPU pools"),
        ("clusters.Storage", "storage", "storage"),
        ("tensorboards.TensorBoard", "TensorBoard", "TensorBoards"),
        ("models_registry.ModelAlias", "model alias", "model aliases"),
        ("serving.VariantStats", "variant statistics", "variant statistics"),
        ("quotas.PriorityClass", "priority class", "priority classes"),
    ],
)
def test_models_have_their_names(label, singular, plural):
    meta = apps.get_model(label)._meta
    assert (str(meta.verbose_name), str(meta.verbose_name_plural)) == (singular, plural)


def test_no_plural_is_made_by_adding_an_s_to_a_word_that_ends_in_one():
    """Django's default plural is the name + "s": "deliverys", "model aliass", "variant statss"."""
    portal_apps = {"core", "accounts", "clusters", "quotas", "images", "webhooks", "jobs", "tensorboards"}
    portal_apps |= {"models_registry", "serving"}
    for model in apps.get_models():
        if model._meta.app_label not in portal_apps:
            continue
        plural = str(model._meta.verbose_name_plural)
        assert not plural.endswith(("ys", "ss", "xs", "chs", "shs")), f"{model.__name__}: {plural!r}"
