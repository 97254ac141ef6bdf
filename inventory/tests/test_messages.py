"""The purchase path's group publisher (inventory.messages): requests that
publish at the same moment share a message, each keeps its own budget, and
the broker holds every reservation exactly once."""
from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
import zlib
from unittest import mock

import pytest
from django.conf import settings
from kombu import Connection, Consumer

from inventory.domain import ClaimsFence, Reservation, SkuFence
from inventory.messages import broker_probe, encoding, group_publisher, publisher, queues
from testsupport import wait_until

pytestmark = pytest.mark.usefixtures("no_worker")


def drain_confirm_queue(partition: int = 0) -> list[list[Reservation]]:
    """Every message waiting on the confirm queue (taken off it), as lists of reservations."""
    return [d.reservations for d in drain_partition(partition)]


def drain_partition(partition: int = 0) -> list[encoding.Decoded]:
    """Every message waiting on a partition of the confirm stream (taken off it), decoded."""
    out: list[encoding.Decoded] = []

    def take(message) -> None:
        out.append(encoding.message_decode(message.body, message.headers))
        message.ack()

    with Connection(settings.CELERY_BROKER_URL) as conn:
        queue = queues.confirm_queue(partition)(conn.channel())
        # A quorum queue with a single active consumer serves no basic.get: consume.
        with Consumer(conn.default_channel, queues=[queue], callbacks=[lambda body, message: take(message)],
                      accept=None):
            while True:
                try:
                    conn.drain_events(timeout=0.5)
                except TimeoutError:
                    return out


def reservation(sku_id: str = "GROUP-TEST") -> Reservation:
    oid = uuid.uuid4().hex
    return Reservation(oid, sku_id, 1, 1, f"k-{oid[:8]}", int(time.time() * 1000), 0)


@pytest.fixture
def empty_queue():
    publisher.publish_confirms([reservation()])  # declares the queue if this is the first test
    drain_confirm_queue()
    yield
    drain_confirm_queue()


def test_concurrent_publishes_share_messages_and_each_reservation_is_stored_once(empty_queue):
    real_send = publisher.send

    def slow_send(*args, **kwargs):  # a busy broker: requests gather while one message is out
        time.sleep(0.05)
        return real_send(*args, **kwargs)

    sent = [reservation() for _ in range(40)]
    errors: list[BaseException] = []

    def click(r: Reservation) -> None:
        try:
            group_publisher.publish_confirm(r, deadline=time.monotonic() + 5)
        except BaseException as exc:
            errors.append(exc)

    with mock.patch.object(publisher, "send", side_effect=slow_send):
        threads = [threading.Thread(target=click, args=(r,)) for r in sent]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    stored = drain_confirm_queue()
    got = [r.order_id for message in stored for r in message]
    assert sorted(got) == sorted(r.order_id for r in sent)  # every one, once
    assert len(stored) < len(sent)  # and grouped


def test_a_request_that_runs_out_of_budget_fails_and_is_not_published_later(empty_queue):
    real_send = publisher.send
    release = threading.Event()

    def held_send(*args, **kwargs):
        release.wait(5)
        return real_send(*args, **kwargs)

    first, late = reservation(), reservation()
    outcome: dict[str, object] = {}

    def publish(name: str, r: Reservation, budget: float) -> None:
        try:
            group_publisher.publish_confirm(r, deadline=time.monotonic() + budget)
            outcome[name] = "ok"
        except TimeoutError as exc:
            outcome[name] = exc

    with mock.patch.object(publisher, "send", side_effect=held_send):
        a = threading.Thread(target=publish, args=("first", first, 5.0))
        a.start()
        time.sleep(0.1)  # the first message is out (held); the late one waits behind it
        publish("late", late, 0.2)
        release.set()
        a.join()
    assert outcome["first"] == "ok"
    assert isinstance(outcome["late"], TimeoutError)  # the caller undoes its reservation
    time.sleep(0.3)
    stored = [r.order_id for message in drain_confirm_queue() for r in message]
    assert stored == [first.order_id]  # its budget spent before its turn: never sent


# --- The confirm stream in partitions ----------------------------------------------------

PARTITIONS = 3


