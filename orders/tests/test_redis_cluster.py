"""A Redis Cluster node lost mid-sale costs the SKUs of its shard a pause, never
a broken promise, and the SKUs of the other shards nothing (issue 20).

Against the real cluster REDIS_URL names (skipped on one Redis): its nodes are
found from CLUSTER NODES, not from fixed ports, and faulted for real: a master
SIGKILLed, a master SIGSTOPped for 8 s, a replica promoted with CLUSTER
FAILOVER. Each test heals the cluster afterwards (`bash scripts/cluster up` for
its ports: a killed node comes back as a replica, a paused one is resumed), so
the next finds it whole. The clicks and the accounting are
test_redis_loss.py's: every 202 an order that did not fail, no order without
a 202, no key with two orders, sold out exactly, the stores agreeing.

The faults land on different shards (the one of the SKU registry, the one of
the fences' listing, one with neither), and the nodes are balanced back to two
replicas per master after each heal. Each test prints what the fault cost: the
affected SKU's first 503 answered to its first new 202, and the fault itself
to that 202 (the pause a buyer sees: the first 503s take a second or two)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, replace

import pytest
from django.conf import settings
from redis import Redis
from redis.crc import key_slot

from accounts import token_cache
from core.redis.connection import clustered, redis
from core.redis.errors import RedisError
from core.redis.instance import instance_check
from core.redis.shards import shard_of, shards
from inventory.models import ReservationDecision, Sku
from inventory.redis import keys as redis_keys, live as redis_live, snapshots as redis_snapshots
from orders.models import Order
from orders.tests.test_redis_loss import Click, click_all, first_sale_after, judge
from testsupport import ROOT, wait_until
from testsupport.factories import unique
from testsupport.http import Http
from testsupport.processes import start_web, start_worker
from testsupport.stores import assert_balanced, confirmed, decr_log_by_order, settled

pytestmark = [
    pytest.mark.redis_cluster, pytest.mark.web, pytest.mark.worker,
    pytest.mark.skipif(not clustered(), reason="REDIS_URL names one Redis, not a Redis Cluster"),
]

PAUSE_S = 8.0


# --- The cluster's nodes, as CLUSTER NODES tells them ------------------------------------

@dataclass(frozen=True)
class Node:
    id: str
    host: str
    port: int
    master_id: str  # "-" for a master
    flags: str      # "master", "slave", with "fail", "fail?" ... ("unreachable": did not answer us)
    slots: tuple[tuple[int, int], ...]
    myself: bool = False

    @property
    def name(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def master(self) -> bool:
        return "master" in self.flags and "fail" not in self.flags and "unreachable" not in self.flags \
            and bool(self.slots)

    def client(self) -> Redis:
        return _node_client(self.host, self.port)

    def serves(self, key_name: str) -> bool:
        slot = key_slot(key_name.encode())
        return any(a <= slot <= b for a, b in self.slots)

    def info(self) -> dict:
        return self.client().info("server")

    def pid(self) -> int:
        """The redis-server process behind this node (it must run on this machine)."""
        pid = int(self.info()["process_id"])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode()
        assert "redis-server" in cmdline and f":{self.port}" in cmdline, (pid, cmdline)
        return pid


def _parse_nodes(raw: bytes | str) -> list[Node]:
    out = []
    for line in (raw.decode() if isinstance(raw, bytes) else raw).splitlines():
        parts = line.split()
        if len(parts) < 8 or ":" not in parts[1]:
            continue
        host, _, port = parts[1].split("@")[0].rpartition(":")
        if not port.isdigit() or not host:
            continue  # a node with no address (noaddr)
        slots = []
        for s in parts[8:]:
            if not s.startswith("["):  # "[slot->-id]": a slot migrating, not owned
                a, _, b = s.partition("-")
                slots.append((int(a), int(b or a)))
        flags = parts[2].split(",")
        out.append(Node(parts[0], host, int(port), parts[3], ",".join(f for f in flags if f != "myself"),
                        tuple(slots), myself="myself" in flags))
    return sorted(out, key=lambda n: n.port)


def _node_client(host: str, port: int) -> Redis:
    """One node on its own, with the credentials of REDIS_URL (scripts/cluster gives every node a password)."""
    return Redis(host, port, username=settings.REDIS_CLUSTER_USERNAME, password=settings.REDIS_CLUSTER_PASSWORD,
                 socket_timeout=1, socket_connect_timeout=0.5)


def _cluster_nodes(host: str, port: int) -> list[Node] | None:
    try:
        return _parse_nodes(_node_client(host, port).execute_command("CLUSTER", "NODES"))
    except RedisError:
        return None


def topology(*, avoid: Node | None = None) -> list[Node]:
    """Every node of the cluster, each as it tells of itself (another node's
    view lags a failover by a round of gossip); one that does not answer, or
    `avoid` (a node faulted: not asked), as the first node that answered sees
    it, flagged "unreachable". The nodes are found from REDIS_URL's seeds and
    the nodes the client knows."""
    seeds = [(h, p) for h, p in settings.REDIS_CLUSTER_NODES]
    with contextlib.suppress(RedisError):
        seeds += [(n.host, n.port) for n in redis().get_nodes()]
    view = None
    for host, port in dict.fromkeys(seeds):
        if avoid is None or (host, port) != (avoid.host, avoid.port):
            view = _cluster_nodes(host, port)
            if view:
                break
    assert view, "no node of the cluster answers"
    out = []
    for n in view:
        told = None if avoid is not None and n.name == avoid.name else _cluster_nodes(n.host, n.port)
        me = [x for x in told or [] if x.myself]
        out.append(me[0] if me else replace(n, flags=n.flags + ",unreachable", myself=False))
    return out


def masters(nodes: list[Node]) -> list[Node]:
    return [n for n in nodes if n.master]


class Cluster:
    """The cluster under test: its faults, and its healing by scripts/cluster."""

    def __init__(self, base: int):
        self.base = base
        self.paused: list[int] = []

    def heal(self) -> None:
        """`bash scripts/cluster up` for these ports: restarts a killed node,
        resumes a paused one, waits until every slot is served and every
        replica in sync."""
        for pid in self.paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.paused.clear()
        self._up()
        if self._balance():
            self._up()  # the moved replicas in sync
        with contextlib.suppress(RedisError):
            redis().nodes_manager.initialize()

    def _up(self) -> None:
        done = subprocess.run(["bash", str(ROOT / "scripts" / "cluster"), "up"], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, env=dict(os.environ, SECKILL_REDIS_CLUSTER_BASE=str(self.base)))
        assert done.returncode == 0, done.stdout + done.stderr

    def _balance(self) -> bool:
        """Two replicas per master again. Redis moves a replica to a master left
        with none for a moment (replica migration: a promoted replica before
        its sibling follows it), and the killed node rejoins that shard too, so
        a few faults leave one master three replicas and another one; a kill of
        that one's master would leave its successor none, refusing every write
        (min-replicas-to-write) until the dead node is back."""
        moved = False
        for _ in range(6):
            nodes = topology()
            of = {m.id: [n for n in nodes if n.master_id == m.id] for m in masters(nodes)}
            short = [m for m in masters(nodes) if len(of[m.id]) < 2]
            spare = [reps[0] for reps in of.values() if len(reps) > 2]
            if not short or not spare:
                return moved
            mover, to = spare[0], short[0]
            mover.client().execute_command("CLUSTER", "REPLICATE", to.id)
            moved = True

            def following(mover: Node = mover, to: Node = to) -> bool:
                repl = mover.client().info("replication")
                return repl.get("master_port") == to.port and repl.get("master_link_status") == "up"

            wait_until(following, timeout=30, what=f"{mover.name} following {to.name}")
        return moved

    def kill(self, node: Node) -> None:
        os.kill(node.pid(), signal.SIGKILL)

    def pause(self, node: Node, seconds: float) -> threading.Thread:
        pid = node.pid()
        self.paused.append(pid)
        os.kill(pid, signal.SIGSTOP)

        def resume() -> None:
            time.sleep(seconds)
            os.kill(pid, signal.SIGCONT)

        t = threading.Thread(target=resume, daemon=True)
        t.start()
        return t

    def failover(self, replica: Node) -> None:
        """A planned CLUSTER FAILOVER: the replica takes over once it is in sync;
        returns once it takes writes (a replica of its own acknowledging:
        min-replicas-to-write). Asked again if it timed out (its master may not
        know it as its replica yet, right after a failover of its own)."""
        def in_sync() -> bool:
            return replica.client().info("replication").get("master_link_status") == "up"

        def writable() -> bool:
            repl = replica.client().info("replication")
            return repl["role"] == "master" and int(repl.get("min_slaves_good_slaves", 0)) >= 1

        for _ in range(3):
            wait_until(in_sync, timeout=15, what=f"{replica.name} in sync with its master")
            replica.client().execute_command("CLUSTER", "FAILOVER")
            try:
                wait_until(writable, timeout=8, interval=0.02, what=f"{replica.name} promoted and taking writes")
                return
            except AssertionError:
                if replica.client().info("replication")["role"] == "master":
                    raise
        raise AssertionError(f"{replica.name} was not promoted by CLUSTER FAILOVER")

    def promoted(self, lost: Node, *, timeout: float = 30.0) -> Node:
        """Wait until another node serves `lost`'s first slot; that node."""
        first = lost.slots[0][0]

        def successor() -> Node | None:
            try:
                nodes = topology(avoid=lost)
            except AssertionError:
                return None
            for n in masters(nodes):
                if n.id != lost.id and any(a <= first <= b for a, b in n.slots):
                    return n
            return None

        return wait_until(successor, timeout=timeout, interval=0.05, what=f"a replica of {lost.name} promoted")

    def replicas_of(self, master: Node) -> list[Node]:
        return [n for n in topology() if n.master_id == master.id and "fail" not in n.flags
                and "unreachable" not in n.flags]


