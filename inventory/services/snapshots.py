"""A SKU's snapshot in Redis, as a service: warm it, fence a lost one and
load it when its fence passes, rebuild it on request, distrust a new Redis
instance. The Redis side is `inventory.redis.snapshots`."""
from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts import token_cache
from core.errors import SkuNotFound, StockActionRefused
from core.redis.connection import redis
from core.redis.errors import ClusterCallError, RedisError, ShardDown
from core.redis.shards import Shard, shard_of
from core.retry import is_transient
from inventory import selectors
from inventory.domain import ClaimsFence, Fence, SkuFence, sku_id_valid
from inventory.models import Sku
from inventory.redis import gate, keys as redis_keys, snapshots as redis_snapshots
from inventory.services.locks import skus_lock
from inventory.services.registry import sku_known

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Holdings:
    """What the orders of a SKU hold, for its snapshot: units per buyer (the
    per-user limit) and the idempotency records still within their lifetime."""

    buyers: dict[int, int] = field(default_factory=dict)
    idempotency: dict[str, tuple[str, int]] = field(default_factory=dict)


HoldingsSource = Callable[[str], Holdings]


def _holdings_unregistered(sku_id: str) -> Holdings:
    # An empty default would load a snapshot without the per-user counts and
    # idempotency records, silently letting buyers past their limit: refuse.
    raise RuntimeError(f"no holdings source registered: the snapshot of {sku_id} would lose what orders hold "
                       f"(orders.apps.OrdersConfig.ready must call holdings_source_register)")


_holdings_source: HoldingsSource = _holdings_unregistered


def holdings_source_register(source: HoldingsSource) -> None:
    """Orders (above inventory) tells inventory how to read what orders hold."""
    global _holdings_source
    _holdings_source = source

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
    its reservation (answered 503, recorded as undone)."""
    return gate.decision_window_ms() + settings.SECKILL_REDIS_CUTOFF_MS


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
        if redis_snapshots.snapshot_exists(sku_id=sku_id):
            return Warm.READY
        if not sku_known(sku_id=sku_id):
            return Warm.UNKNOWN
        if redis_snapshots.fence_token(sku_id=sku_id) is not None:
            return Warm.FENCED
        token = redis_snapshots.warm_lock_acquire(sku_id=sku_id)
        if token is not None:
            try:
                return _warm_locked(sku_id, load_retired=load_retired)
            finally:
                redis_snapshots.warm_lock_release(sku_id=sku_id, token=token)
        if time.monotonic() >= deadline:
            return Warm.FENCED if selectors.sku_get(sku_id=sku_id) is not None else Warm.UNKNOWN
        time.sleep(0.02)


def _warm_locked(sku_id: str, *, load_retired: bool) -> Warm:
    """stock_warm's decision, under the warm lock."""
    if redis_snapshots.snapshot_exists(sku_id=sku_id):
        return Warm.READY
    with transaction.atomic():
        sku = skus_lock(sku_ids=[sku_id]).get(sku_id)
        retired = sku is not None and sku.redis_dropped_at is not None
        if retired and not (load_retired or sku_open(sku=sku)):
            return Warm.RETIRED
        fence = sku is not None and sku.redis_epoch > 0 and not retired
        snapshot = None if sku is None or fence else _snapshot_next(sku)
    if sku is None:
        redis_snapshots.mark_missing(sku_id=sku_id)
        return Warm.UNKNOWN
    if fence:
        raised = redis_snapshots.fence_raise(sku_id=sku_id, delay_ms=fence_delay_ms())
        if raised is not None:
            logger.warning("snapshot of %s lost; rebuild fenced behind the confirm queue (%s)",
                           sku_id, raised.token)
            return Warm.FENCED
        return Warm.READY
    if redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot) is redis_keys.Load.LOADED:
        logger.info("warmed %s: available=%s epoch=%s%s", sku_id, snapshot.available, snapshot.epoch,
                    " (its keys had been dropped by retention)" if retired else "")
    return Warm.READY


def _snapshot_next(sku: Sku) -> redis_snapshots.Snapshot:
    """The snapshot of the next load, read with the SKU row locked (so no give or
    freeze commits between the reads); the load's epoch is recorded first."""
    # A load also ends a retention drop's mark: from here a missing snapshot is a loss again.
    Sku.objects.filter(pk=sku.sku_id).update(redis_epoch=F("redis_epoch") + 1, redis_dropped_at=None)
    epoch = sku.redis_epoch + 1
    return selectors.sku_snapshot(sku=sku, holdings=_holdings_source(sku.sku_id), epoch=epoch)


