"""The benchmark: the real web tier (granian by default) + Celery worker +
MariaDB/Redis/RabbitMQ on loopback.

    bash scripts/bench [--quick] [--rounds N] [--phase-seconds S] [--server granian|gunicorn|uwsgi]
                       [--cluster | --cluster-url redis+cluster://HOST:PORT[,...]] [--partitions N] [--plan]
    bash scripts/bench --lua     one Redis shard's reserve.lua ceiling on one SKU (benchmarks/lua.py)

--plan prints what a run with these options would do and starts nothing.

--server picks the HTTP server of the web tier and of its floor: granian
through the project's launcher (python -m seckill_site.serve, the default, as
deployed), gunicorn (gunicorn.conf.py, the supported alternative) or uWSGI (to
compare; benchmarks/harness/processes.py says how it is set up), so the
servers are compared by measurement on our app.

The machine is shared and noisy, so every ratio is taken inside one round of
interleaved phases (baseline, floor, gunicorn floor, selling, sold out, pay)
and the rounds' ratios are reported as a median with their spread. Phases,
each at the same concurrency:

  baseline        POST /api/v1/baseline: authenticates, throttles and validates
                  like POST orders, takes nothing
  floor           a bare Django view (no DRF, no middleware, no authentication)
                  on a second server (the same program and settings): the
                  framework's floor under this server
  gunicorn floor  the same view under gunicorn 2 workers x 8 threads: a fixed
                  yardstick whatever --server is (gunicorn_floor_ratio)
  selling         POST /api/v1/orders on a stock larger than the phase can sell
  sold out        POST /api/v1/orders on a sold-out SKU
  pay             pay (80 %) and cancel (20 %) of the orders the round's sale made

The warm-up drives baseline, floor, selling and sold out briefly with every
load generator: wrk (benchmarks/wrk.py, when installed) and the asyncio client
(benchmarks/loadgen.py) in one process or one per core, and prints what each
reaches; a generator that is the limit reaches less. Every ratio compares two
phases, so one generator drives them all: the one nearest the best on every
phase. Under wrk the selling phase's Lua records the order id of every 202
(the owners come from MySQL once confirmed) and pay walks the list of pays and
cancels; every wrk phase ends with nothing in flight, so each order the server
made has a 202 the benchmark read. Each phase line names its generator and
the generator's CPU share of the machine, flagged when it is the limit. The
CPU per request is counted by pid: the servers this run started and their
descendants (the launcher's worker processes), whatever program they run; the
shared stores by program name; the generator (this process, wrk and the forked
clients, by the rusage of their reaping) on its own.

After the rounds, the CPU per click by component (web, Redis, RabbitMQ,
worker, MariaDB) of the sold-out, selling and pay phases, over each phase and
its tail (selling until its last confirm, pay until its last give), median and
spread over the rounds, the shared stores also net of their background: the
summary's cpu_ms_<component>_<phase>, the figures of a capacity plan. Redis is
this run's server(s) by port, RabbitMQ the node(s) listening on the ports of
CELERY_BROKER_URL; the machine's MariaDB, Redis and RabbitMQ serve other
clients at the same time, which their figures include (the caveat printed).

then, once: the whole sale (demand 20x the stock) through the gate and through
the naive MySQL-only path; the backlog (the worker stopped during a 20 000-unit
sale with beat sweeping, then started: drain_rate), measured with 1 confirm
partition and with --partitions N (default 3: SECKILL_CONFIRM_PARTITIONS of a
web tier of its own for the sale and of the worker; the SKUs drawn so every
partition and every master holds one, the same layout for both; drain_rate_1,
drain_rate_n; on code without partitions only the first, partitions=1); every
unit and order of every SKU checked in both stores. The last line is the
key=value summary (docs/benchmark.md).

--cluster runs the same on the local Redis Cluster (bash scripts/cluster: the
one on 7000, or on SECKILL_REDIS_CLUSTER_BASE; --cluster-url names another).
A cluster has database 0 only and is shared: the benchmark's keys live under
the prefix seckill-bench and are removed key by key at the start
(core.redis.shards.forget_everything), never by a FLUSH. Every sale's SKUs are one per
master (ids drawn until each master's slots hold one; a SKU's keys share the
hash tag {<sku id>}), its requests to them in turn: the selling phase sells
three SKUs, the sold-out phase clicks three sold-out ones, the whole sale and
the backlog split their stock over them. The summary adds redis_nodes= (the
masters) and hot_node_share= (the largest share of the reserve calls one master
served). `bash scripts/bench --cluster` also runs on the local RabbitMQ cluster
(5681-5683, or SECKILL_RABBITMQ_CLUSTER_BASE; started when it is not up):
CELERY_BROKER_URL names its three nodes, and the RabbitMQ CPU counted is all
three's, replication included. Every summary ends with broker_nodes= (the
nodes CELERY_BROKER_URL names). `--cluster` also runs the database on the local
Galera cluster (3311-3313 through its HAProxy front on 3314, or
SECKILL_MARIADB_CLUSTER_BASE; started when it is not up; `--database single`
keeps it on the single server, to compare), and after the rounds measures a
pay's commit on the single server beside the cluster in interleaved phases
([6], benchmarks/bench/dbcommit.py): commits a second, latency p50/p99 and the
mariadbd CPU per commit of each (the cluster's three nodes together). The
summary adds database= (galera:<base> or single:3306), pay_p99_ms= (the pay
phase's own p99) and the db_commit_* keys. Those are counted from their results: each 202 of the gate's sales
names its SKU, whose slot names its master. INFO commandstats counts every
EVALSHA (the token's authorize and key claim as well), of every client of the
node: printed beside, it cannot tell the reserves apart.
"""
