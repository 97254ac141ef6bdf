from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "orders"
    verbose_name = "Orders"

    def ready(self) -> None:
        from inventory.services.skus import holdings_source_register
        from orders.selectors import sku_holdings

        # Snapshots (inventory) need what orders hold; orders sits above
        # inventory, so it hands the reader down instead of being imported.
        holdings_source_register(sku_holdings)
