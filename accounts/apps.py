from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (keeps the Redis token cache in step with MySQL)