def shards_checked() -> None:
    """Every shard's instance checked before the test's SKUs exist, as the
    suite's `_redis_checked` leaves them after a test: a shard met unchecked
    (a session's first, a node promoted by the test before) would fence the
    test's SKUs at its first click and blur the pause measured."""
    for shard in shards():
        before = shard.client.get(shard.key("instance"))
        instance_check(shard, recorded_only=True)
        if before is None or before.decode() != shard.client.info("server")["run_id"]:
            shard.client.delete(token_cache.claims_fence_key(shard.tag))  # nothing of this test is in flight


def _cluster_dir(base: int):
    return ROOT / "var" / "cluster" / ("redis" if base == 7000 else f"redis-{base}")


@pytest.fixture
def cluster(live_db):
    nodes = topology()
    base = min(n.port for n in nodes)
    ports = [n.port for n in nodes]
    if (any(n.host not in ("127.0.0.1", "localhost") for n in nodes) or ports != list(range(base, base + 9))
            or not all((_cluster_dir(base) / str(p) / "redis.conf").exists() for p in ports)):
        pytest.skip("not a cluster scripts/cluster started on this machine: its nodes cannot be faulted and healed")
    c = Cluster(base)
    c.heal()  # whole before the fault (a run that died may have left a node down)
    shards_checked()
    try:
        yield c
    finally:
        c.heal()


