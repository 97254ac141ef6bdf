"""A Redis loss costs a pause, never a broken promise (docs/architecture.md,
"When Redis loses a SKU"). Against the real servers: Redis flushed mid-sale, Redis killed and
started again empty mid-sale, and Redis lost while the worker is down. In each,
every 202 becomes an order that is not FAILED, a key is answered with one order
id before and after the loss, the SKU answers 503 while its rebuild is fenced
and then sells again by itself, and both stores agree at the end.

Also on the local Redis Cluster (`redis_both`): there a loss of everything is
the suite's prefix wiped on every primary (`redis_wipe`), and a new instance
is met on the primary that holds the SKU. The tests that stop or restart the
one Redis server are single-Redis only; on a cluster a node's real loss is
orders/tests/test_redis_cluster.py's (a master killed or paused mid-sale, a
replica promoted, NOSCRIPT after a promotion)."""
from __future__ import annotations

import random
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import pytest
from django.db.models import Count

from benchmarks.faults import redis_start_empty, redis_stop
from core.redis.connection import redis
from inventory.domain import SkuFence
from inventory.models import Sku
from inventory.redis import gate, keys as redis_keys, live as redis_live, snapshots as redis_snapshots
from inventory.services.snapshots import fence_delay_ms
from orders.models import Order
from reconciliation.services import reconciliation_run
from testsupport import wait_until
from testsupport.http import Http
from testsupport.processes import start_worker
from testsupport.purchase import fence_reached, rebuild_lost, reserve_direct
from testsupport.stores import assert_balanced, instance_key_of, on_cluster, redis_wipe, scripts_flush, settled

pytestmark = pytest.mark.redis_both


def single_server(covered_by: str):
    """A test that stops or restarts the one Redis server: a cluster has no
    such server (and is shared); a node's loss is orders/tests/test_redis_cluster.py's."""
    return pytest.mark.skipif(on_cluster(), reason=f"stops the one Redis server; on a cluster: "
                                                   f"orders/tests/test_redis_cluster.py::{covered_by}")


class Click:
    """One buyer's click, sent again while it is answered 503 (as a client
    told `unavailable` would), until a final answer or `patience` runs out."""

    def __init__(self, token: str, key: str):
        self.token, self.key = token, key
        self.answers: list[tuple[float, float, int, dict]] = []  # (sent, answered, status, body)

    def final(self) -> tuple[int, dict]:
        return self.answers[-1][2:]


def click_all(port: int, sku_id: str, clicks: list[Click], *, threads: int = 24, patience: float = 40.0,
              gap_s: float = 0.0) -> None:
    chunks = [clicks[i::threads] for i in range(threads)]

    def work(chunk: list[Click]) -> None:
        http = Http(port)
        for c in chunk:
            give_up = time.monotonic() + patience
            while True:
                sent = time.monotonic()
                status, body = http.post_order(c.token, sku_id, 1, c.key)
                c.answers.append((sent, time.monotonic(), status, body))
                if status != 503 or time.monotonic() > give_up:
                    break
                time.sleep(0.1)
            time.sleep(gap_s)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, chunks))


