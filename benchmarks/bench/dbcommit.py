"""The database per commit, the single server beside the Galera cluster: a
pay's shape of transaction (a row locked with SELECT ... FOR UPDATE, updated,
a row inserted, COMMIT) from THREADS connections, in interleaved phases (the
single server on 127.0.0.1:3306, then the cluster through its front, the order
turned every round), each phase's commits a second, latency per commit (p50,
p99) and the CPU of the server's mariadbd processes per commit (the cluster's
three nodes together: certification and applying on the other two included).
In a schema of its own on each (seckill_dbcommit), dropped at the end.

    python -m benchmarks.bench.dbcommit [--base 3311] [--rounds 4] [--seconds 5]

`bash scripts/bench --cluster` runs it after its rounds (its summary's
db_commit_* keys). The machine's MariaDB on 3306 serves other clients at the
same time: its CPU figure includes theirs (the cluster's nodes are this run's)."""
from __future__ import annotations

import argparse
import os
import random
import statistics
import threading
import time
import uuid

from benchmarks.harness import cpu

SCHEMA = "seckill_dbcommit"
THREADS = 8
ROWS = 64  # the locked rows the commits spread over (a sale's SKUs, orders)


def _connect(port: int, db: str | None = SCHEMA):
    import MySQLdb

    return MySQLdb.connect(host="127.0.0.1", port=port, user="root", passwd="", connect_timeout=5,
                           **({"db": db} if db else {}))


def prepare(port: int) -> None:
    conn = _connect(port, None)
    cur = conn.cursor()
    cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
    cur.execute(f"CREATE DATABASE {SCHEMA}")
    cur.execute(f"CREATE TABLE {SCHEMA}.counted (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB")
    cur.execute(f"CREATE TABLE {SCHEMA}.paid (id BIGINT AUTO_INCREMENT PRIMARY KEY, row_id INT NOT NULL, "
                "payment VARCHAR(64) NOT NULL UNIQUE, at DATETIME(6) NOT NULL) ENGINE=InnoDB")
    cur.executemany(f"INSERT INTO {SCHEMA}.counted VALUES (%s, 0)", [(i,) for i in range(ROWS)])
    conn.commit()
    conn.close()


def drop(port: int) -> None:
    conn = _connect(port, None)
    conn.cursor().execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
    conn.close()


def phase(port: int, seconds: float, pids: list[int]) -> dict[str, float]:
    """THREADS connections committing for `seconds`: commits a second, latency
    p50/p99 in ms, CPU ms per commit of `pids` (the server's processes)."""
    import MySQLdb

    latencies: list[float] = []
    retried = [0]
    lock, stop = threading.Lock(), threading.Event()

    def work(seed: int) -> None:
        rnd, conn, mine = random.Random(seed), _connect(port), []
        cur = conn.cursor()
        while not stop.is_set():
            row = rnd.randrange(ROWS)
            t0 = time.perf_counter()
            while True:  # a deadlock or a certification failure (1213) is tried again, as the app does
                try:
                    cur.execute("SELECT n FROM counted WHERE id = %s FOR UPDATE", (row,))
                    cur.execute("UPDATE counted SET n = n + 1 WHERE id = %s", (row,))
                    cur.execute("INSERT INTO paid (row_id, payment, at) VALUES (%s, %s, NOW(6))",
                                (row, uuid.uuid4().hex))
                    conn.commit()
                    break
                except MySQLdb.OperationalError as exc:
                    if exc.args[0] not in (1213, 1205):
                        raise
                    conn.rollback()
                    retried[0] += 1
            mine.append(time.perf_counter() - t0)
        conn.close()
        with lock:
            latencies.extend(mine)

    before = _cpu_of(pids)
    began = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    took = time.perf_counter() - began
    used = _cpu_of(pids) - before
    n = max(1, len(latencies))
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    return {"rate": len(latencies) / took, "p50_ms": 1000 * q[49], "p99_ms": 1000 * q[98],
            "cpu_ms": 1000 * used / n, "retried": retried[0]}


def _cpu_of(pids: list[int]) -> float:
    table = cpu.proc_table()
    return sum(table[p][2] for p in pids if p in table)


def single_pids() -> list[int]:
    """The mariadbd listening on 3306 (the machine's server)."""
    inodes = cpu._listening_inodes({3306})
    return [pid for pid, (_, name, _) in cpu.proc_table().items() if name == "mariadbd" and _listens(pid, inodes)]


def _listens(pid: int, inodes: set[str]) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}").removeprefix("socket:[").rstrip("]") in inodes
                   for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def compare(base: int, rounds: int = 4, seconds: float = 5.0, say=print) -> dict[str, float]:
    """The interleaved phases on both; the medians over the rounds as the summary's db_commit_* keys."""
    from benchmarks.clusters import GaleraCluster

    galera = GaleraCluster(base)
    targets = {"single": (3306, single_pids()), "galera": (galera.front, [p for p in map(galera.pid, galera.ports)
                                                                           if p is not None])}
    for port, _ in targets.values():
        prepare(port)
    got: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
    try:
        for r in range(rounds):
            order = list(targets) if r % 2 == 0 else list(reversed(targets))
            for name in order:
                port, pids = targets[name]
                got[name].append(phase(port, seconds, pids))
                f = got[name][-1]
                say(f"    round {r + 1} {name:<7} {f['rate']:>7.0f} commits/s  p50 {f['p50_ms']:6.2f} ms  "
                    f"p99 {f['p99_ms']:6.2f} ms  CPU {f['cpu_ms']:.3f} ms/commit  1213 retried {f['retried']}")
    finally:
        for port, _ in targets.values():
            drop(port)
    out = {}
    for name, phases in got.items():
        for key in ("rate", "p50_ms", "p99_ms", "cpu_ms", "retried"):
            out[f"db_commit_{key}_{name}"] = round(statistics.median(f[key] for f in phases), 3)
    say(f"    medians over {rounds} rounds ({THREADS} connections, a pay's shape of commit): "
        + "; ".join(f"{name} {out[f'db_commit_rate_{name}']:.0f}/s p99 {out[f'db_commit_p99_ms_{name}']:.2f} ms "
                    f"CPU {out[f'db_commit_cpu_ms_{name}']:.3f} ms" for name in targets))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench.dbcommit", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=int, default=3311, help="the Galera cluster's first port (its front base+3)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    out = compare(args.base, args.rounds, args.seconds)
    print(" ".join(f"{k}={v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
