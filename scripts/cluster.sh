# The local clusters' shell names, for the scripts and tests that source this
# file after lib.sh (scripts/test, scripts/up, scripts/bench, testsupport). Each
# calls the one runner, benchmarks/clusters (python -m benchmarks.clusters),
# which says what they do and why; redis_cluster_use, rabbitmq_cluster_use and
# mariadb_cluster_use pick the cluster the others act on.

# The virtualenv's Python when there is one, else the system's: the runner
# needs nothing beyond the standard library, and scripts/cluster runs before
# any virtualenv exists.
clusters_py() {
  local python=python3
  [ -x "$PY" ] && python="$PY"  # lib.sh's, sourced first
  PYTHONPATH="$PROJECT_DIR${PYTHONPATH:+:$PYTHONPATH}" "$python" -m benchmarks.clusters "$@"
}

REDIS_CLUSTER_HOST=127.0.0.1
redis_cluster_use() {  # base: the nine ports from there (SECKILL_REDIS_CLUSTER_BASE, 7000 by default)
  REDIS_CLUSTER_BASE="$1"
  REDIS_CLUSTER_PORTS=()
  local i
  for i in 0 1 2 3 4 5 6 7 8; do REDIS_CLUSTER_PORTS+=("$(($1 + i))"); done
}
redis_cluster_use "${SECKILL_REDIS_CLUSTER_BASE:-7000}"
redis_cluster() { clusters_py redis --base "$REDIS_CLUSTER_BASE" "$@"; }
redis_cluster_up() { redis_cluster up; }
redis_cluster_down() { redis_cluster down "$@"; }  # [--wipe]
redis_cluster_status() { redis_cluster status; }
redis_cluster_healthy() { redis_cluster healthy; }
redis_cluster_url() { redis_cluster url; }
redis_cluster_ports_taken() { redis_cluster ports-taken; }
redis_node_pid() { redis_cluster pid "$1"; }

RABBITMQ_CLUSTER_HOST=127.0.0.1
rabbitmq_cluster_use() {  # base: the three ports from there (SECKILL_RABBITMQ_CLUSTER_BASE, 5681 by default)
  RABBITMQ_CLUSTER_BASE="$1"
  RABBITMQ_CLUSTER_PORTS=("$1" "$(($1 + 1))" "$(($1 + 2))")
}
rabbitmq_cluster_use "${SECKILL_RABBITMQ_CLUSTER_BASE:-5681}"
rabbitmq_cluster() { clusters_py rabbitmq --base "$RABBITMQ_CLUSTER_BASE" "$@"; }
rabbitmq_cluster_up() { rabbitmq_cluster up; }
rabbitmq_cluster_down() { rabbitmq_cluster down "$@"; }  # [--wipe]
rabbitmq_cluster_status() { rabbitmq_cluster status; }
rabbitmq_cluster_url() { rabbitmq_cluster url; }
rabbitmq_cluster_ports_taken() { rabbitmq_cluster ports-taken; }
rabbitmq_node_pid() { rabbitmq_cluster pid "$1"; }
rabbitmq_ctl() { rabbitmq_cluster ctl "$@"; }  # port tool args...: a CLI tool against that node

MARIADB_CLUSTER_HOST=127.0.0.1
mariadb_cluster_use() {  # base: the three nodes from there and the front at base+3 (SECKILL_MARIADB_CLUSTER_BASE, 3311)
  MARIADB_CLUSTER_BASE="$1"
  MARIADB_CLUSTER_PORTS=("$1" "$(($1 + 1))" "$(($1 + 2))")
  MARIADB_CLUSTER_FRONT="$(($1 + 3))"
}
mariadb_cluster_use "${SECKILL_MARIADB_CLUSTER_BASE:-3311}"
mariadb_cluster() { clusters_py mariadb --base "$MARIADB_CLUSTER_BASE" "$@"; }
mariadb_cluster_up() { mariadb_cluster up; }
mariadb_cluster_down() { mariadb_cluster down "$@"; }  # [--wipe]
mariadb_cluster_status() { mariadb_cluster status; }
mariadb_cluster_url() { mariadb_cluster url "$@"; }  # [database]: DATABASE_URL through the front
mariadb_cluster_writer() { mariadb_cluster writer; }  # the node the front sends to now
mariadb_cluster_ports_taken() { mariadb_cluster ports-taken; }
mariadb_node_pid() { mariadb_cluster pid "$1"; }
mariadb_node() { mariadb_cluster node "$@"; }  # kill|stop|cont|term|start port
