"""The local clusters: a Redis Cluster (redis_cluster), a RabbitMQ cluster
(rabbitmq_cluster) and a MariaDB Galera cluster (mariadb_cluster) on this
machine, apart from the single servers scripts/up uses, started, healed,
stopped and shown by the one runner that `bash scripts/cluster`,
scripts/cluster.sh (the shell names scripts/test, scripts/up, scripts/bench and
the tests source), the fault matrix and the tests all call.

Standard library only, so a script runs it with the system's python3 before
any virtualenv exists: `python -m benchmarks.clusters --help`."""
from benchmarks.clusters.mariadb_cluster import GaleraCluster
from benchmarks.clusters.nodes import ClusterError
from benchmarks.clusters.rabbitmq_cluster import RabbitCluster
from benchmarks.clusters.redis_cluster import RedisCluster

__all__ = ["ClusterError", "GaleraCluster", "RabbitCluster", "RedisCluster"]
