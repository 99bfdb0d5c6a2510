from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from accounts.models import AuditEvent, Department, Membership
from clusters.models import Cluster, GpuPool, Storage
from clusters.storage import local_path_refusals
from core.errors import InvalidInput
from quotas.isolation import cluster_check, cluster_save, quota_isolation_refusal
from quotas.models import PriorityClass, Quota, QuotaLoan


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class QuotaForm(forms.ModelForm):
    class Meta:
        model = Quota
        fields = "__all__"

    def clean(self):
        cleaned = super().clean()
        pool = cleaned.get("pool")
        if pool is not None:
            # A department being added has no row yet: every quota already on the cluster is another's.
            department = getattr(self.instance, "department", None) or Department()
            refusal = quota_isolation_refusal(pool=pool, department=department)
            if refusal:
                raise ValidationError({"pool": refusal})
        return cleaned


class QuotaInline(admin.TabularInline):
    model = Quota
    form = QuotaForm
    extra = 0


@admin.register(Department)
class DepartmentAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline, QuotaInline]


class GpuPoolInline(admin.TabularInline):
    model = GpuPool
    extra = 0


class ClusterForm(forms.ModelForm):
    class Meta:
        model = Cluster
        fields = "__all__"

    def clean(self):
        cleaned = super().clean()
        if {"name", "backend", "settings"} <= set(cleaned):
            probe = Cluster(
                pk=self.instance.pk, name=cleaned["name"], backend=cleaned["backend"], settings=cleaned["settings"]
            )
            try:
                cluster_check(cluster=probe)
            except InvalidInput as exc:
                raise ValidationError(exc.errors) from exc
        return cleaned


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    form = ClusterForm
    list_display = ["name", "backend"]
    inlines = [GpuPoolInline]

    def save_model(self, request, obj, form, change):
        cluster_save(actor=request.user, cluster=obj)


@admin.register(PriorityClass)
class PriorityClassAdmin(admin.ModelAdmin):
    list_display = ["name", "value", "preemptible"]


@admin.register(QuotaLoan)
class QuotaLoanAdmin(admin.ModelAdmin):
    """Read here; made and ended through the console or the API (quotas.services), which check, audit and run a
    scheduling cycle."""

    list_display = ["pk", "from_department", "to_department", "pool", "gpus", "until", "ended_at", "end_reason"]
    list_filter = ["end_reason", "from_department", "to_department"]

    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False


class StorageForm(forms.ModelForm):
    """The path rule of clusters.storage here too: the admin site may not set what the console and the API refuse."""

    class Meta:
        model = Storage
        fields = "__all__"

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("kind") == Storage.Kind.LOCAL:
            problems = local_path_refusals(cleaned.get("local_path") or "")
            if problems:
                raise ValidationError({"local_path": problems})
        return cleaned


@admin.register(Storage)
class StorageAdmin(admin.ModelAdmin):
    form = StorageForm
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
