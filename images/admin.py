from django.contrib import admin

from images.models import FrameworkImage, ImageBuild


@admin.register(FrameworkImage)
class FrameworkImageAdmin(admin.ModelAdmin):
    list_display = ["name", "framework", "image", "official", "department"]
    list_filter = ["framework", "official"]


@admin.register(ImageBuild)
class ImageBuildAdmin(admin.ModelAdmin):
    # Builds change through the portal's services (launch, follow, cancel); the admin only looks.
    list_display = ["id", "name", "department", "cluster", "status", "requested_by", "created_at", "finished_at"]
    list_filter = ["status", "department", "cluster"]
    search_fields = ["name", "requested_by__username"]
    readonly_fields = [field.name for field in ImageBuild._meta.fields]

    def has_add_permission(self, request):
        return False