def _load_next(sku_id: str, *, fence: str = "") -> tuple[redis_keys.Load, redis_snapshots.Snapshot]:
    """Read the next snapshot from MySQL and load it (callers hold the warm lock)."""
    with transaction.atomic():
        snapshot = _snapshot_next(skus_lock(sku_ids=[sku_id])[sku_id])
    return redis_snapshots.snapshot_load(sku_id=sku_id, snapshot=snapshot, fence=fence), snapshot


class DistrustIncomplete(RedisError):
    """Some SKUs of a new Redis instance could not be fenced. The instance is
    not recorded as checked, so the next contact with it runs the check again
    (the SKUs fenced already keep a fence; the failing ones are tried again)."""


@dataclass
class _DistrustPass:
    """What one check of a new instance fenced, failed to fence, and skipped."""

    shard: Shard
    fences: list[redis_snapshots.StandingFence] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def fence(self, sku_id: str, fence: Callable[..., redis_snapshots.StandingFence | None]) -> None:
        """One SKU in its own try: its failure is logged and counted, and the
        pass goes on with the others."""
        self.seen.add(sku_id)
        if not sku_id_valid(sku_id):
            # Made before the SKU-id alphabet: its keys may lie in several
            # Cluster slots (a script on them is CROSSSLOT) or its name may be
            # a claims fence's. Never sent to Redis; the API no longer sells it.
            self.skipped.append(sku_id)
            return
        try:
            raised = fence(sku_id=sku_id, delay_ms=fence_delay_ms())
        except Exception as exc:
            if is_transient(exc) or isinstance(exc, (ShardDown, ClusterCallError)):
                raise  # the shard itself is away: nothing more can be fenced there now
            logger.exception("new Redis instance %s: SKU %s not fenced (tried again by the next check)",
                             self.shard.name, sku_id)
            self.failed.append(sku_id)
            return
        if raised is not None:
            self.fences.append(raised)


def snapshots_distrust(shard: Shard) -> None:
    """A Redis shard is a new instance (core.redis.instance.instance_check): what it
    holds may be older than what was lost (restored from a file, a replica
    that lagged), so every SKU it has data of is dropped and fenced, and
    rebuilt exactly behind the confirm queue like a SKU Redis lost outright.
    The other shards' SKUs sell on.

    One SKU cannot stop the others: each is fenced in its own try, and an id
    outside the SKU-id alphabet is skipped (logged). If any SKU failed, the
    check fails after the rest were fenced, so it runs again on the next
    contact with the instance and the failing SKUs are tried again. A shard
    that stops answering fails the check at once (nothing more can be fenced
    there); it too is checked again on the next contact."""
    token = token_cache.tokens_distrust(shard=shard, delay_ms=fence_delay_ms())
    redis_snapshots.fence_list(standing=redis_snapshots.StandingFence(ClaimsFence(shard.tag), token))
    logger.warning("new Redis instance %s: its token keys dropped, claims fenced until %s", shard.name, token)
    done = _DistrustPass(shard)
    for sku_id in redis_snapshots.skus_held(shard=shard):
        done.fence(sku_id, redis_snapshots.snapshot_distrust)
    # A wiped shard has no snapshot left to find: fence the live SKUs MySQL
    # has there too, so their rebuild waits behind the queue with the claims'
    # (a SKU with a snapshot now was fenced above or loaded since: left alone).
    r = redis()
    for sku_id in selectors.sku_ids_live_warmed():
        if sku_id in done.seen:
            continue
        if shard_of(r, redis_keys.sku_keys(sku_id).stock).name == shard.name:  # no Redis call: the slot map
            done.fence(sku_id, redis_snapshots.fence_raise)
    if done.fences:
        logger.warning("new Redis instance held %d SKU snapshot(s); all fenced for an exact rebuild: %s",
                       len(done.fences), [f.fence.sku_id for f in done.fences[:20]])
    if done.skipped:
        logger.error("new Redis instance %s: %d SKU id(s) outside the SKU-id alphabet not fenced (never sent to "
                     "Redis; end them and create their stock under new ids, see `manage.py check`): %s",
                     shard.name, len(done.skipped), done.skipped[:20])
    if done.failed:
        raise DistrustIncomplete(f"new Redis instance {shard.name}: {len(done.failed)} SKU(s) not fenced, the check "
                                 f"runs again: {done.failed[:20]}")


