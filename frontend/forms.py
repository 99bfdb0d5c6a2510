"""The job submission form: the browser's view of jobs.services.job_submit's input.

The form only turns text into the API's input shape (lists, mappings, numbers)
and offers the choices the user may use; every rule is the service's, and its
errors are put back beside the matching fields.

The cluster selector labels each cluster with its health (unusable ones are disabled); the GPU types and
images offered are those of the chosen department and cluster (``sizing_choices``: the page's script asks
the sizing endpoint again when the cluster, department or GPU type changes). They are offered, not enforced:
a value sent for another cluster reaches the service, which refuses it with a message that says why.
"""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from accounts import selectors as account_selectors
from clusters.services import cluster_health
from core.code_url import MAX_CODE_URL
from images import selectors as image_selectors
from images.forms import ClusterSelect, cluster_choices
from jobs import services as job_services
from jobs import usage as job_usage
from jobs.submission import DEFAULT_MAX_RUNTIME_SECONDS, images_on_cluster
from quotas import selectors as quota_selectors

SECONDS_PER_HOUR = 3600
# Service field -> form field, where they differ.
FORM_FIELD = {"max_runtime_seconds": "max_runtime"}


def _unique(items):
    return list(dict.fromkeys(items))


class JobForm(forms.Form):
    name = forms.CharField(
        label=_("Name"),
        max_length=200,
        help_text=_("Lower-case letters, digits and '-', starting with a letter, e.g. resnet-baseline."),
    )
    department = forms.ChoiceField(label=_("Department"))
    cluster = forms.ChoiceField(label=_("Cluster"), widget=ClusterSelect)
    code_url = forms.CharField(
        label=_("Code URL"),
        max_length=MAX_CODE_URL,  # the limit of the one code-URL rule (core.code_url)
        strip=False,
        help_text=_(
            "A git repository: https://, ssh://, git:// or git@host:path; on clusters that run local code also "
            "a file:// URL or a local path, e.g. file:///srv/repos/digits."
        ),
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
    # Offered per cluster (sizing_choices), checked by the service: a CharField, so that a value the list no
    # longer offers gets the service's message ("... on cluster X; choose ...") rather than Django's.
    image = forms.CharField(label=_("Image"), widget=forms.Select)
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
    gpu_type = forms.CharField(label=_("GPU type"), required=False, widget=forms.Select)
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
        self.user = user
        departments = list(account_selectors.departments_usable(user=user))
        self.quotas = list(quota_selectors.quotas_of(departments=departments))
        self.fields["department"].choices = [(d.slug, f"{d.name} ({d.slug})") for d in departments]
        clusters = {q.pool.cluster.name: q.pool.cluster for q in self.quotas}
        cluster_choices([clusters[name] for name in sorted(clusters)], self.fields["cluster"])
        usable_clusters = [c for c in clusters.values() if cluster_health(c).usable]
        preemptible = _("preemptible")  # outside the f-string, where makemessages cannot see it
        self.fields["priority"].choices = [
            (p.name, f"{p.name} ({p.value}{', ' + str(preemptible) if p.preemptible else ''})")
            for p in quota_selectors.priority_classes()
        ]
        if not self.is_bound and departments:
            first = departments[0]
            own = [q for q in self.quotas if q.department_id == first.pk]
            usable_own = [q for q in own if q.pool.cluster in usable_clusters] or own
            defaults = {
                "department": first.slug,
                "cluster": usable_own[0].pool.cluster.name if own else "",
                "gpu_type": usable_own[0].pool.gpu_type if own else "",
                "gpus_per_worker": 1 if own else 0,
                "image": "python",
                "priority": "normal",
                "workers": 1,
                "tensorboard": True,
            }
            self.initial = {**defaults, **self.initial}
        chosen = self.chosen()
        types, images = self.sizing_choices(chosen["department"], chosen["cluster"])
        for name, offered in (("gpu_type", types), ("image", images)):
            if chosen[name] and chosen[name] not in offered:
                offered = [*offered, chosen[name]]  # shown as sent, beside the service's message
            self.fields[name].widget.choices = [(value, value) for value in offered]
        if not self.is_bound and images and self.initial.get("image") not in images:
            self.initial["image"] = images[0]

    def chosen(self) -> dict[str, str]:
        """The department, cluster, GPU type and image the form shows: as sent, or its initial values."""
        source = self.data if self.is_bound else self.initial
        return {name: str(source.get(name) or "") for name in ("department", "cluster", "gpu_type", "image")}

    def sizing_choices(self, department: str, cluster: str) -> tuple[list[str], list[str]]:
        """The GPU types the department has quota for on the cluster, and the images it may run there."""
        types = _unique(
            q.pool.gpu_type for q in self.quotas if q.department.slug == department and q.pool.cluster.name == cluster
        )
        found = next((q for q in self.quotas if q.department.slug == department), None)
        pool_cluster = next((q.pool.cluster for q in self.quotas if q.pool.cluster.name == cluster), None)
        images = image_selectors.images_for(user=self.user)
        if found is not None and pool_cluster is not None:
            images = images.filter(images_on_cluster(found.department, pool_cluster))
        return types, _unique(image.name for image in images)

    def sizing(self) -> dict:
        """What the page shows beside the GPU fields for the chosen department, cluster and GPU type: the
        department's quota there (free, in use, waiting, what it may borrow) and the pool's idle GPUs."""
        chosen = self.chosen()
        types, images = self.sizing_choices(chosen["department"], chosen["cluster"])
        gpu_type = chosen["gpu_type"] if chosen["gpu_type"] in types else (types[0] if types else "")
        image = chosen["image"] if chosen["image"] in images else ("python" if "python" in images else "")
        quota = next(
            (
                q
                for q in self.quotas
                if (q.department.slug, q.pool.cluster.name, q.pool.gpu_type)
                == (chosen["department"], chosen["cluster"], gpu_type)
            ),
            None,
        )
        found = {"gpu_types": types, "gpu_type": gpu_type, "images": images, "image": image or (images or [""])[0]}
        if quota is None:
            return {**found, "quota": None}
        usage = job_usage.pool_usage_by_department(department_ids=[quota.department_id]).get(
            (quota.department_id, quota.pool_id), job_usage.PoolUsage()
        )
        allocated = job_usage.pool_allocated().get(quota.pool_id, 0)
        return {
            **found,
            "quota": quota,
            "pool": quota.pool,
            "in_use": usage.in_use,
            "pending": usage.pending,
            "free": max(0.0, quota.nominal - usage.in_use),
            "idle": max(0.0, quota.pool.total - allocated),
            "health": cluster_health(quota.pool.cluster),
        }

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
            # The default (what a job that gave none got) is shown as the empty field that means it.
            "max_runtime": f"{runtime / SECONDS_PER_HOUR:g}"
            if runtime and runtime != DEFAULT_MAX_RUNTIME_SECONDS
            else "",
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
