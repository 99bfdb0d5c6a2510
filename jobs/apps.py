from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Training jobs"

    def ready(self):
        from clusters import signals as cluster_signals
        from jobs import admission, usage
        from quotas import signals as quota_signals

        quota_signals.capacity_changed.connect(admission.on_capacity_changed, dispatch_uid="jobs.admission")
        cluster_signals.storage_deleting.connect(usage.storage_users, dispatch_uid="jobs.usage.storage_users")
