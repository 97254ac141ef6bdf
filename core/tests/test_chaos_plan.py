"""The fault matrix's plan and its reading of the RabbitMQ cluster (no servers:
benchmarks/chaos/ runs the faults themselves, `bash scripts/chaos`)."""
from benchmarks.chaos import nodes, plan as chaos


def test_cluster_quick_plan_has_every_host_fault_alone_with_a_master_kill_and_paired():
    runs = chaos.plan(None, quick=True, cluster=True)
    assert len(runs) == len(set(runs))
    for name in chaos.HOST_FAULTS:
        assert (name,) in runs
        assert (name, "redis-master-kill") in runs or ("redis-master-kill", name) in runs
    crossed = [r for r in runs if len(r) == 2 and set(r) <= set(chaos.HOST_FAULTS)]
    assert len(crossed) >= 3
    # the single broker's restart does not apply to a cluster: its node restart takes its runs
    assert not any("rabbitmq-restart" in r for r in runs)
    assert ("redis-master-kill", "rabbitmq-node-restart") in runs


def test_cluster_quick_plan_has_every_database_fault_alone_and_with_redis_and_broker_kills():
    runs = chaos.plan(None, quick=True, cluster=True)
    assert set(chaos.GALERA_FAULTS) == {"mariadb-node-kill", "mariadb-node-pause", "mariadb-node-restart",
                                        "mariadb-crash-all"}
    assert set(chaos.GALERA_FAULTS) <= set(chaos.fault_names(True))
    for name in chaos.GALERA_FAULTS:
        assert (name,) in runs
        paired = {r[1] for r in runs if len(r) == 2 and r[0] == name}
        assert paired & {"redis-master-kill", "rabbitmq-node-kill"}, name
    with_database = [r for r in runs if set(r) & set(chaos.GALERA_FAULTS)]
    assert {"redis-master-kill", "rabbitmq-node-kill"} <= {n for r in with_database for n in r}
    # --quick stays quick: at most ten runs for the database
    assert len(with_database) <= 10
    # the full plan pairs each with both
    full = chaos.plan(None, quick=False, cluster=True)
    for name in chaos.GALERA_FAULTS:
        assert (name, "redis-master-kill") in full and (name, "rabbitmq-node-kill") in full
    # --only the database's faults: each alone and its pairs among them
    only = chaos.plan(list(chaos.GALERA_FAULTS), quick=True, cluster=True)
    assert {r for r in only if len(r) == 1} == {(n,) for n in chaos.GALERA_FAULTS}


def test_single_plans_have_no_host_or_cluster_faults():
    for quick in (True, False):
        names = {n for run in chaos.plan(None, quick=quick) for n in run}
        assert not names & set(chaos.HOST_FAULTS + chaos.CLUSTER_FAULTS + chaos.GALERA_FAULTS)
        assert "rabbitmq-restart" in names


def test_hosts_plans_have_every_network_fault_alone_and_paired_with_process_faults():
    quick = chaos.hosts_plan(None, quick=True)
    assert {r for r in quick if len(r) == 1} == {(n,) for n in chaos.NETWORK_FAULTS}
    pairs = [r for r in quick if len(r) == 2]
    assert 2 <= len(pairs) <= 3 and all(r[0] in chaos.NETWORK_FAULTS and r[1] not in chaos.NETWORK_FAULTS
                                        for r in pairs)
    full = chaos.hosts_plan(None, quick=False)
    assert len(full) == len(set(full))
    for name in chaos.NETWORK_FAULTS:
        for fault in chaos.BED_PROCESS_FAULTS:
            assert (name, fault) in full
    # the network faults exist only on the bed
    assert set(chaos.NETWORK_FAULTS) <= set(chaos.fault_names(True, hosts=True))
    assert not set(chaos.GALERA_FAULTS) & set(chaos.fault_names(True, hosts=True))  # the bed: one MariaDB
    for cluster in (True, False):
        assert not set(chaos.NETWORK_FAULTS) & set(chaos.fault_names(cluster))
        planned = {n for run in chaos.plan(None, quick=False, cluster=cluster) for n in run}
        assert not planned & set(chaos.NETWORK_FAULTS)


def test_only_host_faults_gives_them_alone_and_crossed():
    runs = chaos.plan(list(chaos.HOST_FAULTS), quick=True, cluster=True)
    assert {r for r in runs if len(r) == 1} == {(n,) for n in chaos.HOST_FAULTS}
    assert all(set(r) <= set(chaos.HOST_FAULTS) for r in runs)


def test_full_cluster_plan_never_pairs_worker_down_with_the_active_worker_kill():
    runs = chaos.plan(None, quick=False, cluster=True)
    assert not [r for r in runs if "worker-down" in r and "worker-active-kill" in r]
    assert all(r[0] == "worker-down" for r in runs if "worker-down" in r)


def test_consumers_name_their_worker_and_node(monkeypatch):
    rabbit = nodes.RabbitNodes(5687)
    listing = [
        {"queue_name": "q.confirm", "channel_pid": "<seckill-5688@localhost.1700000000.123.0>",
         "consumer_tag": "w1@vm/None1", "active": True},
        {"queue_name": "q.confirm", "channel_pid": "<seckill-5689@localhost.1700000000.77.0>",
         "consumer_tag": "w10@vm#1/None2", "active": False},
        {"queue_name": "q", "channel_pid": "<seckill-5687@localhost.1.2.0>", "consumer_tag": "None3", "active": True},
    ]
    monkeypatch.setattr(rabbit, "_ask", lambda *args: listing)
    got = rabbit.consumers("q.confirm", ["w1@vm", "w10@vm"])
    assert got == [{"tag": "w1@vm/None1", "active": True, "worker": "w1@vm", "node": 5688},
                   {"tag": "w10@vm#1/None2", "active": False, "worker": "w10@vm", "node": 5689}]
    assert rabbit.consumers("q", ["w1@vm"])[0]["worker"] is None