def fence_pass(*, fence: Fence, token: str, partition: int = 0) -> bool:
    """The confirm consumer reached a copy of `fence` in `partition` of the
    confirm stream: a SKU's fence comes in its SKU's partition
    (`stock_fence_pass`), a shard's claims fence in every one
    (`_claims_fence_pass`). Returns True if the fence passed."""
    if isinstance(fence, ClaimsFence):
        return _claims_fence_pass(fence, token, partition)
    return stock_fence_pass(sku_id=fence.sku_id, token=token, partition=partition)


def _claims_fence_pass(fence: ClaimsFence, token: str, partition: int) -> bool:
    """The lost claims named reservations of any SKU: the fence is lifted once
    each partition's copy has passed (every reservation it named is in MySQL
    then), and leaves the list of fences to send then or once it is gone."""
    outcome = token_cache.claims_fence_pass(shard_tag=fence.shard_tag, token=token, partition=partition,
                                            partitions=settings.SECKILL_CONFIRM_PARTITIONS)
    passed = outcome is token_cache.ClaimsFencePass.PASSED
    if passed or not redis_snapshots.fence_stands(fence=fence):
        redis_snapshots.fence_forget(fence=fence)
    return passed


def stock_fence_pass(*, sku_id: str, token: str, partition: int = 0) -> bool:
    """The confirm consumer reached this SKU's fence in `partition` of the
    confirm stream (the SKU's own: inventory.messages.queues.partition_of): every
    reservation of the SKU that was ahead of it is in MySQL, so a snapshot read
    now is exact. Load it, if that fence still stands (a copy of a passed
    fence, or the fence of an earlier loss, changes nothing). Returns True if
    loaded."""
    if redis_snapshots.fence_token(sku_id=sku_id) != token:
        return False
    lock = None
    deadline = time.monotonic() + WARM_WAIT_S
    while lock is None and time.monotonic() < deadline:
        lock = redis_snapshots.warm_lock_acquire(sku_id=sku_id)
        if lock is None:
            time.sleep(0.02)
    if lock is None:
        return False  # the fence is sent again (redis_snapshots.FENCE_AGAIN_MS)
    try:
        if redis_snapshots.fence_token(sku_id=sku_id) != token or redis_snapshots.snapshot_exists(sku_id=sku_id):
            return False
        loaded, snapshot = _load_next(sku_id, fence=token)
        if loaded is not redis_keys.Load.LOADED:
            return False
    finally:
        redis_snapshots.warm_lock_release(sku_id=sku_id, token=lock)
    redis_snapshots.fence_forget(fence=SkuFence(sku_id))
    logger.warning("snapshot of %s rebuilt behind its fence: available=%s epoch=%s", sku_id, snapshot.available,
                   snapshot.epoch)
    return True


def snapshot_rebuild(*, sku_id: str, actor: str) -> None:
    """Reload the Redis snapshot from MySQL; refused while reservations are in
    flight. With nothing in flight MySQL has every reservation, so the reload
    needs no fence: it runs at once, under the warm lock."""
    if selectors.sku_get(sku_id=sku_id) is None:
        raise SkuNotFound(sku_id=sku_id)
    token = redis_snapshots.warm_lock_acquire(sku_id=sku_id)
    if token is None:
        raise StockActionRefused("A warm-up of this SKU is running; try again.")
    try:
        lost = not redis_snapshots.snapshot_exists(sku_id=sku_id)
        if not lost:
            if not redis_snapshots.snapshot_drop_if_idle(sku_id=sku_id):
                raise StockActionRefused("Reservations are in flight; rebuild refused (try after the confirms).")
            _load_next(sku_id)
    finally:
        redis_snapshots.warm_lock_release(sku_id=sku_id, token=token)
    if lost:
        # Redis lost it: what the lost Redis accepted may still be in the broker.
        if stock_warm(sku_id=sku_id, load_retired=True) is Warm.FENCED:
            raise StockActionRefused(_("Redis lost this SKU; its rebuild waits for the confirm queue and "
                                       "happens by itself within seconds."))
        return
    logger.warning("snapshot of %s rebuilt by %s", sku_id, actor)