def skus_across(n: int, per: int = 1) -> list[str]:
    """`per` SKU ids in each of the n partitions (ids of this test only)."""
    found: dict[int, list[str]] = {k: [] for k in range(n)}
    while any(len(v) < per for v in found.values()):
        sku = f"PART-{uuid.uuid4().hex[:10]}"
        if len(found[queues.partition_of(sku)]) < per:
            found[queues.partition_of(sku)].append(sku)
    return [s for k in range(n) for s in found[k]]


@pytest.fixture
def partitioned(settings):
    settings.SECKILL_CONFIRM_PARTITIONS = PARTITIONS
    for k in range(PARTITIONS):
        publisher.publish_confirms([reservation(skus_across(PARTITIONS)[k])])  # declares each queue
        drain_partition(k)
    yield
    for k in range(PARTITIONS):
        drain_partition(k)


def test_one_partition_is_the_one_queue_of_before_and_more_keep_its_name(settings):
    base = settings.SECKILL_CONFIRM_QUEUE
    assert settings.SECKILL_CONFIRM_PARTITIONS == 1
    assert [q.name for q in queues.confirm_queues()] == [base]
    assert queues.confirm_queue().routing_key == base and queues.confirm_queue().exchange.name == base
    assert {queues.partition_of(f"S{i}") for i in range(50)} == {0}
    settings.SECKILL_CONFIRM_PARTITIONS = PARTITIONS
    every = queues.confirm_queues()
    assert [q.name for q in every] == [base, f"{base}.1", f"{base}.2"]
    assert {q.exchange.name for q in every} == {base}  # one direct exchange, a routing key per partition
    assert [q.routing_key for q in every] == [q.name for q in every]
    for q in every:  # every partition: today's arguments
        assert q.queue_arguments == queues.confirm_queue().queue_arguments
        assert q.queue_arguments["x-single-active-consumer"] is True
    # a hash every process computes alike, spread over every partition
    assert all(queues.partition_of(f"S{i}") == zlib.crc32(f"S{i}".encode()) % PARTITIONS for i in range(50))
    assert {queues.partition_of(f"S{i}") for i in range(50)} == set(range(PARTITIONS))


def test_each_skus_reservations_stay_on_its_partition_in_order(partitioned):
    skus = skus_across(PARTITIONS, per=2)
    sent = {s: [reservation(s) for _ in range(8)] for s in skus}
    errors: list[BaseException] = []

    def buy(sku: str) -> None:  # one buyer after another on the SKU, all SKUs at once
        try:
            for r in sent[sku]:
                group_publisher.publish_confirm(r, deadline=time.monotonic() + 5)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=buy, args=(s,)) for s in skus]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    swept = [reservation(s) for s in skus]  # the orphan sweep's republish: one list of any SKUs
    assert publisher.publish_confirms(swept) == PARTITIONS  # a message per partition
    for k in range(PARTITIONS):
        got = [r for d in drain_partition(k) for r in d.reservations]
        assert {r.sku_id for r in got} == {s for s in skus if queues.partition_of(s) == k}
        for s in {r.sku_id for r in got}:
            assert [r.order_id for r in got if r.sku_id == s] == [r.order_id for r in sent[s] + swept
                                                                  if r.sku_id == s]


def test_a_skus_fence_follows_its_confirms_in_its_partition_and_the_claims_fence_goes_to_every_one(
        partitioned):
    a, b, _c = skus_across(PARTITIONS)  # in partitions 0, 1 and 2
    publisher.publish_confirms([reservation(a), reservation(b), reservation(a)])
    claims = ClaimsFence("test")
    publisher.publish_fences([(SkuFence(a), "t-a"), (SkuFence(b), "t-b"), (claims, "t-claims")])
    publisher.publish_confirms([reservation(a)])  # sent after the fence: not promised before it

    def stream(k: int) -> list[tuple[str, object]]:
        out = []
        for d in drain_partition(k):
            out += [("r", r.sku_id) for r in d.reservations] + [("f", fence) for fence, _token in d.fences]
        return out

    assert stream(0) == [("r", a), ("r", a), ("f", SkuFence(a)), ("f", claims), ("r", a)]
    assert stream(1) == [("r", b), ("f", SkuFence(b)), ("f", claims)]
    assert stream(2) == [("f", claims)]