# --- SKUs and buyers on chosen shards ------------------------------------------------------

def sku_on(master: Node, *, stock: int, per_user_limit: int = 1) -> Sku:
    """A SKU on sale whose keys live on `master`'s shard."""
    from inventory.services.skus import sku_create

    while True:
        sku_id = unique("T")
        if master.serves(redis_keys.sku_keys(sku_id).stock):
            return sku_create(sku_id=sku_id, stock=stock, per_user_limit=per_user_limit)


def tokens(buyers, master: Node, *, on: bool) -> list[str]:
    """The buyers' tokens whose keys live on `master`'s shard (on), or elsewhere."""
    return [tok for _, tok in buyers if master.serves(token_cache.token_keys(tok).record) == on]


def takes_are_the_202s(sku_id: str, accepted: set[str]) -> None:
    """The gate's takes of the SKU that MySQL kept are exactly the 202s: a
    request answered 503 took nothing, or its take was undone and recorded as
    released (its sale log row `fail`; an order's is `pending` until the mover
    applies it)."""
    for order_id in accepted:
        confirmed(order_id)
    settled(sku_id)
    log = decr_log_by_order(sku_id)
    assert {o for o, status in log.items() if status != "fail"} == accepted
    assert assert_balanced(sku_id).locked_stock == len(accepted)


