"""On a Redis Cluster: the reserve calls each master served, and each node's
CPU per selling click (hot_node_share)."""
from __future__ import annotations

from benchmarks.bench.phase import Phase
from benchmarks.harness import say, stores


def node_shares(sale_skus: list[tuple[str, int, set[str]]], selling: set[str], masters: list[str],
                evalsha0: dict[str, int], selling_rows: list[Phase]) -> float:
    """Print, per master, the reserve calls it served and their share; return
    the largest share (hot_node_share). A reserve call is counted from its
    result: each 202 of the gate's sales names its SKU, and the SKU's hash tag
    names the master serving it (now, checked against the run's start).
    INFO commandstats is printed beside, for what it is: EVALSHA of every
    script (the token's authorize and key claim too) and of every client of
    that node, so it cannot tell the reserves apart. Then each node's CPU per
    selling click (the masters', and their replicas' together)."""
    reserves = dict.fromkeys(masters, 0)
    in_selling = dict.fromkeys(masters, 0)
    skus = dict.fromkeys(masters, 0)
    for sku_id, _, accepted in sale_skus:
        node = stores.master_of(sku_id)
        if node not in reserves:
            say(f"    !! {sku_id} is on {node} now, no master at the start: a failover during the run")
            reserves[node] = in_selling[node] = skus[node] = 0
        reserves[node] += len(accepted)
        skus[node] += 1
        if sku_id in selling:
            in_selling[node] += len(accepted)
    total, sold = max(1, sum(reserves.values())), max(1, sum(in_selling.values()))
    evalsha = stores.evalsha_calls()
    say(f"    {'master':<18} {'SKUs':>5} {'reserves (202s)':>16} {'share':>6}   {'selling phases':>14} "
        f"{'share':>6}   EVALSHA, every script and client")
    for node in reserves:
        say(f"    {node:<18} {skus[node]:>5} {reserves[node]:>16} {reserves[node] / total:>6.1%}   "
            f"{in_selling[node]:>14} {in_selling[node] / sold:>6.1%}   "
            f"{evalsha.get(node, 0) - evalsha0.get(node, 0)}")
    say("    (a reserve call counted from its result: every 202 of the gate's sales, by the master of its SKU's "
        "slot; sold-out clicks are not counted, the web's sold-out memo answers most of them without Redis)")
    clicks = max(1, sum(p.requests for p in selling_rows))
    secs = max(1e-9, sum(p.seconds for p in selling_rows))
    per_node: dict[str, float] = {}
    for p in selling_rows:
        for k, v in p.cpu_s.items():
            if k.startswith("redis:"):
                per_node[k.split(":", 1)[1]] = per_node.get(k.split(":", 1)[1], 0.0) + v
    ports = {m.rpartition(":")[2] for m in masters}
    replicas = {port: v for port, v in per_node.items() if port not in ports}
    say("    Redis CPU in the selling phases, ms per click (share of one core): "
        + ", ".join(f"master {m} {1000 * per_node.get(m.rpartition(':')[2], 0.0) / clicks:.3f} "
                    f"({per_node.get(m.rpartition(':')[2], 0.0) / secs:.0%})" for m in masters)
        + f"; {len(replicas)} replicas {1000 * sum(replicas.values()) / clicks:.3f} "
          f"({sum(replicas.values()) / secs:.0%} together)")
    return max(reserves.values()) / total
