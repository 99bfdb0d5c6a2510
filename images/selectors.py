"""Reads of image builds: what a user may see."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts import permissions
from images.models import FrameworkImage, ImageBuild


def builds_for(*, user, department: str = "", status: str = "") -> QuerySet[ImageBuild]:
    builds = ImageBuild.objects.select_related("department", "cluster", "requested_by", "image")
    if not permissions.is_platform_admin(user):
        builds = builds.filter(department_id__in=list(permissions.roles(user)))
    if department:
        builds = builds.filter(department__slug=department)
    if status:
        builds = builds.filter(status__in=[s.strip() for s in status.split(",") if s.strip()])
    return builds


def build_get(*, user, build_id: int) -> ImageBuild | None:
    """The build if the user may see it; None otherwise (answered as 404 alike)."""
    return builds_for(user=user).filter(pk=build_id).first()


def images_for(*, user) -> QuerySet[FrameworkImage]:
    return permissions.scope(user, FrameworkImage.objects.select_related("department"))