def answers(clicks: list[Click]) -> list[tuple[float, float, int, dict]]:
    return [a for c in clicks for a in c.answers]


def first_503(clicks: list[Click]) -> float | None:
    return min((answered for _, answered, status, _ in answers(clicks) if status == 503), default=None)


def pause_of(clicks: list[Click]) -> float | None:
    """The affected SKU's pause: its first 503 answered to its first new 202
    (answered to a request sent after that 503)."""
    since = first_503(clicks)
    return None if since is None else first_sale_after(clicks, since)


def shard_now(key_name: str):
    """The shard holding `key_name` as the cluster has it now (this process's
    client learns of a promotion only when it next meets the slot)."""
    client = redis()
    client.nodes_manager.initialize()
    return shard_of(client, key_name)


def paused_during(clicks: list[Click], start: float, end: float) -> list[tuple]:
    return [a for a in answers(clicks) if start <= a[0] <= end]


# --- A sale of two SKUs on two shards, a fault landing on one of them ------------------------

@dataclass
class TwoShardSale:
    hit: Sku           # on the shard the fault lands on
    spared: Sku        # on another shard
    hit_clicks: list[Click]
    spared_clicks: list[Click]
    fault_at: float
    hit_outcome: dict
    spared_outcome: dict

    @property
    def pause(self) -> float | None:
        return pause_of(self.hit_clicks)


def master_serving(key_name: str) -> Node:
    return next(m for m in masters(topology()) if m.serves(key_name))


def master_of_no_global_key() -> Node:
    """A master holding neither the SKU registry nor the fences' listing (if
    one does), so that the tests between them fault every shard."""
    found = masters(topology())
    plain = [m for m in found if not m.serves(redis_keys.SKU_REGISTRY) and not m.serves(redis_keys.FENCES_KEY)]
    return (plain or found)[0]


def sale_with_fault(cluster: Cluster, make_buyers, web, fault, target: Node) -> TwoShardSale:
    """SKU `hit` (60 units, one each) on a master, SKU `spared` on another, the
    buyers' tokens off the first one's shard; `fault(master)` lands on `hit`'s
    master once `hit` sold 10. `hit` is clicked (each click sent again while
    it is answered 503) until it sold out; `spared` all along, so it sells
    through the whole pause."""
    other = next(m for m in masters(topology()) if m.id != target.id)
    stock = 60
    hit = sku_on(target, stock=stock)
    spared = sku_on(other, stock=2000, per_user_limit=50)
    toks = tokens(make_buyers(300), target, on=False)[:160]
    hit_clicks = [Click(t, uuid.uuid4().hex) for t in toks]
    spared_clicks: list[Click] = []
    over = threading.Event()
    fault_at: list[float] = []

    def land() -> None:
        wait_until(lambda: (redis_live.live_stock(sku_id=hit.sku_id) or redis_live.LiveStock(stock, 0, 0, 0, 0))
                   .available <= stock - 10, timeout=30, interval=0.01, what="the sale under way")
        fault_at.append(time.monotonic())
        fault(target)

    def spare() -> None:
        http, i = Http(web.port), 0
        while not over.is_set():
            c = Click(toks[i % len(toks)], uuid.uuid4().hex)
            sent = time.monotonic()
            status, body = http.post_order(c.token, spared.sku_id, 1, c.key)
            c.answers.append((sent, time.monotonic(), status, body))
            spared_clicks.append(c)
            i += 1
            time.sleep(0.05)

    landing = threading.Thread(target=land)
    sparing = [threading.Thread(target=spare) for _ in range(3)]
    landing.start()
    for t in sparing:
        t.start()
    try:
        click_all(web.port, hit.sku_id, hit_clicks, threads=10, patience=40, gap_s=0.1)
    finally:
        over.set()
        landing.join()
        for t in sparing:
            t.join()
    assert fault_at, "the fault did not land"
    sale = TwoShardSale(hit, spared, hit_clicks, spared_clicks, fault_at[0],
                        judge(hit.sku_id, stock, hit_clicks), judge(spared.sku_id, 2000, spared_clicks))
    for sku, clicks in ((hit, hit_clicks), (spared, spared_clicks)):
        takes_are_the_202s(sku.sku_id, {a[3]["order_id"] for a in answers(clicks) if a[2] == 202})

    # The hit SKU paused (503 unavailable, nothing taken: the accounting above),
    # then sold out exactly; the spared one never answered 503.
    hit_503 = [body for _, _, status, body in answers(hit_clicks) if status == 503]
    assert hit_503 and {b.get("code") for b in hit_503} == {"unavailable"}, hit_503[:3]
    assert sale.hit_outcome == {"accepted": stock, "sold_out": True}, sale.hit_outcome
    assert sale.pause is not None
    spared_statuses = [status for _, _, status, _ in answers(spared_clicks)]
    assert set(spared_statuses) <= {202, 409}, {s: spared_statuses.count(s) for s in set(spared_statuses)}
    # ... and sold all along the hit one's pause
    paused_from = first_503(hit_clicks)
    during = [a for a in paused_during(spared_clicks, paused_from, paused_from + sale.pause) if a[2] == 202]
    assert during, "the spared SKU sold nothing while the other shard paused"
    released = ReservationDecision.objects.filter(sku_id=hit.sku_id, outcome="undone").count()
    print(f"{fault.__name__}: {sale.hit.sku_id} on {target.name} paused {sale.pause:.2f} s "
          f"(fault to first 202 {first_sale_after(hit_clicks, sale.fault_at):.2f} s; "
          f"{len(hit_503)} answers 503, {released} takes undone and recorded released); "
          f"{spared.sku_id} on {other.name} sold {len(during)} meanwhile, no 503")
    return sale


