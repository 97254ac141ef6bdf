"""SKUs and their Redis snapshots: create, edit sale data, warm, rebuild."""
from __future__ import annotations

import enum
import logging
import time
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Callable

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from inventory import redis_store, selectors
from core.errors import SkuNotFound, StockActionRefused
from inventory.models import InventoryLog, Sku
from inventory.services.locks import skus_lock

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Holdings:
    """What the orders of a SKU hold, for its snapshot: units per buyer (the
    per-user limit) and the idempotency records still within their lifetime."""

    buyers: dict[int, int] = field(default_factory=dict)
    idempotency: dict[str, tuple[str, int]] = field(default_factory=dict)


HoldingsSource = Callable[[str], Holdings]
_holdings_source: HoldingsSource = lambda sku_id: Holdings()  # noqa: E731  (replaced by orders)


def holdings_source_register(source: HoldingsSource) -> None:
    """Orders (above inventory) tells inventory how to read what orders hold."""
    global _holdings_source
    _holdings_source = source


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
    snapshot once the row is committed (callers may hold a transaction)."""
    now = timezone.now()
    try:  # before the row exists: a request between commit and warm-up must find it
        redis_store.sku_registry_add(sku_id=sku_id)
    except redis_store.RedisError:
        pass  # the registry is read again from MySQL within a minute
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
        # forgotten by the first rebuild after that, redis_store.sku_registry_fill).
        transaction.on_commit(lambda: (redis_store.sku_registry_add(sku_id=sku_id),
                                       redis_store.clear_missing(sku_id=sku_id), stock_warm(sku_id=sku_id)))
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
        redis_store.meta_update(
            sku_id=sku.sku_id, per_user_limit=sku.per_user_limit, starts_ms=selectors.epoch_ms(sku.sale_starts_at),
            ends_ms=selectors.epoch_ms(sku.sale_ends_at), status=sku.status, version=sku.version)
    except redis_store.RedisError as exc:
        # Redis keeps the older sale data until reconciliation pushes it again;
        # meanwhile the confirm refuses what a paused or ended SKU accepted.
        logger.warning("sale data of %s not pushed to Redis: %r", sku.sku_id, exc)


class Warm(enum.Enum):
    """Where a SKU's Redis snapshot stands after `stock_warm`."""

    READY = "ready"      # in Redis (there already, or loaded now)
    FENCED = "fenced"    # lost; its rebuild waits behind the confirm queue (nothing may be taken)
    UNKNOWN = "unknown"  # MySQL has no such SKU
    RETIRED = "retired"  # ended; retention dropped its keys and MySQL holds all of it (nothing loaded)


WARM_WAIT_S = 3.0


def fence_delay_ms() -> int:
    """How long after a loss is noticed its fence may be sent: by then every
    request that reserved in the lost Redis has had its publish confirmed (its
    message is in the queue ahead of the fence) or has given up and undone
    its reservation (answered 503, recorded as released)."""
    return redis_store.decision_window_ms()


def sku_open(*, sku: Sku) -> bool:
    """Can the SKU sell now or later, as MySQL has it (active, window not over)?"""
    return sku.status == Sku.Status.ACTIVE and (sku.sale_ends_at is None or timezone.now() < sku.sale_ends_at)


def stock_warm(*, sku_id: str, load_retired: bool = False) -> Warm:
    """Make sure Redis has the SKU's snapshot, as far as that can be done now.

    A SKU Redis never held (MySQL's epoch 0) is loaded at once. One that Redis
    held and lost is not: MySQL does not yet have the reservations the lost
    Redis accepted that are still in the broker, so a snapshot read now would
    sell their units again. It is fenced instead (the gate answers 503), and
    the confirm consumer loads it when the fence reaches it (`stock_fence_pass`).
    A SKU whose keys retention dropped (`Sku.redis_dropped_at`) lost nothing:
    it is loaded at once if it is open for sale again (ops re-opened it) or
    `load_retired` asks for it (an ops move), and left out of Redis otherwise
    (RETIRED: readers show MySQL's figures, exact since nothing is in flight).
    Loads run under a short lock so two processes never load twice; a load
    refuses to overwrite a snapshot that appeared meanwhile. A caller that
    meets the lock waits for what its holder decides (or for the lock).
    """
    deadline = time.monotonic() + WARM_WAIT_S
    while True:
        if redis_store.snapshot_exists(sku_id=sku_id):
            return Warm.READY
        if not sku_known(sku_id=sku_id):
            return Warm.UNKNOWN
        if redis_store.fence_token(sku_id=sku_id) is not None:
            return Warm.FENCED
        token = redis_store.warm_lock_acquire(sku_id=sku_id)
        if token is not None:
            try:
                return _warm_locked(sku_id, load_retired=load_retired)
            finally:
                redis_store.warm_lock_release(sku_id=sku_id, token=token)
        if time.monotonic() >= deadline:
            return Warm.FENCED if selectors.sku_get(sku_id=sku_id) is not None else Warm.UNKNOWN
        time.sleep(0.02)


