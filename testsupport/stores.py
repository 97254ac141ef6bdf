"""Assertions about the stores: MySQL's buckets and Redis agree, nothing is in flight,
orders are confirmed, moves and gives have landed, what a RabbitMQ queue holds. And the
Redis the suite runs on, one Redis or a cluster (`on_cluster`), lost the same way on
either: `redis_wipe`, `scripts_flush`, `instance_key_of`, `redis_trusted`."""
from __future__ import annotations

import subprocess

from testsupport import wait_until

# --- The Redis under test: one Redis (its own database) or a shared cluster (its own prefix) ---

# Every key of the prefix on the node it runs on but its instance keys (ARGV[2..]),
# at once: a sale running meanwhile sees each SKU's keys all there or all gone, as
# after a FLUSHDB. The flag lets one script reach keys of every slot the node
# serves (Redis 7).
_WIPE_NODE = """#!lua flags=allow-cross-slot-keys
local keep = {}
for i = 2, #ARGV do keep[ARGV[i]] = true end
local n, cursor = 0, '0'
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = page[1]
  for _, name in ipairs(page[2]) do
    if not keep[name] then redis.call('UNLINK', name); n = n + 1 end
  end
until cursor == '0'
return n"""


def on_cluster() -> bool:
    from core.redis.connection import clustered

    return clustered()


def redis_wipe() -> None:
    """Redis loses everything the suite keeps there, but not its instance:
    FLUSHDB of the suite's database on one Redis (the script cache stays, so
    no process takes it for a new instance); on a cluster (shared: never
    flushed) every key of the suite's prefix, each primary in one script,
    but for the instance keys: a process meeting a primary for the first time
    checks the recorded run id, and would take a missing one for a new
    instance (and fence the token claims there), which a FLUSHDB never is."""
    from core.redis.connection import redis
    from core.redis.keys import prefix
    from core.redis.shards import shards

    if not on_cluster():
        redis().flushdb()
        return
    by_node: dict[str, list] = {}
    for shard in shards():
        by_node.setdefault(shard.name, []).append(shard)
    for on_node in by_node.values():
        on_node[0].client.eval(_WIPE_NODE, 0, f"{prefix()}:*", *(shard.key("instance") for shard in on_node))


def scripts_flush() -> None:
    """SCRIPT FLUSH on every primary (the one Redis, or each of a cluster's):
    the next script call anywhere meets NOSCRIPT. Harmless to others sharing
    the server: their recorded instance still matches, they only reload."""
    from core.redis.shards import shards

    for shard in shards():
        shard.client.script_flush()


def instance_key_of(key_name: str):
    """(shard, its instance key) for the shard holding `key_name`: the one
    Redis's instance_key(), or the key on that cluster primary."""
    from core.redis.connection import redis
    from core.redis.shards import shard_of

    shard = shard_of(redis(), key_name)
    return shard, shard.key("instance")


def redis_trusted() -> None:
    """Record each shard's instance as checked, without its hooks: right
    after the session's wipe there is nothing to distrust (the test database
    is new), and the first script call of any process (on a cluster, its
    first contact with each primary) would otherwise run them, asking MySQL
    before a test opened it and raising claims fences the first tests meet."""
    from core.redis.instance import instance_check
    from core.redis.keys import text
    from core.redis.shards import shards

    for shard in shards():
        run_id = text(shard.client.info("server")["run_id"])
        shard.client.set(shard.key("instance"), run_id)
        instance_check(shard, recorded_only=True)  # loads the scripts (and the sentinel) where missing


def settled(sku_id: str, *, timeout: float = 30.0) -> None:
    """Wait until Redis has nothing in flight for the SKU."""
    from inventory.redis import gate, live as redis_live

    wait_until(lambda: (redis_live.live_stock(sku_id=sku_id) or redis_live.LiveStock(0, 0, 0, 0, 0)).inflight == 0
               and not gate.inflight_entries(sku_id=sku_id),
               timeout=timeout, what=f"nothing in flight for {sku_id}")


def assert_balanced(sku_id: str):
    """MySQL buckets add up, and Redis available equals MySQL available."""
    from inventory.models import Sku
    from inventory.redis import live as redis_live

    sku = Sku.objects.get(pk=sku_id)
    assert sku.total_stock == sku.available_stock + sku.frozen_stock + sku.locked_stock + sku.sold_stock
    assert min(sku.available_stock, sku.frozen_stock, sku.locked_stock, sku.sold_stock) >= 0
    live = redis_live.live_stock(sku_id=sku_id)
    assert live is not None, "snapshot missing in Redis"
    assert live.inflight == 0
    assert live.available == sku.available_stock, (live, sku.available_stock)
    return sku


def decr_log_by_order(sku_id: str) -> dict[str, str]:
    from inventory.models import InventoryLog

    rows = InventoryLog.objects.filter(sku_id=sku_id, operation=InventoryLog.Operation.DECR)
    out: dict[str, str] = {}
    for order_id, status in rows.values_list("order_id", "status"):
        assert order_id not in out, f"two DECR rows for {order_id}"
        out[order_id] = status
    return out