def test_a_master_killed_mid_sale_pauses_its_skus_only(cluster, web, worker, make_buyers):
    def master_kill(master: Node) -> None:
        cluster.kill(master)

    # the master of the SKU registry and the consumers' beats: what the hot path does not need
    sale = sale_with_fault(cluster, make_buyers, web, master_kill, master_serving(redis_keys.SKU_REGISTRY))
    assert Sku.objects.get(pk=sale.hit.sku_id).redis_epoch == 2  # rebuilt once, behind its fence
    assert Sku.objects.get(pk=sale.spared.sku_id).redis_epoch == 1


def refused_for_replicas(node: Node) -> int:
    """Writes the node refused since it started for want of replicas in sync
    (min-replicas-to-write: NOREPLICAS)."""
    stat = node.client().info("errorstats").get("errorstat_NOREPLICAS") or {}
    return int(stat.get("count", 0))


def test_a_master_paused_mid_sale_breaks_no_promise(cluster, web, worker, make_buyers):
    """Paused 8 s (SIGSTOP, then SIGCONT): its replica is promoted meanwhile
    (the clients read the layout again after a timeout: they do not wait for
    the paused one to wake up), and what it still finds in its sockets when it
    wakes up takes nothing: it is a replica by then, or refuses writes for want
    of replicas in sync (min-replicas-to-write, NOREPLICAS)."""
    resumed: list[threading.Thread] = []
    paused: list[tuple[Node, int]] = []

    def master_pause(master: Node) -> None:
        paused.append((master, refused_for_replicas(master)))
        resumed.append(cluster.pause(master, PAUSE_S))

    # the master of the fences' listing: the new primary lists its SKUs' fences itself
    sale = sale_with_fault(cluster, make_buyers, web, master_pause, master_serving(redis_keys.FENCES_KEY))
    for t in resumed:
        t.join()
    (node, before), = paused
    wait_until(lambda: node.client().info("replication")["role"] == "slave", timeout=15,
               what=f"{node.name} a replica once resumed")
    print(f"the paused master refused {refused_for_replicas(node) - before} write(s) with NOREPLICAS once it"
          " woke up")
    assert Sku.objects.get(pk=sale.hit.sku_id).redis_epoch == 2  # its replica promoted: a new instance
    assert Sku.objects.get(pk=sale.spared.sku_id).redis_epoch == 1


