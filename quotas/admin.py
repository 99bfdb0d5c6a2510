from django.contrib import admin

from quotas.models import AuditEvent, Cluster, Department, FrameworkImage, GpuPool, Membership, PriorityClass, Quota, Storage


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 0


@admin.register(Department)
class DepartmentAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline, QuotaInline]


class GpuPoolInline(admin.TabularInline):
    model = GpuPool
    extra = 0


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "backend"]
    inlines = [GpuPoolInline]


@admin.register(PriorityClass)
class PriorityClassAdmin(admin.ModelAdmin):
    list_display = ["name", "value", "preemptible"]


@admin.register(FrameworkImage)
class FrameworkImageAdmin(admin.ModelAdmin):
    list_display = ["name", "framework", "image", "official", "department"]
    list_filter = ["framework", "official"]


@admin.register(Storage)
class StorageAdmin(admin.ModelAdmin):
    list_display = ["name", "department", "kind", "local_path", "pvc_name"]
    list_filter = ["kind", "department"]


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["at", "actor", "action", "target", "department"]
    list_filter = ["action"]

    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False
