import logging

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

logger = logging.getLogger("seckill.deployment")


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = _("Core")

    def ready(self) -> None:
        from django.conf import settings

        # Once per process, after logging is configured: an operator reading
        # any process's start sees it.
        if settings.SECKILL_PRODUCTION and settings.SECKILL_BUYER_PAY:
            logger.warning("SECKILL_BUYER_PAY=1 under the production settings: any buyer can mark an order PAID "
                           "with POST orders/{id}/pay, without paying. For a demo only; a shop taking money "
                           "leaves it unset and lets the provider's webhook pay (docs/operations.md, "
                           "'Payments from a provider').")