def test_a_replica_promoted_by_a_planned_failover_fences_and_rebuilds_its_skus(cluster, web, worker, make_buyers):
    """CLUSTER FAILOVER hands a synced replica the slots: a new instance all the
    same (a synced handover is not told apart), so its SKUs are fenced and
    rebuilt behind the confirm queue; the other shards' SKUs sell on."""
    promoted: list[Node] = []

    def planned_failover(master: Node) -> None:
        replica = cluster.replicas_of(master)[0]
        cluster.failover(replica)
        promoted.append(replica)

    sale = sale_with_fault(cluster, make_buyers, web, planned_failover, master_of_no_global_key())
    assert Sku.objects.get(pk=sale.hit.sku_id).redis_epoch == 2  # fenced and rebuilt once
    assert Sku.objects.get(pk=sale.spared.sku_id).redis_epoch == 1
    shard = shard_now(redis_keys.sku_keys(sale.hit.sku_id).stock)
    assert shard.name == promoted[0].name
    assert shard.client.get(shard.key("instance")).decode() == promoted[0].info()["run_id"]


def test_a_promoted_replica_without_the_scripts_is_checked_and_loaded(cluster, process_env, worker, live_db,
                                                                     make_buyers):
    """The new primary has no script cache: the first purchase on it is
    answered, not failed (no NOSCRIPT reaches the client): the check of the
    new instance fences the shard's SKUs and its claims, loads every script
    and records its run id; the SKU sells again by itself. A web tier of its
    own, so that its log is this test's alone."""
    target = masters(topology())[0]
    sku = sku_on(target, stock=10, per_user_limit=5)
    toks = tokens(make_buyers(12), target, on=False)[:4]
    web = start_web(process_env, name=f"web-noscript-{uuid.uuid4().hex[:6]}", workers=1)
    try:
        http = Http(web.port)
        status, body = http.post_order(toks[0], sku.sku_id, 1, uuid.uuid4().hex)
        assert status == 202, body
        accepted = {body["order_id"]}
        replica = cluster.replicas_of(target)[0]
        replica.client().script_flush()  # a replica that was a primary before may keep the scripts of then
        shas = [redis_keys.RESERVE_LUA.script.sha, redis_keys.UNDO_LUA.script.sha,
                token_cache.AUTHORIZE_LUA.script.sha]
        assert replica.client().script_exists(*shas) == [False] * len(shas)
        cluster.failover(replica)
        run_id = replica.info()["run_id"]

        status, body = http.post_order(toks[1], sku.sku_id, 1, uuid.uuid4().hex)
        assert (status, body.get("code")) == (503, "unavailable"), (status, body)
        assert redis_snapshots.fence_token(sku_id=sku.sku_id) is not None  # fenced by the check: nothing taken
        shard = shard_now(redis_keys.sku_keys(sku.sku_id).stock)
        assert shard.name == replica.name
        assert shard.client.get(shard.key("instance")).decode() == run_id
        assert shard.client.get(token_cache.claims_fence_key(shard.tag)) is not None
        assert replica.client().script_exists(*shas) == [True] * len(shas)
        click = Click(toks[1], uuid.uuid4().hex)
        click_all(web.port, sku.sku_id, [click], threads=1, patience=30)
        assert click.final()[0] == 202, click.answers[-3:]
        logged = web.log_text()
    finally:
        web.stop()
    assert "NoScript" not in logged and "Traceback" not in logged and "unhandled" not in logged, logged[-3000:]
    print(f"after the failover to {replica.name}: sold again {first_sale_after([click], click.answers[0][0]):.2f} s"
          " after the first click on it")
    assert Sku.objects.get(pk=sku.sku_id).redis_epoch == 2
    accepted.add(click.final()[1]["order_id"])
    takes_are_the_202s(sku.sku_id, accepted)


