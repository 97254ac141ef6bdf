from django.apps import AppConfig
from django.db.models.signals import post_migrate


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = "Inventory"

    def ready(self) -> None:
        from .permissions import ensure_groups

        post_migrate.connect(ensure_groups, dispatch_uid="seckill-groups")
