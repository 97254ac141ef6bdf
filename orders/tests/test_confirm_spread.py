"""The active confirm partitions spread over two real workers
(SECKILL_WORKER_INDEX of SECKILL_WORKERS=2, three partitions: worker 1 prefers
partitions 0 and 2, worker 2 partition 1), against the real RabbitMQ (on one
broker and, in scripts/test's cluster leg, on the broker cluster). Who is active
where is read from `rabbitmqctl list_consumers` (its `active` column). The
broker here is RabbitMQ 3.x, whose single active consumer is the first one
registered: a worker that starts later gets its partitions handed back between
batches; a killed worker's partitions go to the other; a batch in flight holds
its partition; every 202 becomes an order exactly once throughout."""
from __future__ import annotations

import json
import time
import uuid

import pytest

from inventory.messages import queues
from orders.models import Order
from testsupport import wait_until
from testsupport.faults import RowHold, sell_during
from testsupport.http import accepted_ids, run_parallel, sell
from testsupport.processes import start_web, start_worker
from testsupport.stores import every_unit_taken_is_a_202, rabbitmq_queue, rabbitmqctl

pytestmark = [pytest.mark.worker, pytest.mark.web, pytest.mark.redis_both, pytest.mark.usefixtures("no_worker")]

PARTITIONS = 3
WORKERS = 2
HANDBACK = "back to the worker that prefers it"


@pytest.fixture
def worker_env(settings, process_env):
    """The environment of worker `index` (1-based) of two, three partitions."""
    settings.SECKILL_CONFIRM_PARTITIONS = PARTITIONS

    def env(index: int) -> dict[str, str]:
        return dict(process_env, SECKILL_CONFIRM_PARTITIONS=str(PARTITIONS), SECKILL_WORKERS=str(WORKERS),
                    SECKILL_WORKER_INDEX=str(index))
    return env


def active_by_partition() -> dict[int, str | None]:
    """Partition -> the worker name (-n) of its active consumer, as RabbitMQ has it."""
    out = json.loads(rabbitmqctl("list_consumers", "-q", "--formatter", "json", "queue_name", "consumer_tag",
                                 "active"))
    names = {queues.confirm_queue_name(k): k for k in range(PARTITIONS)}
    found: dict[int, str | None] = dict.fromkeys(range(PARTITIONS))
    for c in out:
        if c["queue_name"] in names and c["active"]:
            found[names[c["queue_name"]]] = c["consumer_tag"].split("@", 1)[0]
    return found


def spread(first: str, second: str) -> dict[int, str]:
    return {k: (first if k % WORKERS == 0 else second) for k in range(PARTITIONS)}


