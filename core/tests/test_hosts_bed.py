"""The multi-host test bed (issue 29, benchmarks/hosts): it comes up, its hosts
reach each other over the bridge, a cut drops traffic both ways and its heal
restores it, and `down` leaves no namespace, link, bridge or nft table behind.
Needs root and `ip netns`; skipped otherwise. The last test brings the bed back
up after checking `down`, so a session that uses the bed's stores goes on."""
from __future__ import annotations

import subprocess

import pytest

from benchmarks.hosts import bed, cuts, net

pytestmark = [pytest.mark.hosts]


@pytest.fixture(scope="module")
def the_bed():
    why = net.can_make()
    if why:
        pytest.skip(why)
    bed.up()
    return bed


def test_every_host_reaches_the_others_over_the_bridge(the_bed):
    web1, worker1 = bed.host("web1"), bed.host("worker1")
    for store in bed.STORES:
        assert cuts.reaches(web1, store, 7000)
    assert cuts.reaches(worker1, bed.host("mq2"), bed.AMQP_PORT)
    assert cuts.reaches(worker1, bed.DB_HOSTS[0], bed.DB_PORT)
    # each namespace has its own loopback and its address on eth0, nothing else
    out = subprocess.run(web1.cmd("ip", "-4", "-o", "addr"), capture_output=True, text=True, check=True).stdout
    assert {line.split()[3] for line in out.splitlines()} == {"127.0.0.1/8", f"{web1.ip}/24"}


def test_no_shard_has_two_nodes_on_one_host(the_bed):
    for k in range(3):
        hosts = [bed.redis_master_of_shard(k)[0], *(h for h, _ in bed.redis_replicas_of_shard(k))]
        assert len({h.name for h in hosts}) == 3
        # the nodes themselves announce their namespace's address
        master = bed.redis_master_of_shard(k)
        line = next(x for x in (bed.redis_cli(*master, "cluster", "nodes") or "").splitlines() if "myself" in x)
        assert line.split()[1].startswith(f"{master[0].ip}:{master[1]}@")


def test_a_cut_drops_traffic_both_ways_and_its_heal_restores_it(the_bed):
    web1, store1, store2 = bed.host("web1"), bed.host("store1"), bed.host("store2")
    # a listener on web1, so that the other direction is shown too
    listener = subprocess.Popen(web1.cmd("python3", "-m", "http.server", "8000", "--bind", web1.ip),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _cut_and_heal(web1, store1, store2)
    finally:
        listener.kill()
        listener.wait()


def _cut_and_heal(web1, store1, store2) -> None:
    from testsupport import wait_until

    wait_until(lambda: cuts.reaches(store1, web1, 8000), timeout=20, what="the listener on web1")
    with cuts.cut(web1, store1) as c:
        assert not cuts.reaches(web1, store1, 7000)
        assert not cuts.reaches(store1, web1, 8000)
        assert cuts.reaches(web1, store2, 7000)  # only that pair
        assert store1.ip in web1.dropped() and web1.ip in store1.dropped()
        assert f"web1 drops {store1.ip}" in cuts.listed()
        assert "cut from store1" in bed.status()[1]
        assert str(c) == "web1 x store1"
    assert cuts.reaches(web1, store1, 7000) and cuts.reaches(store1, web1, 8000)
    assert not web1.has_table() and not store1.has_table()  # heal leaves no table of ours


def test_an_isolated_host_reaches_nothing_until_healed(the_bed):
    mq3 = bed.host("mq3")
    c = cuts.isolate(mq3).apply()
    try:
        assert not cuts.reaches(bed.host("mq1"), mq3, bed.AMQP_PORT)
        assert not cuts.reaches(bed.host("web2"), mq3, bed.AMQP_PORT)
    finally:
        c.heal()
    assert cuts.reaches(bed.host("mq1"), mq3, bed.AMQP_PORT)


def test_down_leaves_nothing_behind_and_up_brings_the_same_bed_back(the_bed):
    cuts.cut(bed.host("web2"), bed.host("store3")).apply()  # a cut left standing goes with its namespace
    before = {h.name: bed.redis_pid(h, 7000) for h in bed.STORES}
    bed.down()
    assert net.namespaces() == []
    assert not net.bridge_exists()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert "skv-" not in links and net.BRIDGE not in links
    assert net.TABLE not in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    assert all(not bed._cmdline(pid) for pid in before.values() if pid)  # its processes are gone
    bed.up()  # the data kept: the same clusters come back
    assert bed.redis_healthy() and bed.rabbit_clustered()
    assert not any(h.dropped() for h in bed.HOSTS)