def test_a_fence_message_names_its_fences_as_every_version_did():
    """A SKU's fence travels as its id, a shard's claims fence as
    "@claims:<shard tag>": a message an earlier version queued reads as the
    same fences, and one sent now reads in a worker of that version."""
    fences = [(SkuFence("A-1"), "t1"), (ClaimsFence("s7"), "t2"), (ClaimsFence(""), "t3")]
    body, headers = encoding.fence_encode(fences)
    assert json.loads(body)["f"] == [["A-1", "t1"], ["@claims:s7", "t2"], ["@claims:", "t3"]]
    assert encoding.message_decode(body, headers).fences == fences


def test_the_depth_sums_every_partition(partitioned):
    from reconciliation import selectors as live_selectors

    skus = skus_across(PARTITIONS)
    counts = [1, 3, 2]  # messages per partition
    for sku, n in zip(skus, counts):
        for _ in range(n):
            publisher.publish_confirms([reservation(sku)])
    wait_until(lambda: [d.messages for d in broker_probe.confirm_queue_depths()] == counts)
    assert broker_probe.confirm_queue_depth().messages == sum(counts)
    assert live_selectors.confirm_queue_depth() == sum(counts)  # the live view's figure


REFUSAL_POLICY = "refuse-"
REFUSING = '{"max-length": 0, "overflow": "reject-publish"}'
# Cleared, a policy's limit stays with the quorum queue on RabbitMQ 3.10 (it
# goes on refusing); a policy with a limit it never reaches takes its place first.
HARMLESS = '{"max-length": 1000000000, "overflow": "reject-publish"}'


def _refusal_removed(name: str, pattern: str) -> None:
    """The refusal policy `name` made harmless, then cleared, each step tried
    again until the broker answers (a test may have restarted it meanwhile)."""
    from testsupport.stores import rabbitmqctl

    deadline = time.monotonic() + 90
    for args in (("set_policy", "--apply-to", "queues", "--priority", "99", name, pattern, HARMLESS),
                 ("clear_policy", name)):
        while True:
            try:
                rabbitmqctl(*args)
                break
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired, AssertionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)


@pytest.fixture
def refusing_queue(empty_queue):
    """The confirm queue made to refuse every publish, as a quorum queue does
    while its replicas elect a new leader: a policy of length 0 with
    reject-publish (the broker answers basic.nack). `lift()` ends it. A
    refusal of this queue that an earlier run could not remove (its broker
    gone at the end) is removed first."""
    from testsupport.stores import rabbitmqctl

    pattern = "^" + settings.SECKILL_CONFIRM_QUEUE.replace(".", r"\.") + "$"
    for stale in json.loads(rabbitmqctl("list_policies", "--formatter", "json") or "[]"):
        if stale.get("name", "").startswith(REFUSAL_POLICY) and stale.get("pattern") == pattern:
            _refusal_removed(stale["name"], pattern)
    name = f"{REFUSAL_POLICY}{uuid.uuid4().hex[:8]}"
    rabbitmqctl("set_policy", "--apply-to", "queues", "--priority", "99", name, pattern, REFUSING)

    def refused() -> bool:  # the queue applies a policy a moment after it is set
        try:
            publisher.publish_confirms([reservation("PROBE")])
            return False
        except publisher.MessageNacked:
            return True

    wait_until(refused, timeout=30, what="the queue refusing publishes")
    lifted = threading.Event()

    def lift() -> None:
        if not lifted.is_set():
            lifted.set()
            rabbitmqctl("set_policy", "--apply-to", "queues", "--priority", "99", name, pattern, HARMLESS)

    yield lift
    _refusal_removed(name, pattern)


def test_a_publish_the_queue_refuses_is_sent_again_while_its_budget_lasts(refusing_queue):
    r = reservation()
    with mock.patch.object(publisher, "REFUSED_BACKOFF_MAX_S", 0.1):
        # refused the whole budget: the caller hears of it (its request answers 503, nothing taken),
        # as the last refusal or as its wait running out, whichever of the two deadlines is met first
        with pytest.raises((publisher.MessageNacked, TimeoutError)):
            group_publisher.publish_confirm(r, deadline=time.monotonic() + 1.0)
        # refused for a moment, then taken: the request's publish succeeds
        timer = threading.Timer(1.0, refusing_queue)
        timer.start()
        try:
            group_publisher.publish_confirm(r, deadline=time.monotonic() + 8.0)
        finally:
            timer.join()
    stored = [x.order_id for message in drain_confirm_queue() for x in message if x.sku_id != "PROBE"]
    assert stored == [r.order_id]  # the refused sends left nothing; the accepted one is there once
