from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _


class ReconciliationConfig(AppConfig):
    name = "reconciliation"
    verbose_name = _("Reconciliation")

    def ready(self) -> None:
        from .schedule import ensure_periodic_tasks

        post_migrate.connect(ensure_periodic_tasks, sender=self)