def test_the_tokens_master_killed_pauses_its_buyers_until_their_claims_fence_passed(
        cluster, web, worker, make_buyers):
    """The master holding some buyers' token keys is killed: their purchases
    answer 503 with nothing taken (the record and its claims are gone, and
    MySQL cannot answer for them until the claims fence passed the confirm
    queue), then go through by themselves; buyers whose tokens live
    elsewhere never pause."""
    target = master_of_no_global_key()
    other = next(m for m in masters(topology()) if m.id != target.id)
    sku = sku_on(other, stock=200, per_user_limit=5)
    buyers = make_buyers(40)
    lost_toks, kept_toks = tokens(buyers, target, on=True)[:6], tokens(buyers, target, on=False)[:6]
    assert lost_toks and kept_toks
    before = [Click(t, uuid.uuid4().hex) for t in lost_toks + kept_toks]
    click_all(web.port, sku.sku_id, before, threads=6, patience=0)
    assert [c.final()[0] for c in before] == [202] * len(before)  # their records are in Redis now
    available = redis_live.live_stock(sku_id=sku.sku_id).available

    cluster.kill(target)
    killed_at = time.monotonic()
    promoted: list[tuple[float, Node]] = []

    def watch_promotion() -> None:
        successor = cluster.promoted(target)
        promoted.append((time.monotonic(), successor))

    watch = threading.Thread(target=watch_promotion)
    watch.start()
    lost = [Click(t, uuid.uuid4().hex) for t in lost_toks]
    kept = [Click(t, uuid.uuid4().hex) for t in kept_toks for _ in range(3)]
    first = [Click(c.token, c.key) for c in lost]  # one click each, answered while the node is down
    click_all(web.port, sku.sku_id, first, threads=6, patience=0)
    assert {(c.final()[0], c.final()[1].get("code")) for c in first} == {(503, "unavailable")}, \
        [c.final() for c in first]
    assert redis_live.live_stock(sku_id=sku.sku_id).available == available  # nothing taken
    t = threading.Thread(target=click_all, args=(web.port, sku.sku_id, kept), kwargs={"threads": 3, "gap_s": 0.5})
    t.start()
    click_all(web.port, sku.sku_id, lost, threads=6, patience=40)
    t.join()
    watch.join()

    assert [c.final()[0] for c in lost] == [202] * len(lost), [c.final() for c in lost]
    # still 503 after the promotion: the claims fence held them until it passed
    promoted_at, successor = promoted[0]
    assert any(sent > promoted_at and status == 503 for sent, _, status, _ in answers(lost))
    kept_statuses = {status for _, _, status, _ in answers(kept)}
    assert kept_statuses == {202}, kept_statuses
    accepted = {a[3]["order_id"] for a in answers(before + lost + kept) if a[2] == 202}
    assert len(accepted) == len(before) + len(lost) + len(kept)
    takes_are_the_202s(sku.sku_id, accepted)
    shard = shard_now(token_cache.token_keys(lost_toks[0]).record)
    assert shard.name == successor.name
    assert shard.client.get(shard.key("instance")).decode() == successor.info()["run_id"]
    assert shard.client.get(token_cache.claims_fence_key(shard.tag)) is None  # passed
    pause = first_sale_after(lost, killed_at)
    print(f"token keys on {target.name}: {successor.name} promoted {promoted_at - killed_at:.2f} s after the kill, "
          f"buyers sold again {pause:.2f} s after it (first 503 to first 202 {pause_of(first + lost):.2f} s)")


