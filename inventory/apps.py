from django.apps import AppConfig
from django.db.models.signals import post_migrate


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = "Inventory"

    def ready(self) -> None:
        from core.redis import on_new_instance

        from .permissions import ensure_groups
        from .services.skus import snapshots_distrust

        post_migrate.connect(ensure_groups, dispatch_uid="seckill-groups")
        on_new_instance(snapshots_distrust)
