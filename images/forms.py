"""The image build form: the browser's view of images.services.build_submit's input. Every rule is the
service's; its errors are put back beside the matching fields."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from accounts import selectors as account_selectors
from clusters.models import Cluster
from clusters.services import cluster_choice_label, cluster_health
from core.code_url import MAX_CODE_URL
from images.models import FrameworkImage


class ClusterSelect(forms.Select):
    """A cluster selector that shows the clusters taking nothing now disabled, their label saying why
    ("k8s-demo (unreachable: no connection settings)"); the service still refuses them if sent."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.disabled_values: set[str] = set()

    def create_option(self, name, value, *args, **kwargs):
        option = super().create_option(name, value, *args, **kwargs)
        if str(value) in self.disabled_values:
            option["attrs"]["disabled"] = True
        return option


def cluster_choices(clusters, field: forms.ChoiceField, *, builds: bool = False) -> None:
    """Offer ``clusters`` in ``field`` (a ClusterSelect), each labelled with its health; unusable ones disabled
    (for ``builds``, a cluster without the Training Operator still takes them)."""
    field.choices = [(c.name, cluster_choice_label(c)) for c in clusters]
    usable = (lambda c: cluster_health(c).takes_builds) if builds else (lambda c: cluster_health(c).usable)
    field.widget.disabled_values = {c.name for c in clusters if not usable(c)}


class BuildForm(forms.Form):
    name = forms.CharField(
        label=_("Image name"),
        max_length=60,
        help_text=_("The name in the catalogue: lower-case letters, digits and '-', e.g. torch-audio."),
    )
    department = forms.ChoiceField(label=_("Department"))
    cluster = forms.ChoiceField(label=_("Cluster"), widget=ClusterSelect)
    framework = forms.ChoiceField(label=_("Framework"), choices=FrameworkImage.Framework.choices, initial="python")
    dockerfile = forms.CharField(
        label=_("Dockerfile"),
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false"}),
        help_text=_("Paste a Dockerfile; or leave this empty and give a repository below."),
    )
    code_url = forms.CharField(
        label=_("Repository URL"),
        max_length=MAX_CODE_URL,  # the limit of the one code-URL rule (core.code_url)
        required=False,
        help_text=_("An https:// git repository that holds the Dockerfile."),
    )
    code_ref = forms.CharField(
        label=_("Branch, tag or commit"),
        max_length=500,
        required=False,
        help_text=_("A branch name, refs/tags/<tag> or a commit SHA; empty = the default branch."),
    )
    context_path = forms.CharField(
        label=_("Context directory"),
        max_length=500,
        required=False,
        help_text=_("Directory of the repository to build in; empty = its root."),
    )
    dockerfile_path = forms.CharField(
        label=_("Dockerfile path"),
        max_length=500,
        required=False,
        initial="Dockerfile",
        help_text=_("Relative to the context directory."),
    )
    base_packages = forms.CharField(
        label=_("Packages it provides"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("pip requirements the image has installed, one per line (the local executor installs them)."),
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["department"].choices = [(d.slug, d.slug) for d in account_selectors.departments_usable(user=user)]
        clusters = list(Cluster.objects.filter(backend=Cluster.Backend.KUBERNETES).order_by("pk"))
        cluster_choices(clusters, self.fields["cluster"], builds=True)
        usable = [c.name for c in clusters if c.name not in self.fields["cluster"].widget.disabled_values]
        if usable and not self.is_bound:
            self.initial.setdefault("cluster", usable[0])

    def submission(self) -> dict:
        """The service's input from the raw form data (types are simple: text and lists)."""
        data = {name: (self.data.get(name) or "") for name in self.fields}
        data["base_packages"] = [line.strip() for line in data["base_packages"].splitlines() if line.strip()]
        return data

    def add_service_errors(self, errors: dict) -> None:
        for field, messages in errors.items():
            for message in messages:
                self.add_error(field if field in self.fields else None, str(message))
