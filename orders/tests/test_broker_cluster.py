"""A RabbitMQ cluster node lost mid-sale costs a pause, never a broken promise
(issue 21 item 1).

Against the real cluster CELERY_BROKER_URL names (several ';'-separated node
URLs; skipped on one broker), started by scripts/cluster (scripts/test's
cluster leg: its own cluster on 5684-5686). A node is SIGKILLed for real and the
cluster healed afterwards by `rabbitmq_cluster_up` (the killed node restarted,
rejoined, every quorum queue grown back onto it), so the next test finds it
whole. The accounting is test_redis_loss.py's: every 202 an order that did not
fail, no order without a 202, no key with two orders, the stores agreeing.
Each sale prints what the kill cost: the 503s answered and the time from the
kill to the first new 202."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest
from django.conf import settings
from kombu import Connection, Queue

from core.broker import broker_connect, broker_connection, broker_urls
from orders.tests.test_redis_loss import Click, click_all, first_sale_after, judge
from testsupport import wait_until
from testsupport.processes import start_worker, web_workers
from testsupport.stores import broker_cluster_sh

pytestmark = [
    pytest.mark.broker_cluster, pytest.mark.web, pytest.mark.worker,
    pytest.mark.skipif(len(broker_urls()) < 2, reason="CELERY_BROKER_URL names one broker, not a cluster"),
]


def ports() -> list[int]:
    return sorted(Connection(u).port for u in broker_urls())


def node_pid(port: int) -> int:
    return int(broker_cluster_sh("rabbitmq_node_pid", str(port)))


def kill(port: int) -> None:
    os.kill(node_pid(port), signal.SIGKILL)


def queue_members(name: str) -> tuple[str, list[str]]:
    """A quorum queue's leader and members, as a running node tells."""
    for port in ports():
        try:
            out = broker_cluster_sh("rabbitmq_ctl", str(port), "rabbitmqctl", "list_queues", "name", "leader",
                                    "members", "--formatter", "json", timeout=60)
        except AssertionError:
            continue
        for row in json.loads(out):
            if row["name"] == name:
                return row["leader"], sorted(row["members"])
        raise AssertionError(f"queue {name} not found")
    raise AssertionError("no node answers")


def node_port(node_name: str) -> int:
    return int(node_name.split("@")[0].rsplit("-", 1)[1])  # seckill-<port>@localhost


@pytest.fixture
def cluster(live_db):
    if any(u.split("@")[-1].split(":")[0] not in ("127.0.0.1", "localhost") for u in broker_urls()):
        pytest.skip("not a cluster scripts/cluster started on this machine: its nodes cannot be killed and healed")
    broker_cluster_sh("rabbitmq_cluster_up")  # whole before the fault (a run that died may have left a node down)
    try:
        yield
    finally:
        broker_cluster_sh("rabbitmq_cluster_up")


def broker_peers(pids: list[int]) -> dict[int, list[int]]:
    """pid -> the cluster ports its established connections go to (ss)."""
    out = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True).stdout
    found: dict[int, list[int]] = {pid: [] for pid in pids}
    for line in out.splitlines():
        parts = line.split()
        peer = next((p for p in parts if p.count(":") == 1 and p.rsplit(":", 1)[1].isdigit()
                     and int(p.rsplit(":", 1)[1]) in ports()), None)
        for pid in pids:
            if peer and f"pid={pid}," in line:
                found[pid].append(int(peer.rsplit(":", 1)[1]))
    return found


def consumer_nodes(worker) -> list[int]:
    """The broker ports the worker's confirm consumer connected to, in order (its log)."""
    return [int(line.rsplit(":", 1)[1]) for line in worker.log_text().splitlines()
            if "confirm consumer" in line and " consuming " in line and " on " in line]


def sale_with_kill(web, make_sku, make_buyers, pick_node, *, stock: int = 200) -> tuple[dict, list[Click], float]:
    """`stock` units, one per buyer, clicked by 300 buyers (paced, each 503
    sent again); `pick_node()` chosen and SIGKILLed once 20 sold, with most of
    the stock still to sell. Returns the judged outcome, the clicks and the
    moment of the kill."""
    sku = make_sku(stock=stock, per_user_limit=1)
    clicks = [Click(tok, uuid.uuid4().hex) for _, tok in make_buyers(300)]
    killed: list[tuple[float, int]] = []
    pids = {port: node_pid(port) for port in ports()}  # looked up before: the kill lands at once

    def sold() -> int:
        return sum(1 for c in clicks for a in c.answers if a[2] == 202)

    def land() -> None:
        # The node is chosen once the first sale made the connections (reading
        # them takes a while on a loaded machine), so the kill lands at 20 sold.
        wait_until(lambda: sold() >= 1, timeout=60, interval=0.01, what="the sale under way")
        port = pick_node()
        wait_until(lambda: sold() >= 20, timeout=60, interval=0.01, what="20 sold")
        os.kill(pids[port], signal.SIGKILL)
        killed.append((time.monotonic(), port))

    t = threading.Thread(target=land)
    t.start()
    click_all(web.port, sku.sku_id, clicks, threads=8, gap_s=0.1, patience=60)
    t.join()
    assert killed, "the kill did not land mid-sale"
    outcome = judge(sku.sku_id, stock, clicks)
    at, port = killed[0]
    served = [a for c in clicks for a in c.answers if a[0] >= at]
    pause = first_sale_after(clicks, at)
    sold_before = sum(1 for c in clicks for a in c.answers if a[2] == 202 and a[1] < at)
    print(f"node {port} killed with {sold_before} sold: {sum(a[2] == 503 for a in served)} answers 503 after "
          f"it, first new 202 after {pause if pause is None else round(pause, 2)} s; {outcome}")
    assert sold_before < stock - 50, f"the kill landed too late ({sold_before} of {stock} sold)"
    assert outcome["sold_out"] and pause is not None, "the SKU did not sell again after the kill"
    return outcome, clicks, at


