"""SKUs: create, edit sale data, bulk import. Their Redis snapshots (warm,
fence, rebuild) are `snapshots`; the registry of their ids is `registry`."""
from __future__ import annotations

import contextlib
import logging
import unicodedata
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from core.errors import InvalidInput, SkuNotFound
from core.redis.errors import RedisError
from inventory import selectors
from inventory.domain import SKU_ID_RULE, price_text, sku_id_valid
from inventory.models import InventoryLog, Sku
from inventory.redis import gate, snapshots as redis_snapshots
from inventory.services.locks import skus_lock
from inventory.services.snapshots import stock_warm

logger = logging.getLogger(__name__)


def sku_create(
    *,
    sku_id: str,
    stock: int,
    name: str = "",
    per_user_limit: int = 1,
    price: Decimal | int | str = 0,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    status: str = Sku.Status.ACTIVE,
    actor: str = "",
) -> Sku:
    """Create a SKU on sale (from now unless told otherwise) and warm its
    snapshot once the row is committed (callers may hold a transaction).
    Every way of making a SKU ends here, so the SKU-id alphabet is enforced
    here too (before Redis hears of the id); callers check it first to name
    the field in their own words."""
    if not sku_id_valid(sku_id):
        raise InvalidInput(str(SKU_ID_RULE), sku_id=sku_id if isinstance(sku_id, str) else repr(sku_id))
    now = timezone.now()
    # Before the row exists: a request between commit and warm-up must find it. Without
    # Redis, the registry is read again from MySQL within a minute.
    with contextlib.suppress(RedisError):
        redis_snapshots.sku_registry_add(sku_id=sku_id)
    with transaction.atomic():
        sku = Sku.objects.create(
            sku_id=sku_id, name=name or sku_id, price=Decimal(str(price)), total_stock=stock,
            available_stock=stock, per_user_limit=per_user_limit, sale_starts_at=starts_at or now,
            sale_ends_at=ends_at, status=status, status_changed_at=now,
        )
        if stock:
            InventoryLog.objects.create(
                sku=sku, operation=InventoryLog.Operation.RESTOCK, quantity=stock,
                status=InventoryLog.Status.SUCCESS, reason="initial stock", actor=actor,
            )
        # Registered again once committed: the registry's rebuild keeps an id
        # added recently, counted from here (a create that rolled back is
        # forgotten by the first rebuild after that, redis_snapshots.sku_registry_fill).
        transaction.on_commit(lambda: (redis_snapshots.sku_registry_add(sku_id=sku_id),
                                       redis_snapshots.clear_missing(sku_id=sku_id), stock_warm(sku_id=sku_id)))
    return sku


SALE_FIELDS = ("name", "price", "per_user_limit", "sale_starts_at", "sale_ends_at", "status")


def sku_update(*, sku_id: str, actor: str, **changes) -> Sku:
    """Edit a SKU's sale data (never its stock). The version goes up, and once
    committed Redis gets the new sale data, newest version first."""
    unknown = set(changes) - set(SALE_FIELDS)
    if unknown:
        raise ValueError(f"not sale data: {sorted(unknown)}")
    with transaction.atomic():
        sku = skus_lock(sku_ids=[sku_id]).get(sku_id)
        if sku is None:
            raise SkuNotFound(sku_id=sku_id)
        if "status" in changes and changes["status"] != sku.status:
            sku.status_changed_at = timezone.now()
        for name, value in changes.items():
            setattr(sku, name, value)
        sku.version = F("version") + 1
        sku.save(update_fields=[*changes, "status_changed_at", "version", "updated_at"])
        sku.refresh_from_db(fields=["version"])
        transaction.on_commit(lambda: sku_sale_data_push(sku=sku))
    logger.info("sale data of %s changed by %s: %s", sku_id, actor, sorted(changes))
    return sku


def sku_sale_data_push(*, sku: Sku) -> None:
    """Send a SKU's sale data to Redis (newest version wins there)."""
    try:
        gate.meta_update(
            sku_id=sku.sku_id, per_user_limit=sku.per_user_limit, starts_ms=selectors.epoch_ms(sku.sale_starts_at),
            ends_ms=selectors.epoch_ms(sku.sale_ends_at), status=sku.status, version=sku.version,
            unit_price=price_text(sku.price))
    except RedisError as exc:
        # Redis keeps the older sale data until reconciliation pushes it again;
        # meanwhile the confirm refuses what a paused or ended SKU accepted.
        logger.warning("sale data of %s not pushed to Redis: %r", sku.sku_id, exc)

# --- bulk import ---------------------------------------------------------------

@dataclass(frozen=True)
class SkuSpec:
    """One new SKU as an import file describes it (already parsed into types)."""

    sku_id: str
    stock: int
    name: str = ""
    per_user_limit: int = 1
    price: Decimal = Decimal(0)
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    status: str = Sku.Status.ACTIVE


class SkuImportRefused(Exception):
    """The file is refused as a whole: `errors` maps a row's index (as given) to
    {field: [messages]}. Nothing was written anywhere."""

    def __init__(self, errors: dict[int, dict[str, list[str]]]):
        super().__init__(f"{len(errors)} row(s) refused")
        self.errors = errors