def every_sale_row_traced(sku_id: str) -> dict[str, list[str]]:
    """The sale (DECR) log of a SKU traces every unit the gate took, once the
    sale settled and every move was applied: a `pending` or `success` row has
    exactly one order holding its units (pending payment or paid, the same
    quantity) and is the only row of that order; a `fail` row has no order
    holding units and a decision that is not `confirmed` (refused or undone:
    its unit dropped or given back in Redis, never moved in MySQL); and the
    locked units are exactly the pending rows'. (A `fail` row of a confirmed
    decision is an order cancelled or expired: its give-back has its INCR row.) Returns the order ids by row
    status and decision, for a failing test to print."""
    from inventory.models import InventoryLog, ReservationDecision
    from orders.models import Order

    rows = list(InventoryLog.objects.filter(sku_id=sku_id, operation=InventoryLog.Operation.DECR)
                .values_list("order_id", "status", "quantity", "reason"))
    orders = {pk: (status, qty) for pk, status, qty in
              Order.objects.filter(sku_id=sku_id).values_list("pk", "status", "quantity")}
    decided = dict(ReservationDecision.objects.filter(sku_id=sku_id).values_list("order_id", "outcome"))
    holding = {o for o, (st, _) in orders.items() if st in (Order.Status.PENDING_PAYMENT, Order.Status.PAID)}
    seen: dict[str, str] = {}
    by_kind: dict[str, list[str]] = {}
    for order_id, status, qty, reason in rows:
        assert order_id not in seen, f"two DECR rows for {order_id}"
        seen[order_id] = status
        by_kind.setdefault(f"{status}/{decided.get(order_id, 'no decision')}", []).append(order_id)
        if status in (InventoryLog.Status.PENDING, InventoryLog.Status.SUCCESS):
            assert order_id in holding, (order_id, status, orders.get(order_id))
            assert orders[order_id][1] == qty, (order_id, orders[order_id], qty)
            assert decided.get(order_id) == ReservationDecision.Outcome.CONFIRMED, (order_id, decided.get(order_id))
        elif decided.get(order_id) == ReservationDecision.Outcome.CONFIRMED:  # an order's units given back
            assert orders.get(order_id, ("",))[0] in (Order.Status.CANCELLED, Order.Status.EXPIRED), order_id
            assert InventoryLog.objects.filter(op_id=f"{order_id}:release", operation=InventoryLog.Operation.INCR
                                               ).count() == 1, order_id
        else:  # refused or undone: its unit never moved in MySQL
            assert order_id not in holding, (order_id, status, reason, orders.get(order_id))
            assert decided.get(order_id) is not None, (order_id, reason)
    assert holding <= {o for o, st in seen.items() if st != InventoryLog.Status.FAIL}, holding - set(seen)
    from inventory.models import Sku

    pending = sum(q for _, st, q, _ in rows if st == InventoryLog.Status.PENDING)
    sku = Sku.objects.get(pk=sku_id)
    assert sku.locked_stock == pending, (sku.locked_stock, pending, {k: len(v) for k, v in by_kind.items()})
    return by_kind


def confirmed(order_id: str) -> None:
    from orders.models import Order

    wait_until(lambda: Order.objects.filter(pk=order_id, status=Order.Status.PENDING_PAYMENT).exists(),
               what=f"order {order_id} confirmed")


def every_unit_taken_is_a_202(sku_id: str, accepted: set[str]) -> None:
    """Every accepted order confirmed, nothing left in flight for a sweep to
    find, and the gate's takes of the SKU exactly those orders: no request
    answered otherwise took a unit."""
    for order_id in accepted:
        confirmed(order_id)
    settled(sku_id)
    assert set(decr_log_by_order(sku_id)) == accepted
    assert assert_balanced(sku_id).locked_stock == len(accepted)


def moves_applied(sku_id: str) -> None:
    """Until the mover applied every pay, cancel and expiry of the SKU to its row."""
    from orders.selectors import moves_pending

    wait_until(lambda: moves_pending(sku_ids=[sku_id]) == 0, what="order moves applied")


def gives_applied(sku_id: str) -> None:
    """Until every move of the SKU reached its row and every give reached Redis
    (log rows success, outbox sent)."""
    from inventory.models import InventoryLog, OutboxMessage

    moves_applied(sku_id)
    wait_until(lambda: not InventoryLog.objects.filter(sku_id=sku_id, status="pending")
               .exclude(operation="DECR").exists()
               and not OutboxMessage.objects.filter(sku_id=sku_id, sent_at__isnull=True).exists(),
               what="gives applied")


def broker_cluster_sh(*command: str, timeout: float = 180) -> str:
    """A function of scripts/cluster.sh on the RabbitMQ cluster CELERY_BROKER_URL
    names (its nodes' base port); fails the test when it fails."""
    from kombu import Connection

    from core.broker import broker_urls
    from testsupport import ROOT

    base = min(Connection(u).port for u in broker_urls())
    script = 'source scripts/lib.sh && source scripts/cluster.sh && rabbitmq_cluster_use "$0" && "$@"'
    done = subprocess.run(["bash", "-c", script, str(base), *command], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, (command, done.stdout, done.stderr)
    return done.stdout


def rabbitmqctl(*args: str) -> str:
    """`rabbitmqctl ARGS` against the broker the tests use: the machine's node,
    or on a broker cluster the first of its nodes that is running."""
    from kombu import Connection

    from core.broker import broker_urls

    urls = broker_urls()
    if len(urls) < 2:
        return subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, check=True,
                              timeout=60).stdout
    for port in sorted(Connection(u).port for u in urls):
        try:
            broker_cluster_sh("rabbitmq_node_pid", str(port))
        except AssertionError:
            continue  # that node is down (a fault test)
        return broker_cluster_sh("rabbitmq_ctl", str(port), "rabbitmqctl", *args)
    raise AssertionError("no node of the broker cluster is running")


def rabbitmq_queue(name: str) -> dict:
    """A queue's figures as RabbitMQ reports them (messages, unacknowledged, consumers)."""
    import json

    out = rabbitmqctl("list_queues", "-q", "--formatter", "json", "name", "messages",
                      "messages_unacknowledged", "consumers", "arguments")
    for q in json.loads(out):
        if q["name"] == name:
            return q
    return {}