def test_a_node_killed_under_the_publishing_web_tier_breaks_no_promise(cluster, web, no_worker, process_env,
                                                                       make_sku, make_buyers):
    """The node a web process publishes through is killed mid-sale: its
    unconfirmed publish is sent again on another node, and every 202 becomes
    one order."""
    worker = start_worker(process_env, name=f"bc-{uuid.uuid4().hex[:4]}")
    try:
        def publishers_node() -> int:
            peers = broker_peers(web_workers(web))
            busiest = [p for ps in peers.values() for p in ps]
            assert busiest, f"no web process is connected to the cluster: {peers}"
            return max(set(busiest), key=busiest.count)

        sale_with_kill(web, make_sku, make_buyers, publishers_node)
    finally:
        worker.stop()


def test_the_confirm_consumers_node_killed_moves_it_to_another(cluster, web, no_worker, process_env,
                                                               make_sku, make_buyers):
    """The node the confirm consumer is connected to is killed mid-sale: it
    consumes again on another node, and every 202 still becomes one order
    (what it held unacknowledged is delivered again, applied once)."""
    worker = start_worker(process_env, name=f"bc-{uuid.uuid4().hex[:4]}")
    try:
        first = consumer_nodes(worker)
        assert first, worker.log_text()[-2000:]
        sale_with_kill(web, make_sku, make_buyers, lambda: consumer_nodes(worker)[-1])
        wait_until(lambda: len(consumer_nodes(worker)) > len(first), timeout=30, what="the consumer reconnected")
        assert consumer_nodes(worker)[-1] != first[-1], consumer_nodes(worker)
    finally:
        worker.stop()


def test_the_confirm_queues_leader_killed_mid_sale_breaks_no_promise(cluster, web, no_worker, process_env,
                                                                     make_sku, make_buyers):
    """The node leading the confirm queue is killed mid-sale: a follower is
    elected, publishes wait for it (or are answered 503 past their budget), and
    every 202 still becomes one order."""
    worker = start_worker(process_env, name=f"bc-{uuid.uuid4().hex[:4]}")
    try:
        leader = node_port(queue_members(settings.SECKILL_CONFIRM_QUEUE)[0])
        sale_with_kill(web, make_sku, make_buyers, lambda: leader)
        assert node_port(queue_members(settings.SECKILL_CONFIRM_QUEUE)[0]) != leader
    finally:
        worker.stop()


def test_a_queue_declared_short_of_replicas_is_on_every_node_after_up(cluster):
    """A quorum queue with one replica (as one declared before the other nodes
    joined has) gets one on every node from `rabbitmq_cluster_up`."""
    name = f"{settings.CELERY_QUEUE}.grow-{uuid.uuid4().hex[:6]}"
    with broker_connection(connect_timeout=2) as conn:
        broker_connect(conn)
        queue = Queue(name, durable=True, queue_arguments={"x-queue-type": "quorum",
                                                           "x-quorum-initial-group-size": 1})
        queue(conn.default_channel).declare()
        try:
            assert len(queue_members(name)[1]) == 1
            broker_cluster_sh("rabbitmq_cluster_up")
            assert sorted(node_port(m) for m in queue_members(name)[1]) == ports()
            # the project's own queues too
            for project_queue in (settings.SECKILL_CONFIRM_QUEUE, settings.CELERY_DEAD_LETTER_QUEUE):
                assert sorted(node_port(m) for m in queue_members(project_queue)[1]) == ports()
        finally:
            queue(conn.default_channel).delete()


def health(port: int) -> dict:
    """GET /api/v1/health's figures (its status is 503 while any is not ok: no
    worker or beat runs in this test)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=10) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read())


def test_health_answers_with_one_node_down(cluster, web):
    """The health probe's broker check stays ok when the node its kept
    connection is on is killed (the probe goes to another node at once), in
    this process and over GET /api/v1/health (each web process's probe kept
    its own connection before the kill)."""
    from inventory.health import _broker, _check
    from inventory.messages import broker_probe

    for _ in range(6):
        assert health(web.port)["broker"] == "ok"
        time.sleep(0.2)
    assert _check(_broker) == "ok"
    port = int(broker_probe._probe["conn"].port)
    kill(port)
    wait_until(lambda: node_down(port), timeout=10, what="the node down")
    assert _check(_broker) == "ok"
    assert int(broker_probe._probe["conn"].port) != port
    time.sleep(1.1)  # past the web processes' one-second health cache
    answers = [health(web.port)["broker"] for _ in range(6)]
    assert answers == ["ok"] * 6, answers


def node_down(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return False
    except OSError:
        return True
