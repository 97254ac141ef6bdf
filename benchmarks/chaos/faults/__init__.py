"""Every fault of the matrix by its name: those of one host (one_host), the
Redis Cluster's (redis_cluster), those of several hosts (hosts), a lost data
directory restored from the backups (restore), the Galera cluster's nodes
(galera) and the network's, on the test
bed of hosts (network). Each takes
the run's Context, lands mid-sale, and returns once it is over."""
from __future__ import annotations

from collections.abc import Callable

from benchmarks.chaos.context import Context
from benchmarks.chaos.faults import galera, hosts, network, one_host, redis_cluster, restore

FAULTS: dict[str, Callable[[Context], None]] = {
    "worker-kill": one_host.worker_kill,
    "rabbitmq-restart": one_host.rabbitmq_restart,
    "redis-restart": one_host.redis_restart,
    "redis-flushall": one_host.redis_flushall,
    "redis-rollback": one_host.redis_rollback,
    "mariadb-restart": one_host.mariadb_restart,
    "web-kill": one_host.web_kill,
    "worker-down": one_host.worker_down,
    "redis-master-kill": redis_cluster.redis_master_kill,
    "redis-master-pause": redis_cluster.redis_master_pause,
    "redis-failover": redis_cluster.redis_failover,
    "rabbitmq-node-kill": hosts.rabbitmq_node_kill,
    "rabbitmq-node-restart": hosts.rabbitmq_node_restart,
    "web-host-kill": hosts.web_host_kill,
    "worker-active-kill": hosts.worker_active_kill,
    "mariadb-restore": restore.mariadb_restore,
    "redis-master-isolate": network.redis_master_isolate,
    "redis-replica-lag": network.redis_replica_lag,
    "rabbitmq-node-isolate": network.rabbitmq_node_isolate,
    "worker-broker-cut": network.worker_broker_cut,
    "web-redis-cut": network.web_redis_cut,
    "host-isolate": network.host_isolate,
    "mariadb-node-kill": galera.mariadb_node_kill,
    "mariadb-node-pause": galera.mariadb_node_pause,
    "mariadb-node-restart": galera.mariadb_node_restart,
    "mariadb-crash-all": galera.mariadb_crash_all,
}
