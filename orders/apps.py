from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class OrdersConfig(AppConfig):
    name = "orders"
    verbose_name = _("Orders")

    def ready(self) -> None:
        from inventory.services.snapshots import holdings_source_register
        from orders.selectors import sku_holdings

        # Snapshots (inventory) need what orders hold; orders sits above
        # inventory, so it hands the reader down instead of being imported.
        holdings_source_register(sku_holdings)
        # The same for what a user's Idempotency-Keys made (accounts' token fill).
        from accounts.authentication import claims_source_register
        from orders.selectors import user_key_claims

        claims_source_register(user_key_claims)