def sale_clicks(tokens: list[str], *, retries: int, seed: int) -> list[Click]:
    """A click per token with a fresh key; `retries` of them sent again later
    with the same key (a client that did not see its answer)."""
    rnd = random.Random(seed)
    first = [Click(t, uuid.uuid4().hex) for t in tokens]
    out = list(first)
    for c in rnd.sample(first, retries):
        out.insert(rnd.randrange(len(out) // 2, len(out) + 1), Click(c.token, c.key))
    return out


def judge(sku_id: str, stock: int, clicks: list[Click]) -> dict:
    """Every promise kept: each 202 is an order that did not fail, a key has
    one order id, nothing oversold, the stores agree after reconciling."""
    by_key: dict[tuple[str, str], set[str]] = defaultdict(set)
    for c in clicks:
        for _, _, status, body in c.answers:
            if status == 202:
                by_key[(c.token, c.key)].add(body["order_id"])
    two_ids = {k: ids for k, ids in by_key.items() if len(ids) > 1}
    assert not two_ids, f"keys answered with two order ids: {two_ids}"
    accepted = set().union(*by_key.values()) if by_key else set()
    wait_until(lambda: Order.objects.filter(pk__in=accepted).count() == len(accepted), timeout=90,
               what="every 202 an order in MySQL")
    settled(sku_id, timeout=60)
    failed = dict(Order.objects.filter(pk__in=accepted, status="FAILED").values_list("order_id", "failure_reason"))
    assert not failed, f"{len(failed)} order(s) FAILED after their 202: {list(failed.items())[:5]}"
    held = Order.objects.filter(sku_id=sku_id, status="PENDING_PAYMENT")
    assert set(held.values_list("order_id", flat=True)) == accepted
    assert len(accepted) <= stock
    per_key = (Order.objects.filter(sku_id=sku_id).values("user_id", "idempotency_key")
               .annotate(n=Count("order_id")).filter(n__gt=1))
    assert not per_key.exists(), f"keys with two orders: {list(per_key[:5])}"
    for _ in range(2):
        reconciliation_run(trigger="command", observe_gap_s=0.05, sku_ids=[sku_id])
    row = assert_balanced(sku_id)
    assert row.locked_stock == len(accepted)
    return {"accepted": len(accepted), "sold_out": row.available_stock == 0}


def first_sale_after(clicks: list[Click], moment: float) -> float | None:
    """Seconds from `moment` to the first new order answered to a request sent
    after it."""
    times = [answered for c in clicks for sent, answered, status, body in c.answers
             if sent > moment and status == 202 and not body.get("replayed")]
    return min(times) - moment if times else None


def slow_worker(process_env):
    """A worker whose consumer holds each batch a second and a half before it
    confirms it: at any moment of the sale that much is in the broker, the
    window a Redis loss used to turn into FAILED after 202."""
    return start_worker(dict(process_env, SECKILL_CONFIRM_LINGER_MS="1500"), name=f"slow-{uuid.uuid4().hex[:4]}")


def lose_redis_mid_sale(fault, web, process_env, make_sku, make_buyers):
    stock, buyers = 80, make_buyers(250)
    sku = make_sku(stock=stock, per_user_limit=1)
    clicks = sale_clicks([tok for _, tok in buyers], retries=25, seed=13)
    worker = slow_worker(process_env)
    lost_at: list[float] = []
    left_at_loss: list[int] = []

    def land() -> None:
        wait_until(lambda: (redis_live.live_stock(sku_id=sku.sku_id) or redis_live.LiveStock(stock, 0, 0, 0, 0))
                   .available <= stock - 10, timeout=30, interval=0.01, what="the sale under way")
        left_at_loss.append(redis_live.live_stock(sku_id=sku.sku_id).available)
        fault()
        lost_at.append(time.monotonic())

    try:
        t = threading.Thread(target=land)
        t.start()
        # paced (about 120 clicks a second) so that the loss lands with most of the stock unsold
        click_all(web.port, sku.sku_id, clicks, threads=12, gap_s=0.1)
        t.join()
        assert lost_at and left_at_loss[0] > 10, f"the loss did not land mid-sale ({left_at_loss})"
        outcome = judge(sku.sku_id, stock, clicks)
    finally:
        worker.stop()
    pause = first_sale_after(clicks, lost_at[0])
    print(f"pause after the loss: {pause if pause is None else round(pause, 2)} s; {outcome}")
    assert outcome["sold_out"] and pause is not None, "the SKU did not sell again by itself after the loss"
    assert Sku.objects.get(pk=sku.sku_id).redis_epoch == 2  # rebuilt once, behind its fence
    return pause


@pytest.mark.web
@pytest.mark.worker
def test_flushall_mid_sale_breaks_no_promise(web, no_worker, process_env, make_sku, make_buyers):
    lose_redis_mid_sale(redis_wipe, web, process_env, make_sku, make_buyers)


@single_server("test_a_master_killed_mid_sale_pauses_its_skus_only")
@pytest.mark.web
@pytest.mark.worker
def test_redis_restarted_empty_mid_sale_breaks_no_promise(web, no_worker, process_env, make_sku, make_buyers):
    def restart() -> None:
        redis_stop()
        time.sleep(0.3)
        redis_start_empty()

    lose_redis_mid_sale(restart, web, process_env, make_sku, make_buyers)


@pytest.mark.web
@pytest.mark.worker
def test_redis_lost_while_the_worker_is_down_pauses_until_it_is_back(web, no_worker, process_env, make_sku,
                                                                     make_buyers):
    stock, buyers = 40, make_buyers(100)
    sku = make_sku(stock=stock, per_user_limit=1)
    tokens = [tok for _, tok in buyers]
    early = [Click(t, uuid.uuid4().hex) for t in tokens[:30]]
    click_all(web.port, sku.sku_id, early, threads=10, patience=0)
    assert [c.final()[0] for c in early] == [202] * 30  # their confirms wait in the broker
    redis_wipe()

    http = Http(web.port)
    status, body = http.post_order(tokens[30], sku.sku_id, 1, uuid.uuid4().hex)
    assert (status, body["code"]) == (503, "unavailable")
    assert redis_snapshots.fence_token(sku_id=sku.sku_id) is not None
    time.sleep(fence_delay_ms() / 1000 + 1)  # past the fence's not-before: with no consumer it cannot pass
    status, body = http.post_order(early[0].token, sku.sku_id, 1, early[0].key)  # a retry of an accepted click
    assert (status, body["code"]) == (503, "unavailable")
    assert redis_live.live_stock(sku_id=sku.sku_id) is None
    assert Order.objects.filter(sku_id=sku.sku_id).count() == 0

    back = time.monotonic()
    worker = start_worker(process_env, name=f"back-{uuid.uuid4().hex[:4]}")
    try:
        retry = Click(early[0].token, early[0].key)
        late = [retry] + [Click(t, uuid.uuid4().hex) for t in tokens[30:]]
        click_all(web.port, sku.sku_id, late, threads=10)
        # the key whose reservation was in the broker is answered with its first order id
        assert retry.final()[0] == 202, retry.answers
        assert retry.final()[1]["order_id"] == early[0].final()[1]["order_id"]
        # sold out now (every web process has said so): each early key sent again
        # is still answered with its first order, not "sold out"
        again = [Click(c.token, c.key) for c in early[1:]]
        click_all(web.port, sku.sku_id, again, threads=6, patience=0)
        assert [(c.final()[0], c.final()[1].get("order_id")) for c in again] == \
            [(202, c.final()[1]["order_id"]) for c in early[1:]]
        outcome = judge(sku.sku_id, stock, early + late)
    finally:
        worker.stop()
    assert outcome == {"accepted": stock, "sold_out": True}
    print(f"sold again {first_sale_after(late, back):.2f} s after the worker was started")


def test_a_freeze_in_progress_when_redis_is_lost_is_counted_by_the_rebuild(make_sku, live_db):
    """A freeze is a take too: Redis first, then MySQL. Redis is lost between the
    two and rebuilt before MySQL moves: the rebuild counts the freeze (its
    intent), the MySQL move completes, and the stores agree."""
    from inventory.services import stock

    sku = make_sku(stock=10)
    real = stock.with_mysql_retry

    def loss_then_rebuild_then_mysql(fn):
        redis_wipe()
        rebuild_lost(sku.sku_id)
        live = redis_live.live_stock(sku_id=sku.sku_id)
        assert (live.available, live.frozen) == (7, 3)  # counted, before MySQL moved
        return real(fn)

    with mock.patch("inventory.services.stock.with_mysql_retry", side_effect=loss_then_rebuild_then_mysql):
        op_id = stock.stock_freeze(sku_id=sku.sku_id, quantity=3, reason="damaged", actor="t")
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.frozen_stock) == (7, 3)
    assert gate.freeze(sku_id=sku.sku_id, op_id=op_id, quantity=3) is redis_keys.Freeze.ALREADY


def test_a_freeze_while_the_sku_is_fenced_takes_nothing(make_sku, live_db):
    from core.errors import Unavailable
    from inventory.models import InventoryLog
    from inventory.services import stock

    sku = make_sku(stock=10)
    redis_wipe()
    with pytest.raises(Unavailable):
        stock.stock_freeze(sku_id=sku.sku_id, quantity=3, reason="damaged", actor="t")
    assert not InventoryLog.objects.filter(sku_id=sku.sku_id, operation="FREEZE").exists()
    assert Sku.objects.get(pk=sku.sku_id).available_stock == 10


def test_a_fence_left_unlisted_is_listed_again_by_the_orphan_sweep(make_sku, live_db):
    """A fencer that dies between marking the SKU and listing its fence would
    leave the SKU answering 503 for good: the orphan sweep lists it again."""
    from inventory.services.snapshots import Warm, stock_warm
    from reconciliation.services import orphans_recover

    sku = make_sku(stock=5)
    redis_wipe()
    assert stock_warm(sku_id=sku.sku_id) is Warm.FENCED
    token = redis_snapshots.fence_token(sku_id=sku.sku_id)
    redis().zrem(redis_keys.FENCES_KEY, sku.sku_id)  # the listing never happened
    assert SkuFence(sku.sku_id) not in redis_snapshots.fences_listed()
    orphans_recover(sku_ids=[sku.sku_id])
    assert (redis_snapshots.fences_listed()[SkuFence(sku.sku_id)]
            == redis_snapshots.StandingFence(SkuFence(sku.sku_id), token).not_before_ms)


def test_a_new_redis_instance_holding_old_data_is_not_trusted(make_sku, make_buyers, live_db):
    """Redis came back with data older than what it lost (a file, a replica
    that lagged): its snapshot says more units are available than there are.
    The first script call on the new instance meets an empty script cache,
    and before any script runs every snapshot it holds is dropped and fenced.
    (On a cluster: the primary holding the SKU is the new instance.)"""
    from orders.services.confirm import reservations_confirm

    sku = make_sku(stock=10, per_user_limit=5)
    (user, _), = make_buyers(1)
    keys = redis_keys.sku_keys(sku.sku_id)
    r = redis()
    shard, instance_key = instance_key_of(keys.stock)
    old = {k: r.dump(k) for k in (keys.stock,)}  # what a file made now would hold
    reservations_confirm(reservations=[reserve_direct(sku.sku_id, user.pk, qty=3)])
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 7
    for k, v in old.items():  # the new instance comes up with the older data ...
        r.restore(k, 0, v, replace=True)
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 10
    shard.client.set(instance_key, "the-instance-before")  # ... recorded by the instance before it
    shard.client.script_flush()  # ... and, being new, no scripts

    got = gate.reserve(sku_id=sku.sku_id, user_id=user.pk, quantity=1, idempotency_key="k2",
                       order_id=uuid.uuid4().hex)
    assert got.code is redis_keys.Reserve.FENCED  # the old snapshot sold nothing
    assert shard.client.get(instance_key).decode() == shard.client.info("server")["run_id"]
    # every script is loaded by the check: a script first used later meets no NOSCRIPT on this instance
    later = (redis_keys.FREEZE_LUA, redis_keys.GIVE_LUA, redis_keys.ADJUST_LUA)
    assert all(shard.client.script_exists(*(layout.script.sha for layout in later)))
    fence_reached(sku.sku_id)
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 7
    assert gate.reserve(sku_id=sku.sku_id, user_id=user.pk, quantity=1, idempotency_key="k3",
                        order_id=uuid.uuid4().hex).code is redis_keys.Reserve.OK


@single_server("test_a_master_paused_mid_sale_breaks_no_promise (a master that comes back with older data)")
@pytest.mark.web
@pytest.mark.worker
def test_redis_restarted_from_an_older_file_mid_sale_breaks_no_promise(web, no_worker, process_env, make_sku,
                                                                       make_buyers):
    """Redis saved a file a moment into the sale, sold on, was killed and came
    back from that file: its snapshot is older than MySQL's truth."""
    from benchmarks.faults import redis_restart_from, redis_save_snapshot

    def rollback() -> None:
        path = redis_save_snapshot()
        time.sleep(0.3)  # the sale goes on; what it sells now the file does not hold
        redis_restart_from(path)

    lose_redis_mid_sale(rollback, web, process_env, make_sku, make_buyers)


def test_a_checker_that_died_holds_the_other_processes_back_only_briefly(make_sku, make_buyers, live_db):
    """The process checking a new instance was killed while holding its lock:
    the others wait for the lock to lapse, then one of them checks. (On a
    cluster they do not wait: the shard answers ShardDown, a 503, until the
    lock lapses, while the other shards sell on.)"""
    from core.redis.errors import ShardDown
    from core.redis.instance import INSTANCE_CHECK_LOCK_S

    sku = make_sku(stock=3)
    (user, _), = make_buyers(1)
    shard, instance_key = instance_key_of(redis_keys.sku_keys(sku.sku_id).stock)
    r = shard.client
    run_id = r.info("server")["run_id"]
    lock = f"{instance_key}:check:{run_id}"
    r.set(instance_key, "the-instance-before")
    r.set(lock, "a pid that was killed", ex=2)
    r.script_flush()

    def reserve():
        return gate.reserve(sku_id=sku.sku_id, user_id=user.pk, quantity=1, idempotency_key="k",
                            order_id=uuid.uuid4().hex)

    started = time.monotonic()
    if on_cluster():
        with pytest.raises(ShardDown):
            reserve()
        assert r.exists(lock) and r.get(instance_key) == b"the-instance-before"  # nothing checked, nothing ran
        wait_until(lambda: not r.exists(lock), timeout=INSTANCE_CHECK_LOCK_S + 1, what="the lock lapsed")
    got = reserve()
    waited = time.monotonic() - started
    assert got.code is redis_keys.Reserve.FENCED  # checked: the snapshot was not trusted
    assert 1.5 <= waited <= INSTANCE_CHECK_LOCK_S + 1, waited


def test_a_deploy_that_changes_a_script_is_not_taken_for_a_new_instance(make_sku, live_db):
    """A changed script meets NOSCRIPT on the same instance too (its text, so
    its SHA, is new), even after the instance key went with a FLUSHDB: the
    sentinel script is still cached, so nothing is distrusted."""
    from core.redis.scripts import GuardedScript
    from core.redis.shards import shards

    for shard in shards():
        shard.client.set(shard.key("instance"), shard.client.info("server")["run_id"])
    scripts_flush()  # SCRIPT FLUSH on the checked instance: everything (the sentinel too) is loaded again
    assert redis_live.live_stock(sku_id=make_sku(stock=3).sku_id) is not None
    sku = make_sku(stock=4)
    stock_key = redis_keys.sku_keys(sku.sku_id).stock
    shard, instance_key = instance_key_of(stock_key)
    assert redis_live.live_stock(sku_id=sku.sku_id) is not None  # (a cluster's: on its own primary too)
    shard.client.delete(instance_key)
    changed = GuardedScript(redis(), f"-- a script this deploy changed {uuid.uuid4().hex}\nreturn 7")
    assert changed(keys=[stock_key]) == 7
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 4  # not dropped, not fenced
    assert redis_snapshots.fence_token(sku_id=sku.sku_id) is None


def test_a_reservation_of_the_lost_redis_reaching_the_confirm_after_the_rebuild_takes_nothing(
        make_sku, make_buyers, live_db):
    """Its request was never answered 202 (a 202 is always ahead of the fence),
    and the rebuilt snapshot sells its unit again: the confirm refuses it."""
    from orders.services.confirm import STALE_REFUSAL, reservations_confirm

    sku = make_sku(stock=2, per_user_limit=2)
    (user, _), = make_buyers(1)
    late = reserve_direct(sku.sku_id, user.pk)  # taken in the Redis about to be lost, never published
    redis_wipe()
    rebuild_lost(sku.sku_id)
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 2
    reservations_confirm(reservations=[late])
    order = Order.objects.get(pk=late.order_id)
    assert (order.status, order.failure_reason) == ("FAILED", STALE_REFUSAL)
    assert Sku.objects.get(pk=sku.sku_id).available_stock == 2
    assert redis_live.live_stock(sku_id=sku.sku_id).available == 2


def test_a_fence_is_sent_once_due_and_again_while_it_stands(make_sku, live_db, no_worker):
    """(No worker: its consumer sends due fences too, and may take this one
    first, then pass it.)"""
    from inventory.services.snapshots import Warm, stock_warm

    sku = make_sku(stock=2)
    redis().delete(redis_keys.sku_keys(sku.sku_id).stock)
    assert stock_warm(sku_id=sku.sku_id) is Warm.FENCED
    token = redis_snapshots.fence_token(sku_id=sku.sku_id)

    def due() -> list[str]:
        return [f.token for f in redis_snapshots.fences_due() if f.fence == SkuFence(sku.sku_id)]

    assert due() == []  # before its not-before: requests of the lost Redis may still be publishing
    wait_until(lambda: due() == [token], timeout=10, what="the fence due")
    assert due() == []  # sent: not again before FENCE_AGAIN_MS ...
    redis().zadd(redis_keys.FENCES_KEY, {sku.sku_id: 0})  # ... which has passed
    assert due() == [token]
    fence_reached(sku.sku_id)  # passed: the listing goes
    redis().zadd(redis_keys.FENCES_KEY, {sku.sku_id: 0})
    assert due() == [] and SkuFence(sku.sku_id) not in redis_snapshots.fences_listed()
