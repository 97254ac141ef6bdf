"""`bash scripts/cluster status`: one line per node of each cluster (Redis,
RabbitMQ, MariaDB), and
whether the cluster is whole, as the nodes themselves answer."""
from __future__ import annotations

from benchmarks.clusters.mariadb_cluster import GaleraCluster
from benchmarks.clusters.nodes import stopped, without_passwords
from benchmarks.clusters.rabbitmq_cluster import RabbitCluster
from benchmarks.clusters.redis_cluster import RedisCluster

REDIS_ROW = "%-6s %-8s %-8s %-22s %-6s %s"
RABBIT_ROW = "%-6s %-8s %-8s %-28s %s"


def _view(cluster: RedisCluster) -> str:
    """CLUSTER NODES as one node sees it: the last running node that says
    cluster_state:ok, else the first that answers at all."""
    view = ""
    for port in cluster.ports:
        if cluster.pid(port) is None:
            continue
        if not view or cluster.info(port, "cluster").get("cluster_state") == "ok":
            view = cluster.cli(port, "cluster", "nodes") or ""
    return view


def _role(flags: str, master: str, port_of: dict[str, str], running: bool) -> str:
    """master, "replica of <port>", or the flags; for a stopped node how the others
    flag it (fail, or pfail while they have not decided)."""
    if "master" in flags:
        role = "master"
    elif "slave" in flags:
        role = f"replica of {port_of.get(master, '?')}"
    else:
        role = flags or "-"
    if not running and "fail?" in flags:
        role += " (pfail)"
    elif not running and "fail" in flags:
        role += " (fail)"
    return role


def redis_status(cluster: RedisCluster) -> tuple[bool, str]:
    """(ok, the table): per node its pid, role, whose replica, a master's slots and
    its own cluster_state; ok when every slot is served by a live master that
    takes writes and every node that answers says cluster_state:ok (a stopped
    replica is shown but tolerated). A paused node costs 2 s per question."""
    view = _view(cluster)
    port_of = {}
    for line in view.splitlines():
        fields = line.split()
        if len(fields) > 1:
            port_of[fields[0]] = fields[1].split("@")[0].rpartition(":")[2]
    rows = [REDIS_ROW % ("port", "pid", "state", "role", "cluster", "slots")]
    running = 0
    for port in cluster.ports:
        pid = cluster.pid(port)
        if pid is not None:
            running += 1
            fields = cluster.myself(port)
            if not fields:
                rows.append(REDIS_ROW % (port, pid, "running", "(not answering)", "-", ""))
                continue
            state = cluster.info(port, "cluster").get("cluster_state") or "-"
        else:
            state = "-"
            # what the others say about a stopped node (master,fail / slave,fail?)
            mine = [line for line in view.splitlines() if f":{port}@" in (line.split() + ["", ""])[1]]
            fields = mine[0].split() if mine else []
        fields += [""] * (9 - len(fields))
        flags = fields[2].replace("myself,", "")
        slots = " ".join(fields[8:]).strip() if "master" in flags else ""
        role = _role(flags, fields[3], port_of, pid is not None)
        rows.append(REDIS_ROW % (port, pid or "-", "running" if pid else "down", role, state, slots))
    ok = cluster.serving()
    rows.append(f"cluster ok: every slot served, every master writable ({running}/{len(cluster.ports)} nodes running)"
                if ok else f"cluster NOT ok ({running}/{len(cluster.ports)} nodes running)")
    return ok, "\n".join(rows)


def rabbitmq_status(cluster: RabbitCluster) -> tuple[bool, str]:
    """(ok, the table): per node its pid, name and membership; ok only when every
    node runs and all are clustered."""
    running, view = 0, set()
    for port in cluster.ports:
        if cluster.pid(port) is None:
            continue
        running += 1
        view = view or cluster.view(port)
    rows = [RABBIT_ROW % ("port", "pid", "state", "node", "cluster")]
    for port in cluster.ports:
        pid, name = cluster.pid(port), cluster.node_name(port)
        if ("running", name) in view:
            member = "running member"
        elif ("disk", name) in view:
            member = "member, not running"
        else:
            member = "not a member"
        rows.append(RABBIT_ROW % (port, pid or "-", "running" if pid else "down", name, member))
    n = len(cluster.ports)
    ok = running == n and cluster.clustered()
    rows.append(f"rabbitmq cluster ok: {n} nodes running and clustered ({without_passwords(cluster.url())})"
                if ok else f"rabbitmq cluster NOT ok ({running}/{n} nodes running)")
    return ok, "\n".join(rows)


MARIADB_ROW = "%-6s %-8s %-8s %-10s %-10s %-6s %s"


def mariadb_status(cluster: GaleraCluster) -> tuple[bool, str]:
    """(ok, the table): per node its pid, state, component, local state, cluster
    size and whether the front sends to it; ok only when all three are synced in
    one primary component and the front routes to one of them."""
    rows = [MARIADB_ROW % ("port", "pid", "state", "component", "local", "size", "front")]
    front = cluster.front_node() if cluster.front_pid() is not None else None
    synced = 0
    for port in cluster.ports:
        pid = cluster.pid(port)
        state = "down" if pid is None else "paused" if stopped(pid) else "running"
        wsrep = cluster.wsrep(port) if state == "running" else {}
        if wsrep.get("wsrep_cluster_status") == "Primary" and wsrep.get("wsrep_local_state") == "4" \
                and wsrep.get("wsrep_ready") == "ON" and wsrep.get("wsrep_cluster_size") == str(len(cluster.ports)):
            synced += 1
        rows.append(MARIADB_ROW % (port, pid or "-", state, wsrep.get("wsrep_cluster_status", "-"),
                                   wsrep.get("wsrep_local_state_comment", "-"), wsrep.get("wsrep_cluster_size", "-"),
                                   "<- writer" if front == port else ""))
    n = len(cluster.ports)
    ok = synced == n and front is not None
    where = f"front {cluster.front} -> {front}" if front else f"front {cluster.front} routes nowhere"
    rows.append(f"mariadb cluster ok: {n} nodes synced in one primary component, {where}" if ok
                else f"mariadb cluster NOT ok ({synced}/{n} nodes synced, {where})")
    return ok, "\n".join(rows)
