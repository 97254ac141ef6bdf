from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from inventory import selectors
from inventory.domain import sku_id_valid
from inventory.services.skus import sku_create


def _when(raw: str | None, flag: str):
    if raw is None:
        return None
    value = parse_datetime(raw)
    if value is None:
        raise CommandError(f"{flag}: not an ISO 8601 date-time: {raw!r}")
    # Without an offset, a date-time is in the configured TIME_ZONE (the contract).
    return value if timezone.is_aware(value) else timezone.make_aware(value)


class Command(BaseCommand):
    help = "Create a SKU on sale now (unless told otherwise) and warm its Redis snapshot."

    def add_arguments(self, parser):
        parser.add_argument("sku_id")
        parser.add_argument("--stock", type=int, required=True)
        parser.add_argument("--name", default="")
        parser.add_argument("--per-user-limit", type=int, default=1)
        parser.add_argument("--price", default="0")
        parser.add_argument("--starts-at")
        parser.add_argument("--ends-at")

    def handle(self, *args, sku_id: str, stock: int, name: str, per_user_limit: int, price: str,
               starts_at: str | None, ends_at: str | None, **_opts):
        if not sku_id_valid(sku_id):
            raise CommandError(f"SKU_ID {sku_id!r} is refused: it must be 1 to 64 characters of A-Z a-z 0-9 . _ - "
                               f"(the SKU-id alphabet).")
        if stock < 0:
            raise CommandError("--stock must be 0 or more.")
        if per_user_limit < 1:
            raise CommandError("--per-user-limit must be 1 or more.")
        try:
            price_value = Decimal(price)
        except InvalidOperation:
            raise CommandError(f"--price: not a number: {price!r}") from None
        if price_value < 0:
            raise CommandError("--price must be 0 or more.")
        starts, ends = _when(starts_at, "--starts-at"), _when(ends_at, "--ends-at")
        if starts and ends and ends <= starts:
            raise CommandError("--ends-at must be after --starts-at.")
        if ends and not starts and ends <= timezone.now():
            raise CommandError("--ends-at must be in the future.")
        if selectors.sku_get(sku_id=sku_id) is not None:
            raise CommandError(f"SKU {sku_id!r} already exists.")
        sku = sku_create(sku_id=sku_id, stock=stock, name=name, per_user_limit=per_user_limit,
                                  price=price_value, starts_at=starts, ends_at=ends, actor="create_sku")
        self.stdout.write(f"created {sku.sku_id}: stock {sku.total_stock}, per-user limit {sku.per_user_limit}, "
                          f"on sale from {sku.sale_starts_at.isoformat()}")
