from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Departments, members and access"

    def ready(self):
        # The audit entries of sign-ins, failures, lock-outs and sign-outs (signal receivers).
        from accounts import login  # noqa: F401
