# The local clusters' shell names, for the scripts and tests that source this
# file after lib.sh (scripts/test, scripts/up, scripts/bench, testsupport). Each
# calls the one runner, benchmarks/clusters (python -m benchmarks.clusters),
# which says what they do and why; redis_cluster_use and rabbitmq_cluster_use
# pick the cluster the others act on.

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