def wait_active(expected: dict[int, str], what: str, timeout: float = 30) -> None:
    seen: list = []

    def check() -> bool:
        seen[:] = [active_by_partition()]
        return seen[0] == expected
    try:
        wait_until(check, timeout=timeout, interval=0.5, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: active {seen and seen[0]}, expected {expected}") from None


def sku_in(partition: int, stock: int) -> str:
    from inventory.services.skus import sku_create

    while True:
        sku_id = f"S-{uuid.uuid4().hex[:10]}"
        if queues.partition_of(sku_id) == partition:
            sku_create(sku_id=sku_id, stock=stock, per_user_limit=1)
            return sku_id


def name_of(proc) -> str:
    return proc.args[proc.args.index("-n") + 1].split("@")[0]


def handbacks(proc, partition: int) -> int:
    queue = queues.confirm_queue_name(partition)
    return sum(1 for line in proc.log_text().splitlines() if HANDBACK in line and f" {queue} " in line)


def test_a_worker_that_starts_later_gets_its_partitions_handed_back_and_each_worker_is_active_on_its_own(
        worker_env, make_buyers):
    first = start_worker(worker_env(1), name=f"spra-{uuid.uuid4().hex[:6]}")
    a = name_of(first)
    second = None
    try:
        # alone, the first takes every partition (the one it does not prefer after a short wait)
        wait_active(dict.fromkeys(range(PARTITIONS), a), "the first worker active everywhere")
        second = start_worker(worker_env(2), name=f"sprb-{uuid.uuid4().hex[:6]}")
        b = name_of(second)
        wait_active(spread(a, b), "partition 1 handed back to the second worker")
        assert [handbacks(first, k) for k in range(PARTITIONS)] == [0, 1, 0]
        assert [handbacks(second, k) for k in range(PARTITIONS)] == [0, 0, 0]
        # and a sale over every partition, both workers confirming, makes every 202 an order once
        skus = [sku_in(k, stock=10) for k in range(PARTITIONS)]
        web = start_web(worker_env(0), name="web-spread")
        try:
            buyers = make_buyers(15)
            results = run_parallel(web.port, [(t, s, 1, uuid.uuid4().hex) for _, t in buyers for s in skus],
                                   threads=16)
        finally:
            web.stop()
        accepted = accepted_ids(results)
        assert len(accepted) == 10 * PARTITIONS and {s for s, _ in results} <= {202, 409}
        for sku in skus:
            wait_until(lambda sku=sku: Order.objects.filter(sku_id=sku).count() == 10, timeout=30,
                       what=f"the orders of {sku}")
            every_unit_taken_is_a_202(sku, set(Order.objects.filter(sku_id=sku).values_list("order_id", flat=True)))
        assert set(Order.objects.filter(sku_id__in=skus).values_list("order_id", flat=True)) == accepted
        assert active_by_partition() == spread(a, b)  # nothing moved meanwhile
    finally:
        if second is not None:
            second.stop()
        first.stop()


def test_a_killed_workers_partitions_go_to_the_other_and_come_back_between_batches(worker_env, make_buyers):
    first = start_worker(worker_env(1), name=f"sprc-{uuid.uuid4().hex[:6]}")
    second = start_worker(worker_env(2), name=f"sprd-{uuid.uuid4().hex[:6]}")
    a, b = name_of(first), name_of(second)
    third = None
    web = start_web(worker_env(0), name="web-spread-kill")
    try:
        wait_active(spread(a, b), "the active partitions spread")
        # the second worker killed mid-sale of a SKU of its partition: the first takes it, nothing lost
        sku = sku_in(1, stock=40)
        results = sell_during(lambda: second.stop(sig=9), web.port, [t for _, t in make_buyers(60)], sku,
                              after_taken=10)
        accepted = accepted_ids(results)
        assert len(accepted) == 40 and {s for s, _ in results} <= {202, 409}
        every_unit_taken_is_a_202(sku, accepted)
        assert set(Order.objects.filter(sku_id=sku).values_list("order_id", flat=True)) == accepted
        wait_active(dict.fromkeys(range(PARTITIONS), a), "the first worker active everywhere")

        # a batch of partition 1 in flight in the first worker (its SKU row held in MySQL)
        # while the second comes back: the partition stays until that batch is acknowledged
        sku = sku_in(1, stock=30)
        queue = queues.confirm_queue_name(1)
        before = handbacks(first, 1)
        with RowHold(sku):
            results = sell(web.port, [t for _, t in make_buyers(40)], sku)
            accepted = accepted_ids(results)
            assert len(accepted) == 30
            wait_until(lambda: rabbitmq_queue(queue).get("messages_unacknowledged", 0) > 0, timeout=20,
                       what="the first worker holding a batch of partition 1")
            third = start_worker(worker_env(2), name=b)
            time.sleep(3 * 0.5 + 1)  # several of the first worker's hand-back looks
            assert active_by_partition()[1] == a  # its batch is in flight: the partition stays
            assert handbacks(first, 1) == before
            assert rabbitmq_queue(queue).get("messages_unacknowledged", 0) > 0
        wait_active(spread(a, b), "partition 1 handed back once its batch was acknowledged")
        assert handbacks(first, 1) == before + 1
        every_unit_taken_is_a_202(sku, accepted)
        assert set(Order.objects.filter(sku_id=sku).values_list("order_id", flat=True)) == accepted
        # acknowledged just after its orders commit: the broker's count follows
        wait_until(lambda: rabbitmq_queue(queue).get("messages", 0) == 0, timeout=20, what="partition 1 drained")
    finally:
        web.stop()
        for proc in (third, second, first):
            if proc is not None:
                proc.stop()
