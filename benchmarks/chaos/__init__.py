"""The fault matrix: sales through every fault and every pair of faults in sequence,
on the real servers, each judged by every unit and order in both stores.

    bash scripts/chaos [--quick] [--only worker-kill,redis-restart] [--list] [--plan]
    bash scripts/chaos --cluster [--quick] [--cluster-base 7020] [--rabbitmq-base 5687] [--partitions 2]
    bash scripts/chaos --cluster --hosts [--quick]

--list names the faults, --plan prints the runs a plan holds; neither starts anything.

Each run sells a fresh SKU to concurrent buyers (some clicking twice with the
same Idempotency-Key) while its faults land one right after the other, lets
the system drain (worker, beat sweeps), reconciles twice, then prints one row:

  attempted  requests sent           accepted   answered 202 (distinct orders)
  confirmed  202s that are orders    failed202  202s that ended FAILED
  lost       202s with no order      duplicated keys answered with two orders
  oversold   units beyond the stock  drift      Redis minus MySQL after reconciling
  in_flight  reservations in flight when a Redis loss landed
  drain_s    from the end of the load to everything confirmed
  pause_s    seconds from the Redis loss to the first sale after it, per SKU
             (the first new order answered to a request sent after the loss)
  n503       requests answered 503 after the Redis loss (after the first
             host fault, in a run of host faults with no Redis loss)
  confirm_gap_s  seconds from each fault to the first confirm in MySQL of an
             order created after it, the longest of the run's faults that
             landed while the load was running

After a Redis loss the SKU answers 503 until its snapshot is rebuilt, then
sells again by itself. When the load left no sale after the loss (it ended
during the pause, or while the worker was down), a second wave of fresh clicks
follows until the first 202 or a sold-out answer, so the pause is measured;
its orders are judged with the rest. A run is ok only with nothing lost,
oversold, FAILED after its 202 or twice ordered for one key, and no drift,
Redis loss or not.

--cluster runs the matrix on the local Redis Cluster of `bash scripts/cluster`
(base 7000, or SECKILL_REDIS_CLUSTER_BASE / --cluster-base; started when it is
not running), under a key prefix of its own (SECKILL_REDIS_PREFIX seckill-chaos:
the cluster is shared, nothing is flushed). The single-Redis losses
(redis-restart, -flushall, -rollback) are left out; the cluster's own faults
take their place, each aimed at the master serving the sale's SKUs:

  redis-master-kill   SIGKILL, until a replica is promoted; the node is started
                      again at the end of the run as scripts/cluster up does
                      (from its append-only file: it rejoins as a replica)
  redis-master-pause  SIGSTOP for 8 s, then SIGCONT (the cluster promotes a
                      replica meanwhile; the old master comes back as one)
  redis-failover      a planned CLUSTER FAILOVER on one of its synced replicas

Each sale there has four SKUs: two on the aimed master, one on each other
master (the master aimed at turns with the runs). Two more columns: node (the
master faulted > the one serving its slots after) and paused (SKUs whose first
sale after the loss took a second or more, of the sale's). pause_s is the
longest of the sale's. After every run the cluster is healed (every node back,
every replica in sync) and every fence passed before the next.

--cluster also runs everything else on several hosts' worth of processes, as
`bash scripts/up --cluster` does: a RabbitMQ cluster of its own (three nodes
from --rabbitmq-base, SECKILL_RABBITMQ_CLUSTER_BASE, else 5687: benchmarks/clusters
starts them when not running; CELERY_BROKER_URL names its nodes), two
web instances (a process each) behind HAProxy (the config scripts/haproxy-config
writes; the load goes through the proxy), two workers (each partition of the
confirm stream: one active consumer, one standby) and beat once. The faults of
several hosts, each aimed at the confirm queue of the first SKU's partition:

  rabbitmq-node-kill     SIGKILL of the node holding that queue's leader
                         (rabbitmqctl list_queues name leader); started again
                         at the end of the run
  rabbitmq-node-restart  the node the queue's active consumer is connected to,
                         stopped cleanly (rabbitmqctl shutdown) and started again
                         at once, mid-sale
  web-host-kill          SIGKILL of one web instance's process group (the two in
                         turn); the other serves the rest, it is started again
                         at the end of the run
  worker-active-kill     SIGKILL of the worker whose consumer is active on the
                         queue (rabbitmqctl list_consumers: the tags name the
                         workers); the standby takes over, the killed one is
                         started again at the end of the run

There worker-kill and worker-down act on both workers (no consumer at all),
web-kill on every web process of both instances (their servers start new
ones); rabbitmq-restart (of the machine's one broker) is left out, its runs
take rabbitmq-node-restart. The node column also says what each host fault
hit (mq5688>5687: node 5688, the leader, killed, 5687 leads after; mq5688~:
restarted; web2; chaos1>chaos2: chaos1's worker killed, chaos2's consumer
active after). Before a second RabbitMQ node fault of a run the first node is
started again (two nodes down of three is a lost majority); after every run
every node, instance and worker is back.

--cluster also runs the database on a MariaDB Galera cluster of its own
(three nodes from --mariadb-base, else 3331, its HAProxy front on base+3:
started when not running; every process's DATABASE_URL names the front, the
fresh database is made through it), with its faults, each aimed at the node
the front writes to (`python -m benchmarks.clusters mariadb writer`); each
lands at once, the node comes back while the sale goes on:

  mariadb-node-kill     SIGKILL of the writer; the front moves to a synced
                        node; the killed one is started at the end of the run
  mariadb-node-pause    SIGSTOP of the writer for 8 s, then SIGCONT
  mariadb-node-restart  the writer stopped cleanly (SIGTERM) and started again
  mariadb-crash-all     SIGKILL of all three together, then all started: the
                        cluster forms again (scripts/cluster up)

each alone and before redis-master-kill and rabbitmq-node-kill (--quick: six
of those pairs). Payers pay (four in five) or cancel the sale's confirmed
orders through the API while it runs (four threads, about 20 a second; a 503
sent again later); three more columns: pays (answered 200), pay503 (answered
503) and pay_pause_s (from a fault to the first pay or cancel answered 200 sent
after it, the longest of the run's faults). The node column: db3331>3332 (the
writer killed, the front on 3332 after), db3331~ (paused), db3331^
(restarted), db* (all three). After every run the cluster is whole (three
nodes Synced, the front routing) before the next. The summary adds database=
(galera:<base> or single), pay503=, pay_pause_s_max= and pay_pause_s_median=.

--partitions N sets SECKILL_CONFIRM_PARTITIONS of every process (1 by default).

--hosts (with --cluster) runs it on the test bed of hosts (benchmarks/hosts:
network namespaces on a bridge; brought up when it is not): the bed's Redis
Cluster, RabbitMQ nodes and MariaDB, web1 and web2 behind HAProxy, worker1 and
worker2, beat in the root namespace; four SKUs of 250 units. Its faults are
the network's, cuts between hosts (nftables in their namespaces), each healed
before it returns:

  redis-master-isolate   the aimed master cut from its replicas, web2 and the
                         workers (web1 keeps it) until a replica took over, 5 s more
  redis-replica-lag      its replica links cut for 1.5 s, then the master killed
  rabbitmq-node-isolate  the confirm queue leader's host cut from the other
                         RabbitMQ hosts for 20 s
  worker-broker-cut      the active consumer's worker host cut from every
                         RabbitMQ host until the standby is active
  web-redis-cut          web1 cut from every Redis node for 8 s
  host-isolate           the aimed master's store host cut from everything

each alone and (full plan) before each of redis-master-kill, worker-active-kill,
web-host-kill, rabbitmq-node-kill and web-kill; --quick: each alone and three
pairs. There pause_s is the longest silence (no new order) after the cut, and
other_pause_s the same on the SKUs of the other masters.

The last line is a key=value summary ending in verdict=ok|FAIL (with
broker=single:5672|cluster:<base>, partitions= and the confirm gap's median and
max over the runs, confirm_gap_s_median= / confirm_gap_s_max=). It acts on the
machine's own Redis, RabbitMQ and MariaDB (and, with --cluster, on the nodes of
that cluster): run it alone.
"""