def test_a_key_used_before_its_tokens_master_was_lost_is_refused_for_another_sku(
        cluster, web, no_worker, process_env, make_buyers):
    """The key's first reservation is still in the broker (no consumer) when the
    master holding the token's claims is killed. Reused for another SKU after
    the promotion: 503 while the claims fence stands (MySQL does not know the
    key yet), then 422 once the fence passed behind that reservation, never a
    202 that the confirm would have to refuse."""
    target = master_of_no_global_key()
    other = next(m for m in masters(topology()) if m.id != target.id)
    sku_a = sku_on(other, stock=5)
    sku_b = sku_on(other, stock=5)
    token = tokens(make_buyers(12), target, on=True)[0]
    key = uuid.uuid4().hex
    http = Http(web.port)
    status, body = http.post_order(token, sku_a.sku_id, 1, key)
    assert status == 202, body
    order_id = body["order_id"]

    cluster.kill(target)
    killed_at = time.monotonic()
    cluster.promoted(target)
    reused = Click(token, key)
    click_all(web.port, sku_b.sku_id, [reused], threads=1, patience=3)
    assert {a[2] for a in reused.answers} == {503}, reused.answers  # the claims fence stands: no consumer
    assert not Order.objects.filter(order_id=order_id).exists()  # the first reservation is still in the broker

    # A process started now needs a seed that answers: REDIS_URL may name only
    # the node just killed (a single seed is no way in while it is down).
    # The URL keeps its credentials (the local cluster has a password).
    seeds = ",".join(n.name for n in topology(avoid=target) if "unreachable" not in n.flags)
    scheme, _, rest = process_env["REDIS_URL"].partition("://")
    credentials = rest.rpartition("@")[0]
    url = f"{scheme}://{credentials + '@' if credentials else ''}{seeds}"
    worker = start_worker(dict(process_env, REDIS_URL=url),
                          name=f"back-{uuid.uuid4().hex[:4]}")
    started = time.monotonic()
    try:
        click_all(web.port, sku_b.sku_id, [reused], threads=1, patience=40)
        statuses = [a[2] for a in reused.answers]
        assert set(statuses) <= {503, 422} and statuses[-1] == 422, statuses
        print(f"the reused key: 503 x{statuses.count(503)}, then 422 {reused.answers[-1][1] - killed_at:.2f} s "
              f"after the kill ({reused.answers[-1][1] - started:.2f} s after a consumer was started)")
        assert reused.final()[1].get("order_id") == order_id
        again = Click(token, key)
        click_all(web.port, sku_a.sku_id, [again], threads=1, patience=20)
        assert again.final()[0] == 202 and again.final()[1]["order_id"] == order_id, again.answers
        takes_are_the_202s(sku_a.sku_id, {order_id})
        takes_are_the_202s(sku_b.sku_id, set())
    finally:
        worker.stop()
    assert not Order.objects.filter(sku_id=sku_b.sku_id).exists()


def test_a_primary_promoted_again_is_checked_again_by_a_process_that_checked_it_before(cluster, live_db):
    """The shard goes to a replica and comes back to its old primary, which
    kept the scripts it loaded before (no NOSCRIPT) and its name, while this
    process made no call in between: it last checked the shard on that very
    node. Its check has lapsed by then (core.redis.instance.SHARD_RECHECK_S), so it
    checks again: the instance key names the replica, and the shard is fenced
    before any script of this process runs there."""
    from core.redis.instance import SHARD_RECHECK_S
    from core.redis.shards import Shard, slot_tag
    from inventory.redis import gate

    target = master_of_no_global_key()
    sku = sku_on(target, stock=5)  # its warm-up: this process's scripts ran on `target`, checked there
    stock_key = redis_keys.sku_keys(sku.sku_id).stock
    reserve_sha = redis_keys.RESERVE_LUA.script.sha
    replica = cluster.replicas_of(target)[0]
    cluster.failover(replica)
    # another process meets the new primary first and checks it (this one makes no call meanwhile)
    client = redis()
    client.nodes_manager.initialize()
    first = min(a for a, _ in serving(replica))
    successor = Shard(client.get_redis_connection(client.get_node(host=replica.host, port=replica.port)),
                      slot_tag(first), replica.name)
    instance_check(successor, recorded_only=True)
    assert successor.client.get(successor.key("instance")).decode() == replica.info()["run_id"]

    cluster.failover(target)  # back: the same node and name, its scripts still loaded
    assert target.client().script_exists(reserve_sha) == [True]
    time.sleep(SHARD_RECHECK_S)
    got = gate.reserve(sku_id=sku.sku_id, user_id=1, quantity=1, idempotency_key=uuid.uuid4().hex,
                       order_id=uuid.uuid4().hex)
    assert got.code is redis_keys.Reserve.FENCED  # checked again: its data not trusted before the rebuild
    shard = shard_now(stock_key)
    assert shard.name == target.name
    assert shard.client.get(shard.key("instance")).decode() == target.info()["run_id"]


def serving(node: Node) -> tuple[tuple[int, int], ...]:
    """The slots `node` serves now, as it tells itself."""
    me = [n for n in _cluster_nodes(node.host, node.port) or [] if n.myself]
    assert me and me[0].slots, me
    return me[0].slots