def sku_spec_errors(*, spec: SkuSpec) -> dict[str, list[str]]:
    """The rules a new SKU must meet (the add form's and create_sku's rules),
    by field. Existence in MySQL is checked by `skus_import`."""
    errors: dict[str, list[str]] = {}

    def add(field_name: str, message: str) -> None:
        errors.setdefault(field_name, []).append(message)

    sku_id = spec.sku_id or ""
    if not sku_id:
        add("sku_id", _("The SKU id is required."))
    elif not sku_id_valid(sku_id):
        add("sku_id", str(SKU_ID_RULE))
    if spec.stock is None or spec.stock < 0:
        add("stock", _("Give the initial stock (0 or more)."))
    if spec.per_user_limit is None or spec.per_user_limit < 1:
        add("per_user_limit", _("The per-user limit must be 1 or more."))
    if spec.price is None or spec.price < 0:
        add("price", _("The price cannot be negative."))
    if spec.status not in Sku.Status.values:
        add("status", _("Unknown status (use one of: %(choices)s).") % {"choices": ", ".join(Sku.Status.values)})
    if len(spec.name or "") > 200:
        add("name", _("At most 200 characters."))
    if spec.ends_at is not None:
        if spec.starts_at is not None and spec.ends_at <= spec.starts_at:
            add("sale_ends_at", _("The sale must end after it starts."))
        elif spec.starts_at is None and spec.ends_at <= timezone.now():
            add("sale_ends_at", _("The sale must end in the future."))
    return errors


def sku_id_key(sku_id: str) -> str:
    """The form under which MySQL compares SKU ids. The column has the
    database's default collation (utf8mb4_unicode_ci, _general_ci), which ignores
    letter case and accents, so `abc`, `ABC` and `àbc` are one primary key. This
    mirrors it for the import's preview (it agrees with utf8mb4_unicode_ci on
    every Latin letter); the database's own answer, a duplicate key, is the
    final word (`skus_import`)."""
    bare = "".join(c for c in unicodedata.normalize("NFKD", sku_id) if not unicodedata.combining(c))
    return bare.casefold()


def skus_import_errors(*, specs: dict[int, SkuSpec]) -> dict[int, dict[str, list[str]]]:
    """Every row's errors: its own rules, an id twice in the file, an id MySQL
    has (both as MySQL compares ids: `sku_id_key`)."""
    errors: dict[int, dict[str, list[str]]] = {}
    first_row: dict[str, int] = {}
    for index, spec in specs.items():
        row = sku_spec_errors(spec=spec)
        key = sku_id_key(spec.sku_id or "")
        if key in first_row:
            row.setdefault("sku_id", []).append(sku_id_repeated_message(
                sku_id=spec.sku_id, other=specs[first_row[key]].sku_id, row=first_row[key]))
        else:
            first_row[key] = index
        if row:
            errors[index] = row
    ids = [specs[index].sku_id for index in first_row.values()]
    for existing in Sku.objects.filter(sku_id__in=ids).values_list("sku_id", flat=True):
        index = first_row.get(sku_id_key(existing))
        if index is None:
            continue  # equal only under a rule sku_id_key misses: the create refuses it
        errors.setdefault(index, {}).setdefault("sku_id", []).append(
            sku_id_taken_message(sku_id=specs[index].sku_id, existing=existing))
    return errors


def sku_id_repeated_message(*, sku_id: str, other: str, row: int) -> str:
    if sku_id == other:
        return _("SKU %(sku_id)s is already in row %(row)s of this file.") % {"sku_id": sku_id, "row": row}
    return _("SKU %(sku_id)s is the same id as %(other)s in row %(row)s of this file (SKU ids ignore letter "
             "case and accents).") % {"sku_id": sku_id, "other": other, "row": row}


def sku_id_taken_message(*, sku_id: str, existing: str) -> str:
    if sku_id == existing:
        return _("SKU %(sku_id)s already exists; the import only creates SKUs (change it in its page, "
                 "move its stock with the stock actions).") % {"sku_id": sku_id}
    return _("SKU %(sku_id)s is the same id as the existing SKU %(existing)s (SKU ids ignore letter case and "
             "accents); the import only creates SKUs.") % {"sku_id": sku_id, "existing": existing}


def skus_import(*, specs: dict[int, SkuSpec], actor: str) -> list[Sku]:
    """Create every SKU of an import file, or none.

    All rows are checked first; if any is refused, nothing is written (MySQL or
    Redis) and SkuImportRefused names the rows. Then every SKU is made by
    `sku_create` (its log row, its registry entry) in one transaction, so a
    failure half-way rolls them all back; the snapshots are warmed only once
    that transaction committed (sku_create's on_commit).
    """
    errors = skus_import_errors(specs=specs)
    if errors:
        raise SkuImportRefused(errors)
    created: list[Sku] = []
    index = None
    try:
        with transaction.atomic(durable=True):
            for index, spec in specs.items():  # noqa: B007 (index names the failing row below)
                created.append(sku_create(
                    sku_id=spec.sku_id, stock=spec.stock, name=spec.name, per_user_limit=spec.per_user_limit,
                    price=spec.price, starts_at=spec.starts_at, ends_at=spec.ends_at, status=spec.status,
                    actor=actor))
    except IntegrityError:
        # MySQL's collation found the id equal to another one that the checks
        # above did not (a rule sku_id_key misses, or a SKU made meanwhile):
        # everything is rolled back, and the row is named instead of a 500.
        raise SkuImportRefused({index: {"sku_id": [
            _("SKU %(sku_id)s is already taken (the database compares SKU ids without letter case and "
              "accents).") % {"sku_id": specs[index].sku_id}]}}) from None
    except RedisError as exc:
        # Only a warm-up run by on_commit talks to Redis unguarded, so the rows
        # are committed; the hooks after the failing one did not run. Warm what
        # can be warmed below; the rest loads on first use (stock_warm).
        logger.warning("import by %s committed, a warm-up failed: %r", actor, exc)
    logger.info("%s imported %d SKU(s)", actor, len(created))
    for sku in created:
        try:
            stock_warm(sku_id=sku.sku_id)  # a no-op where the snapshot is there
        except RedisError as exc:
            logger.warning("snapshot of imported %s not warmed: %r", sku.sku_id, exc)
    return created
