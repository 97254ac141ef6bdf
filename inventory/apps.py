from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = _("Inventory")

    def ready(self) -> None:
        from core.redis.instance import on_new_instance
        from seckill_site.beat import held_recorder_register

        from . import checks  # noqa: F401  (registers the system checks)
        from .permissions import ensure_groups
        from .redis.liveness import beat_schedule_held
        from .services.snapshots import snapshots_distrust

        post_migrate.connect(ensure_groups, dispatch_uid="seckill-groups")
        on_new_instance(snapshots_distrust)
        # celery beat records which sweeps it holds, for the health check's "beat".
        held_recorder_register(beat_schedule_held)