def _warm_locked(sku_id: str, *, load_retired: bool) -> Warm:
    """stock_warm's decision, under the warm lock."""
    if redis_store.snapshot_exists(sku_id=sku_id):
        return Warm.READY
    with transaction.atomic():
        sku = skus_lock(sku_ids=[sku_id]).get(sku_id)
        retired = sku is not None and sku.redis_dropped_at is not None
        if retired and not (load_retired or sku_open(sku=sku)):
            return Warm.RETIRED
        fence = sku is not None and sku.redis_epoch > 0 and not retired
        snapshot = None if sku is None or fence else _snapshot_next(sku)
    if sku is None:
        redis_store.mark_missing(sku_id=sku_id)
        return Warm.UNKNOWN
    if fence:
        raised = redis_store.fence_raise(sku_id=sku_id, delay_ms=fence_delay_ms())
        if raised is not None:
            logger.warning("snapshot of %s lost; rebuild fenced behind the confirm queue (%s)",
                           sku_id, raised.token)
            return Warm.FENCED
        return Warm.READY
    if redis_store.snapshot_load(sku_id=sku_id, snapshot=snapshot) is redis_store.Load.LOADED:
        logger.info("warmed %s: available=%s epoch=%s%s", sku_id, snapshot.available, snapshot.epoch,
                    " (its keys had been dropped by retention)" if retired else "")
    return Warm.READY


def _snapshot_next(sku: Sku) -> redis_store.Snapshot:
    """The snapshot of the next load, read with the SKU row locked (so no give or
    freeze commits between the reads); the load's epoch is recorded first."""
    # A load also ends a retention drop's mark: from here a missing snapshot is a loss again.
    Sku.objects.filter(pk=sku.sku_id).update(redis_epoch=F("redis_epoch") + 1, redis_dropped_at=None)
    epoch = sku.redis_epoch + 1
    return selectors.sku_snapshot(sku=sku, holdings=_holdings_source(sku.sku_id), epoch=epoch)


def _load_next(sku_id: str, *, fence: str = "") -> tuple[redis_store.Load, redis_store.Snapshot]:
    """Read the next snapshot from MySQL and load it (callers hold the warm lock)."""
    with transaction.atomic():
        snapshot = _snapshot_next(skus_lock(sku_ids=[sku_id])[sku_id])
    return redis_store.snapshot_load(sku_id=sku_id, snapshot=snapshot, fence=fence), snapshot


def snapshots_distrust() -> None:
    """Redis is a new instance (core.redis.instance_check): what it holds may be
    older than what was lost (restored from a file, a replica that lagged), so
    every SKU it has data of is dropped and fenced, and rebuilt exactly behind
    the confirm queue like a SKU Redis lost outright."""
    fences = redis_store.snapshots_fence_all(delay_ms=fence_delay_ms())
    if fences:
        logger.warning("new Redis instance held %d SKU snapshot(s); all fenced for an exact rebuild: %s",
                       len(fences), [f.sku_id for f in fences[:20]])


