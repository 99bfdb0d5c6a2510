"""The job submission form: the browser's view of jobs.services.job_submit's input.

The form only turns text into the API's input shape (lists, mappings, numbers)
and offers the choices the user may use; every rule is the service's, and its
errors are put back beside the matching fields.
"""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from accounts import selectors as account_selectors
from core.code_url import MAX_CODE_URL
from images import selectors as image_selectors
from jobs import services as job_services
from quotas import selectors as quota_selectors

SECONDS_PER_HOUR = 3600
# Service field -> form field, where they differ.
FORM_FIELD = {"max_runtime_seconds": "max_runtime"}


def _unique(items):
    return list(dict.fromkeys(items))


class JobForm(forms.Form):
    name = forms.CharField(
        label=_("Name"), max_length=200, help_text=_("Lower-case letters, digits and '-', e.g. resnet-baseline.")
    )
    department = forms.ChoiceField(label=_("Department"))
    cluster = forms.ChoiceField(label=_("Cluster"))
    code_url = forms.CharField(
        label=_("Code URL"),
        max_length=MAX_CODE_URL,  # the limit of the one code-URL rule (core.code_url)
        strip=False,
        help_text=_("A git repository: https://, ssh://, git:// or git@host:path."),
    )
    code_ref = forms.CharField(
        label=_("Code ref"),
        max_length=500,
        required=False,
        help_text=_("Branch, tag or commit; empty = the default branch."),
    )
    command = forms.CharField(
        label=_("Command"),
        max_length=100_000,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("Run in the repository's folder, e.g. python train.py --epochs 3."),
    )
    image = forms.ChoiceField(label=_("Image"))
    requirements = forms.CharField(
        label=_("Requirements"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("Extra pip requirements, one per line; the repository's requirements.txt is installed too."),
    )
    workers = forms.IntegerField(label=_("Workers"), initial=1, help_text=_("More than 1 = a distributed (gang) job."))
    gpus_per_worker = forms.FloatField(
        label=_("GPUs per worker"),
        initial=1,
        help_text=_("0, a fraction such as 0.5 on shared pools, or a whole number."),
    )
    gpu_type = forms.ChoiceField(label=_("GPU type"), required=False)
    priority = forms.ChoiceField(label=_("Priority"))
    mounts = forms.CharField(
        label=_("Mounts"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("One per line: storage:/path, with :ro at the end for read-only, e.g. vision-datasets:/data:ro."),
    )
    env = forms.CharField(
        label=_("Environment"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("One variable per line: NAME=value."),
    )
    tensorboard = forms.BooleanField(
        label=_("TensorBoard"),
        required=False,
        initial=True,
        help_text=_("Offer TensorBoard for this job's event files."),
    )
    max_runtime = forms.FloatField(
        label=_("Max runtime"),
        required=False,
        min_value=0,
        max_value=30 * 24,
        help_text=_("Hours; empty = 7 days. The job is stopped after this."),
    )

    def __init__(self, *args, user, **kwargs):
        kwargs.setdefault("label_suffix", "")  # labels read exactly "Name", "Code URL" ...
        super().__init__(*args, **kwargs)
        departments = list(account_selectors.departments_usable(user=user))
        quotas = list(quota_selectors.quotas_of(departments=departments))
        self.fields["department"].choices = [(d.slug, f"{d.name} ({d.slug})") for d in departments]
        self.fields["cluster"].choices = [(name, name) for name in sorted(_unique(q.pool.cluster.name for q in quotas))]
        self.fields["gpu_type"].choices = [(t, t) for t in _unique(q.pool.gpu_type for q in quotas)]
        images = [image.name for image in image_selectors.images_for(user=user)]
        self.fields["image"].choices = [(name, name) for name in images]
        preemptible = _("preemptible")  # outside the f-string, where makemessages cannot see it
        self.fields["priority"].choices = [
            (p.name, f"{p.name} ({p.value}{', ' + str(preemptible) if p.preemptible else ''})")
            for p in quota_selectors.priority_classes()
        ]
        if not self.is_bound and departments:
            first = departments[0]
            own = [q for q in quotas if q.department_id == first.pk]
            defaults = {
                "department": first.slug,
                "cluster": own[0].pool.cluster.name if own else "",
                "gpu_type": own[0].pool.gpu_type if own else "",
                "gpus_per_worker": 1 if own else 0,
                "image": "python" if "python" in images else (images[0] if images else ""),
                "priority": "normal",
                "workers": 1,
                "tensorboard": True,
            }
            self.initial = {**defaults, **self.initial}

    @classmethod
    def initial_from_job(cls, job) -> dict:
        """Form values that describe an existing job (clone)."""
        spec = job_services.job_as_input(job)
        runtime = spec.pop("max_runtime_seconds")
        return {
            **spec,
            "requirements": "\n".join(spec["requirements"]),
            "mounts": "\n".join(
                f"{m['storage']}:{m['path']}{':ro' if m.get('read_only') else ''}" for m in spec["mounts"]
            ),
            "env": "\n".join(f"{name}={value}" for name, value in spec["env"].items()),
            "gpus_per_worker": f"{spec['gpus_per_worker']:g}",
            "max_runtime": f"{runtime / SECONDS_PER_HOUR:g}" if runtime else "",
        }

    def clean_requirements(self):
        return [line.strip() for line in self.cleaned_data["requirements"].splitlines() if line.strip()]

    def clean_mounts(self):
        mounts, problems = [], []
        for number, line in enumerate(self.cleaned_data["mounts"].splitlines(), start=1):
            line = line.strip()
            if not line:
                continue
            read_only = line.endswith(":ro")
            storage, sep, path = line.removesuffix(":ro").partition(":")
            if not sep or not storage or not path:
                problems.append(
                    _("Line %(number)s: write storage:/path (and :ro for read-only), not %(line)r.")
                    % {"number": number, "line": line}
                )
                continue
            mounts.append({"storage": storage.strip(), "path": path.strip(), "read_only": read_only})
        if problems:
            raise forms.ValidationError(problems)
        return mounts

    def clean_env(self):
        env, problems = {}, []
        for number, line in enumerate(self.cleaned_data["env"].splitlines(), start=1):
            if not line.strip():
                continue
            name, sep, value = line.partition("=")
            if not sep:
                problems.append(
                    _("Line %(number)s: write NAME=value, not %(line)r.") % {"number": number, "line": line.strip()}
                )
                continue
            env[name.strip()] = value
        if problems:
            raise forms.ValidationError(problems)
        return env

    def submission(self) -> tuple[dict, dict]:
        """(values that parsed, in the service's shape; messages of the fields that did not), as the API passes them."""
        self.is_valid()
        values = {}
        for name, value in self.cleaned_data.items():
            if name == "max_runtime":
                values["max_runtime_seconds"] = round(value * SECONDS_PER_HOUR) if value is not None else None
            else:
                values[name] = value
        service_name = {form: service for service, form in FORM_FIELD.items()}
        type_errors = {service_name.get(field, field): list(messages) for field, messages in self.errors.items()}
        return values, type_errors

    def add_service_errors(self, errors: dict, *, known: dict) -> None:
        """Show the service's messages beside their fields (those of ``known`` fields are shown already)."""
        for key, messages in errors.items():
            if key in known:
                continue
            field = FORM_FIELD.get(key, key)
            flat = [str(message) for message in (messages if isinstance(messages, list) else [messages])]
            self.add_error(field if field in self.fields else None, flat)
