"""The benchmark's CPU accounting (benchmarks/harness/cpu.py): the shared stores'
processes are told apart by what they listen on, and a store restarted during
a phase never makes its CPU negative (the capacity plan reads these figures)."""
from __future__ import annotations

import os
import socket

from django.test import override_settings

from benchmarks.harness import cpu


def test_the_broker_ports_are_every_url_of_the_list():
    with override_settings(CELERY_BROKER_URL="amqp://u:p@127.0.0.1:5681//;amqp://u:p@127.0.0.1:5682//; "
                                             "amqp://guest:guest@localhost//"):
        assert cpu._broker_ports() == {5681, 5682, 5672}


def test_a_listening_socket_is_found_by_its_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        inode = str(os.fstat(s.fileno()).st_ino)
        assert inode in cpu._listening_inodes({port})
        with socket.socket() as other:
            other.bind(("127.0.0.1", 0))
            other.listen()
            assert inode not in cpu._listening_inodes({other.getsockname()[1]})


def sample(pids: dict[int, tuple[tuple[str, ...], float]]) -> cpu.CpuSample:
    out = cpu.CpuSample({"web": 0.0, "worker": 0.0, "mariadb": 0.0, "redis": 0.0, "rabbitmq": 0.0,
                             "loadgen": 0.0})
    out.pids = pids
    for keys, secs in pids.values():
        for k in keys:
            out[k] = out.get(k, 0.0) + secs
    return out


def test_a_store_restarted_in_the_window_counts_from_its_start(monkeypatch):
    before = sample({10: (("redis", "redis:6379"), 500.0), 20: (("mariadb",), 40.0)})
    # Redis restarted (a new pid with 1.5 s so far), MariaDB went on (+2 s)
    after = sample({11: (("redis", "redis:6379"), 1.5), 20: (("mariadb",), 42.0)})
    monkeypatch.setattr(cpu, "cpu_seconds", lambda: after)
    delta = cpu.cpu_delta(before)
    assert delta["redis"] == 1.5
    assert delta["redis:6379"] == 1.5
    assert delta["mariadb"] == 2.0


def test_the_run_redis_is_counted_and_no_other(monkeypatch):
    """Of the machine's redis-server processes, only the one on REDIS_URL's port."""
    table = cpu.proc_table()
    ours = cpu._our_redis(table)
    assert ours, "the test's Redis (REDIS_URL) is a redis-server on this machine"
    port = int(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0").rsplit(":", 1)[1].split("/")[0])
    assert set(ours.values()) == {port}
    assert all(table[pid][1] == "redis-server" for pid in ours)
