from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = _("Inventory")

    def ready(self) -> None:
        from core.redis.instance import on_new_instance

        from . import checks  # noqa: F401  (registers the system checks)
        from .permissions import ensure_groups
        from .services.snapshots import snapshots_distrust

        post_migrate.connect(ensure_groups, dispatch_uid="seckill-groups")
        on_new_instance(snapshots_distrust)