def stock_fence_pass(*, sku_id: str, token: str) -> bool:
    """The confirm consumer reached this SKU's fence: every reservation that
    was ahead of it in the queue is in MySQL, so a snapshot read now is exact.
    Load it, if that fence still stands (a copy of a passed fence, or the fence
    of an earlier loss, changes nothing). Returns True if loaded."""
    if redis_store.fence_token(sku_id=sku_id) != token:
        return False
    lock = None
    deadline = time.monotonic() + WARM_WAIT_S
    while lock is None and time.monotonic() < deadline:
        lock = redis_store.warm_lock_acquire(sku_id=sku_id)
        if lock is None:
            time.sleep(0.02)
    if lock is None:
        return False  # the fence is sent again (redis_store.FENCE_AGAIN_MS)
    try:
        if redis_store.fence_token(sku_id=sku_id) != token or redis_store.snapshot_exists(sku_id=sku_id):
            return False
        loaded, snapshot = _load_next(sku_id, fence=token)
        if loaded is not redis_store.Load.LOADED:
            return False
    finally:
        redis_store.warm_lock_release(sku_id=sku_id, token=lock)
    redis_store.fence_forget(sku_id=sku_id)
    logger.warning("snapshot of %s rebuilt behind its fence: available=%s epoch=%s", sku_id, snapshot.available,
                   snapshot.epoch)
    return True


def sku_known(*, sku_id: str) -> bool:
    """Does MySQL have this SKU? Answered from Redis's registry of SKU ids, read
    again from MySQL (all ids, one query) when it is not known to be complete,
    so requests for made-up SKU ids cost MySQL nothing."""
    known = redis_store.sku_registry_check(sku_id=sku_id)
    if known is None:
        sku_registry_rebuild()
        known = redis_store.sku_registry_check(sku_id=sku_id)
    return bool(known)


def sku_registry_rebuild(*, recent_s: float | None = None) -> int:
    """The registry becomes the SKU ids MySQL has (ids of creates that rolled
    back, or of SKUs gone, leave it), keeping ids registered within `recent_s`
    (default: redis_store.SKU_REGISTRY_RECENT_MS), whose rows may not have been
    committed when MySQL was read. Returns its size."""
    ids = list(Sku.objects.values_list("sku_id", flat=True))
    recent_ms = redis_store.SKU_REGISTRY_RECENT_MS if recent_s is None else int(recent_s * 1000)
    return redis_store.sku_registry_fill(sku_ids=ids, recent_ms=recent_ms)


def snapshot_rebuild(*, sku_id: str, actor: str) -> None:
    """Reload the Redis snapshot from MySQL; refused while reservations are in
    flight. With nothing in flight MySQL has every reservation, so the reload
    needs no fence: it runs at once, under the warm lock."""
    if selectors.sku_get(sku_id=sku_id) is None:
        raise SkuNotFound(sku_id=sku_id)
    token = redis_store.warm_lock_acquire(sku_id=sku_id)
    if token is None:
        raise StockActionRefused("A warm-up of this SKU is running; try again.")
    try:
        lost = not redis_store.snapshot_exists(sku_id=sku_id)
        if not lost:
            if not redis_store.snapshot_drop_if_idle(sku_id=sku_id):
                raise StockActionRefused("Reservations are in flight; rebuild refused (try after the confirms).")
            _load_next(sku_id)
    finally:
        redis_store.warm_lock_release(sku_id=sku_id, token=token)
    if lost:
        # Redis lost it: what the lost Redis accepted may still be in the broker.
        if stock_warm(sku_id=sku_id, load_retired=True) is Warm.FENCED:
            raise StockActionRefused(_("Redis lost this SKU; its rebuild waits for the confirm queue and "
                                       "happens by itself within seconds."))
        return
    logger.warning("snapshot of %s rebuilt by %s", sku_id, actor)


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
    elif len(sku_id) > 64 or sku_id != sku_id.strip() or not sku_id.isprintable():
        add("sku_id", _("Use 1 to 64 printable characters without surrounding spaces."))
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
            for index, spec in specs.items():
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
    except redis_store.RedisError as exc:
        # Only a warm-up run by on_commit talks to Redis unguarded, so the rows
        # are committed; the hooks after the failing one did not run. Warm what
        # can be warmed below; the rest loads on first use (stock_warm).
        logger.warning("import by %s committed, a warm-up failed: %r", actor, exc)
    logger.info("%s imported %d SKU(s)", actor, len(created))
    for sku in created:
        try:
            stock_warm(sku_id=sku.sku_id)  # a no-op where the snapshot is there
        except redis_store.RedisError as exc:
            logger.warning("snapshot of imported %s not warmed: %r", sku.sku_id, exc)
    return created
