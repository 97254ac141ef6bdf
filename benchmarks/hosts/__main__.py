"""bash scripts/cluster up --hosts | down --hosts [--wipe] | status --hosts, and
the bed's single commands (python -m benchmarks.hosts ...)."""
from __future__ import annotations

import shlex
import sys

from benchmarks.clusters.nodes import ClusterError, log

USAGE = """\
usage: bash scripts/cluster up --hosts | down --hosts [--wipe] | status --hosts
       python -m benchmarks.hosts up | down [--wipe] | status | env | cut A B | isolate A | heal [A B] | heal-all

The test bed: network namespaces sk-<host> on the bridge skbr0 (10.77.0.1/24)
in the root namespace, a veth pair each, and the stores on them:
  store1-3  10.77.0.11-13  Redis Cluster, 3 nodes each on 7000-7002 (one master,
                           two replicas of other shards: no shard on one host)
  mq1-3     10.77.0.21-23  RabbitMQ rabbit@<address> on 5672 (pause_minority)
  db1       10.77.0.31     MariaDB on 3306 (datadir var/hosts/db1/)
  web1-2    10.77.0.41-42  for the web tier (started by the fault matrix and tests)
  worker1-2 10.77.0.51-52  for the Celery workers

  up        makes what is missing (ip, nft, the servers installed where missing),
            starts the stores and waits until Redis is healthy and RabbitMQ clustered
  down      kills every process in the sk-* namespaces, deletes the namespaces
            (their nft tables go with them), the veths and the bridge; --wipe
            also deletes var/hosts/ (the next up forms fresh clusters)
  status    hosts, their addresses, the nodes on each and every cut; exit 0 when ok
  env       the shell exports that point a process at the bed's stores
  cut A B   traffic between hosts A and B dropped (comma lists: web1 store1,store2,store3)
  isolate A host A cut from every address of the bed, the root namespace's included
  heal A B  that cut deleted; heal-all: every cut
"""


def _hosts(text: str):
    from benchmarks.hosts import bed

    return [bed.host(name) for name in text.split(",")]


def main(argv: list[str]) -> int:
    from benchmarks.hosts import bed, cuts

    argv = [a for a in argv if a != "--hosts"]
    try:
        match argv:
            case ["up"]:
                bed.up()
            case ["down"] | ["down", "--wipe"]:
                removed = bed.down(wipe=argv[1:] == ["--wipe"])
                log(f"test bed down: removed {len(removed)} namespace(s)/link(s)")
            case ["status"]:
                ok, text = bed.status()
                print(text)
                return 0 if ok else 1
            case ["can-make"]:
                from benchmarks.hosts import net

                why = net.can_make()
                if why:
                    print(why, file=sys.stderr)
                return 1 if why else 0
            case ["env"]:
                for k, v in bed.env().items():
                    print(f"export {k}={shlex.quote(v)}")
            case ["cut", a, b]:
                print(cuts.cut(_hosts(a), _hosts(b)).apply())
            case ["isolate", a]:
                print(cuts.isolate(bed.host(a)).apply())
            case ["heal", a, b]:
                c = cuts.cut(_hosts(a), _hosts(b))
                c.dropped = [(x, y.ip) for x in c.left for y in c.right] + [(y, x.ip) for x in c.left for y in c.right]
                c.heal()
            case ["heal-all"]:
                cuts.heal_all()
            case ["-h"] | ["--help"]:
                print(USAGE, end="")
            case _:
                sys.stderr.write(USAGE)
                return 2
    except (ClusterError, KeyError) as exc:
        log(f"test bed: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
