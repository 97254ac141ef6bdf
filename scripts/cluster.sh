# The local clusters behind `bash scripts/cluster`. Sourced after lib.sh, not run.
#
# Redis: 3 masters with 2 replicas each, nine redis-server processes on
# 127.0.0.1:7000-7008, each with its own directory var/cluster/redis/<port>/
# (redis.conf, nodes.conf, appendonlydir/, redis.log, redis.pid). The single Redis
# on 6379 that scripts/up and scripts/test use is never touched.
#
# RabbitMQ (issue 21): 3 nodes of the Debian package clustered on
# 127.0.0.1:5681-5683, each with its own directory var/cluster/rabbitmq/<port>/
# (rabbitmq.conf, rabbitmq-env.conf, mnesia/, log/, rabbitmq.pid) and one Erlang
# cookie of their own in var/cluster/rabbitmq/.erlang.cookie. The node on 5672
# is never touched. The rabbitmq_* functions are at the end of this file.

REDIS_CLUSTER_HOST=127.0.0.1
# SECKILL_REDIS_CLUSTER_BASE moves the nine ports (7000 by default; keep it
# within 7000-7091): a fault run can then kill masters of a cluster of its own
# while the suite uses the first. Each base has its own directory.
redis_cluster_use() {  # base: the nine ports from there, and their directory
  REDIS_CLUSTER_BASE="$1"
  REDIS_CLUSTER_PORTS=()
  local i
  for i in 0 1 2 3 4 5 6 7 8; do REDIS_CLUSTER_PORTS+=("$((REDIS_CLUSTER_BASE + i))"); done
  if [ "$REDIS_CLUSTER_BASE" = 7000 ]; then
    REDIS_CLUSTER_DIR="$PROJECT_DIR/var/cluster/redis"
  else
    REDIS_CLUSTER_DIR="$PROJECT_DIR/var/cluster/redis-$REDIS_CLUSTER_BASE"
  fi
}
redis_cluster_use "${SECKILL_REDIS_CLUSTER_BASE:-7000}"
REDIS_CLUSTER_REPLICAS=2
# A master takes writes only while at least this many replicas acknowledged within
# REDIS_CLUSTER_MAX_LAG seconds. One of two is the trade-off issue 20 asks for: a
# master cut off from both replicas stops taking reservations its successor would
# not have, yet a promoted replica still has the third node of its shard and keeps
# selling (with one replica per master it would refuse every write until the dead
# node is back).
REDIS_CLUSTER_MIN_REPLICAS=1
# Replicas acknowledge once a second and Redis measures the lag in whole seconds,
# so 1 would flap into NOREPLICAS whenever a busy 2-core machine delays one ack;
# 2 tolerates that and still stops a cut-off master within about 2-3 s, around
# the time the cluster (node timeout 2 s) promotes one of its replicas. The fence
# of issue 20 item 3 must wait past this bound.
REDIS_CLUSTER_MAX_LAG=2
REDIS_CLUSTER_NODE_TIMEOUT_MS=2000

# Every node requires a password (requirepass; masterauth for the replicas), made
# once per cluster into $REDIS_CLUSTER_DIR/password (0600, hex, so it goes into a
# URL as it is) and kept until down --wipe: any local user could otherwise write
# to the cluster's keys, and a shop's tests and benchmarks run on it. Every client
# gets it from here: redis-cli through REDISCLI_AUTH (never in argv), the app
# through redis_cluster_url, the fault matrix and the tests through that URL.
redis_cluster_password_file() { printf '%s/password' "$REDIS_CLUSTER_DIR"; }

redis_cluster_password() {  # prints the cluster's password, making it on first use
  local file; file="$(redis_cluster_password_file)"
  if [ ! -s "$file" ]; then
    mkdir -p "$REDIS_CLUSTER_DIR"
    (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$file.tmp.$$" && mv "$file.tmp.$$" "$file")
  fi
  chmod 600 "$file"
  cat "$file"
}

redis_cli() {  # port args...: one command, at most 2 s (a SIGSTOPped node accepts the
  # connection and never answers, and redis-cli has no reply timeout of its own)
  local port="$1"; shift
  REDISCLI_AUTH="$(redis_cluster_password)" timeout 2 redis-cli -h "$REDIS_CLUSTER_HOST" -p "$port" "$@" 2>/dev/null |
    tr -d '\r'
}

redis_cluster_field() {  # port field: one "field:value" line of CLUSTER INFO
  { redis_cli "$1" cluster info || true; } | sed -n "s/^$2://p"
}

redis_node_dir() { printf '%s/%s' "$REDIS_CLUSTER_DIR" "$1"; }

redis_node_pid() {  # port: prints the pid of our node on that port, fails if it is not running
  local pid
  pid="$(cat "$(redis_node_dir "$1")/redis.pid" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  # kill -9 leaves the pid file behind and the pid may be reused: trust it only
  # while that process is a redis-server on this port
  tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q "^redis-server [^ ]*:$1\b" || return 1
  printf '%s' "$pid"
}

redis_node_write_config() {  # port
  local dir password; dir="$(redis_node_dir "$1")"
  password="$(redis_cluster_password)"
  # it holds the password: the owner's only, from the first byte
  (umask 077; : >"$dir/redis.conf")
  chmod 600 "$dir/redis.conf"
  cat >"$dir/redis.conf" <<CONF
# Written by scripts/cluster on every start of this node: edit cluster.sh instead.
port $1
# loopback only, and a password (the cluster's, in ../password) for every client
# and for the replicas' link to their master
bind $REDIS_CLUSTER_HOST
protected-mode yes
requirepass $password
masterauth $password
daemonize yes
dir "$dir"
pidfile "$dir/redis.pid"
logfile "$dir/redis.log"
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout $REDIS_CLUSTER_NODE_TIMEOUT_MS
# The slots of a dead master fail alone: SKUs on the other masters keep selling
# while its replica is promoted (issue 20 item 3).
cluster-require-full-coverage no
min-replicas-to-write $REDIS_CLUSTER_MIN_REPLICAS
min-replicas-max-lag $REDIS_CLUSTER_MAX_LAG
# The append-only file is what a restarted node comes back from. Redis writes it
# before it answers, so a killed process loses nothing it acknowledged; everysec
# bounds a machine crash to about a second of writes, where "always" would put an
# fsync on every reservation and "no" leaves up to 30 s to the kernel.
appendonly yes
appendfsync everysec
# No RDB snapshots on top: each is a fork a 2-core machine pays for, and the AOF
# already has the data (replication still transfers an RDB, diskless).
save ""
# A replica that (re)joins gets its full sync at once rather than after the 5 s
# Redis waits by default for more replicas to share one transfer: the data here is
# small, and a restarted node should not leave its shard one replica short longer.
repl-diskless-sync-delay 0
CONF
}

redis_cluster_ensure_installed() {
  local missing=()
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v redis-cli >/dev/null || missing+=(redis-tools)
  if [ "${#missing[@]}" -gt 0 ]; then log "installing ${missing[*]}"; apt_install "${missing[@]}"; fi
}

redis_cluster_start_nodes() {  # starts every node that is not running; fails on a port taken by others
  local port dir pid started=0
  # every port checked before any node starts, so a conflict leaves nothing half up;
  # each node also listens on its cluster bus port, 10000 above
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    redis_node_pid "$port" >/dev/null && continue
    if port_open "$port" || port_open $((port + 10000)); then
      log "port $port or $((port + 10000)) is in use by a process this script did not start: stop it first"
      return 1
    fi
  done
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    if pid="$(redis_node_pid "$port")"; then
      # a node left SIGSTOPped (a fault run that died mid-pause) is resumed, not restarted
      if [ "$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null)" = T ]; then
        log "resuming paused node $port"; kill -CONT "$pid" || true
      fi
      continue
    fi
    dir="$(redis_node_dir "$port")"
    mkdir -p "$dir"
    redis_node_write_config "$port"
    redis-server "$dir/redis.conf" || { log "redis-server $port did not start: see $dir/redis.log"; return 1; }
    started=$((started + 1))
  done
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    wait_port "$port" "redis-server" 30 || { log "see $(redis_node_dir "$port")/redis.log"; return 1; }
  done
  [ "$started" = 0 ] || log "started $started Redis node(s)"
}

redis_cluster_form() {  # creates the cluster on fresh nodes, or joins a fresh node to a formed one
  local port assigned formed="" fresh=()
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    assigned="$(redis_cluster_field "$port" cluster_slots_assigned)"
    if [ "$assigned" = 16384 ]; then
      formed="${formed:-$port}"
    elif [ "$assigned" = 0 ] && [ "$(redis_cluster_field "$port" cluster_known_nodes)" = 1 ]; then
      fresh+=("$port")
    fi
  done
  if [ -z "$formed" ] && [ "${#fresh[@]}" = "${#REDIS_CLUSTER_PORTS[@]}" ]; then
    log "creating the cluster: 3 masters, $REDIS_CLUSTER_REPLICAS replicas each"
    local nodes=()
    for port in "${REDIS_CLUSTER_PORTS[@]}"; do nodes+=("$REDIS_CLUSTER_HOST:$port"); done
    REDISCLI_AUTH="$(redis_cluster_password)" redis-cli --cluster create "${nodes[@]}" \
      --cluster-replicas "$REDIS_CLUSTER_REPLICAS" --cluster-yes >/dev/null
  elif [ -n "$formed" ]; then
    # a node whose directory was deleted comes back empty: it joins as a replica
    # of the master with the fewest. The others still know it by its old id, which
    # (once a new id answers at its address) lingers as a "noaddr" node: forget
    # those everywhere. A replica refuses to forget its own master, so a wiped
    # master leaves such a trace behind: down --wipe is the way to start over.
    local old other
    for port in "${fresh[@]}"; do
      log "adding fresh node $port to the cluster as a replica"
      REDISCLI_AUTH="$(redis_cluster_password)" redis-cli --cluster add-node "$REDIS_CLUSTER_HOST:$port" \
        "$REDIS_CLUSTER_HOST:$formed" --cluster-slave >/dev/null
    done
    if [ "${#fresh[@]}" -gt 0 ]; then
      sleep 1  # the new ids spread by gossip first
      for old in $({ redis_cli "$formed" cluster nodes || true; } | awk '$3 ~ /noaddr/ { print $1 }'); do
        for other in "${REDIS_CLUSTER_PORTS[@]}"; do redis_cli "$other" cluster forget "$old" >/dev/null || true; done
      done
    fi
  else
    log "the nodes hold a partly formed cluster (no node has all 16384 slots assigned):" \
      "bash scripts/cluster down --wipe, then up, starts a fresh one"
    return 1
  fi
}

redis_cluster_serving() {  # every slot has a live master that takes writes, and every node that answers agrees
  # The others' cluster_state is no proof: with cluster-require-full-coverage no
  # it stays ok, and they count a dead master's slots as ok for the node timeout
  # and more (about 3 s here), so the slots are counted on the live masters themselves.
  local port line info repl ranges=""
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    redis_node_pid "$port" >/dev/null || continue
    line="$({ redis_cli "$port" cluster nodes || true; } | grep ' myself' || true)"
    [ -n "$line" ] || continue  # running but not answering (paused): serves nothing
    info="$(redis_cli "$port" cluster info || true)"
    grep -qx 'cluster_state:ok' <<<"$info" && grep -qx 'cluster_slots_ok:16384' <<<"$info" || return 1
    case "$line" in
      *master*)
        repl="$(redis_cli "$port" info replication || true)"
        [ "$(sed -n 's/^min_slaves_good_slaves://p' <<<"$repl")" -ge "$REDIS_CLUSTER_MIN_REPLICAS" ] 2>/dev/null || return 1
        ranges+=" $(cut -d' ' -f9- <<<"$line")" ;;
    esac
  done
  # distinct slots, so a resumed old master that still claims its slots hides no gap;
  # [slot->-id] entries are migrations in progress, not ownership
  [ "$(tr ' ' '\n' <<<"$ranges" | awk -F- '/^[0-9]/ { for (s = $1; s <= ($2 == "" ? $1 : $2); s++) if (!(s in seen)) { seen[s] = 1; n++ } }
    END { print n + 0 }')" = 16384 ]
}

redis_cluster_healthy() {  # serving, with every node running and every replica in sync
  local port repl
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    redis_node_pid "$port" >/dev/null || return 1
    repl="$(redis_cli "$port" info replication || true)"
    if grep -qx 'role:slave' <<<"$repl"; then grep -qx 'master_link_status:up' <<<"$repl" || return 1; fi
  done
  redis_cluster_serving
}

redis_cluster_ports_taken() {  # any of the nine ports (or their bus ports) in use by anything
  local port
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    if port_open "$port" || port_open $((port + 10000)); then return 0; fi
  done
  return 1
}

redis_cluster_url() {  # REDIS_URL of this cluster, with its password: every node a seed, so any one that
  # answers gives the layout
  local seeds=() port password
  password="$(redis_cluster_password)"
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do seeds+=("$REDIS_CLUSTER_HOST:$port"); done
  local IFS=,
  printf 'redis+cluster://:%s@%s' "$password" "${seeds[*]}"
}

redis_cluster_secure_running() {  # gives the password to running nodes that were started without one
  # A cluster started before its nodes had a password keeps running as it was;
  # the next up sets it live (masterauth everywhere first, so that no replica
  # is refused by its master), and every later start reads it from redis.conf.
  local port pids=() password
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    redis_node_pid "$port" >/dev/null || continue
    [ "$(timeout 2 redis-cli -h "$REDIS_CLUSTER_HOST" -p "$port" ping 2>/dev/null | tr -d '\r')" = PONG ] && pids+=("$port")
  done
  [ "${#pids[@]}" -gt 0 ] || return 0
  password="$(redis_cluster_password)"
  log "Redis node(s) ${pids[*]} run without the cluster's password: setting it ($(redis_cluster_password_file))"
  for port in "${pids[@]}"; do
    timeout 2 redis-cli -h "$REDIS_CLUSTER_HOST" -p "$port" config set masterauth "$password" >/dev/null
  done
  for port in "${pids[@]}"; do
    timeout 2 redis-cli -h "$REDIS_CLUSTER_HOST" -p "$port" config set requirepass "$password" >/dev/null
  done
}

redis_cluster_rebalance() {  # moves replicas until every master has REDIS_CLUSTER_REPLICAS of them
  # Kills and failovers in a row can leave 3, 2 and 1 replicas (a replica
  # migrates to a master left without one); a master with one replica then has
  # none after its next failover and refuses writes (min-replicas-to-write).
  local nodes needy donor replica moved=0
  for _ in 1 2 3 4 5 6; do
    nodes="$(redis_cli "${REDIS_CLUSTER_PORTS[0]}" cluster nodes)" || return 0
    needy="$(awk -v want="$REDIS_CLUSTER_REPLICAS" '$3 ~ /master/ && $3 !~ /fail/ && $9 != "" {m[$1]=1}
      $3 ~ /slave/ && $3 !~ /fail/ {n[$4]++}
      END {for (id in m) if (n[id] + 0 < want) {print id; exit}}' <<<"$nodes")"
    [ -n "$needy" ] || break
    donor="$(awk -v want="$REDIS_CLUSTER_REPLICAS" '$3 ~ /slave/ && $3 !~ /fail/ {n[$4]++}
      END {for (id in n) if (n[id] > want) {print id; exit}}' <<<"$nodes")"
    [ -n "$donor" ] || break
    replica="$(awk -v d="$donor" '$3 ~ /slave/ && $3 !~ /fail/ && $4 == d {split($2, a, "[:@]"); print a[2]; exit}' <<<"$nodes")"
    [ -n "$replica" ] || break
    redis_cli "$replica" cluster replicate "$needy" >/dev/null || break
    moved=$((moved + 1))
    sleep 0.5
  done
  if [ "$moved" -gt 0 ]; then log "moved $moved replica(s) so that every master has $REDIS_CLUSTER_REPLICAS"; fi
}

redis_cluster_up() {
  local deadline=$((SECONDS + 60)) balanced=""
  redis_cluster_ensure_installed
  redis_cluster_secure_running
  redis_cluster_start_nodes
  redis_cluster_form
  # cluster_state:ok comes first; a restarted node then still needs its resync
  while ((SECONDS < deadline)); do
    if redis_cluster_healthy; then
      if [ -z "$balanced" ]; then
        balanced=1
        redis_cluster_rebalance
        continue  # a moved replica resyncs from its new master
      fi
      log "Redis Cluster ok on $REDIS_CLUSTER_HOST:${REDIS_CLUSTER_PORTS[0]}-${REDIS_CLUSTER_PORTS[-1]}"; return 0
    fi
    sleep 0.1
  done
  log "the Redis Cluster is not healthy after 60 s:"
  redis_cluster_status || true
  return 1
}

redis_cluster_down() {  # [--wipe]
  local port pid pids=() i
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    if pid="$(redis_node_pid "$port")"; then
      pids+=("$pid")
    elif port_open "$port"; then
      log "port $port: not a node of $REDIS_CLUSTER_DIR (no live pid file), left running"
    fi
  done
  # every node at once: stopped one by one over more than the node timeout, the
  # survivors would fail the stopped masters over and the next up would find the
  # roles shuffled
  if [ "${#pids[@]}" -gt 0 ]; then
    kill -TERM "${pids[@]}" 2>/dev/null || true
    # a SIGSTOPped node would hold its SIGTERM until it is resumed
    kill -CONT "${pids[@]}" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
      kill -0 "${pids[@]}" 2>/dev/null || break
      sleep 0.1
    done
    for pid in "${pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then log "redis-server $pid ignored SIGTERM for 15 s: SIGKILL"; kill -KILL "$pid" || true; fi
    done
    log "stopped ${#pids[@]} Redis node(s)"
  fi
  if [ "${1:-}" = --wipe ]; then
    rm -rf "$REDIS_CLUSTER_DIR"
    log "removed $REDIS_CLUSTER_DIR: the next up forms a fresh cluster"
  fi
}

redis_cluster_status() {  # prints one line per node; exit 0 when the cluster serves every slot
  local port pid view="" line id addr flags master state slots role running_word running=0
  declare -A port_of=()
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    redis_node_pid "$port" >/dev/null || continue
    running=$((running + 1))
    if [ -z "$view" ] || [ "$(redis_cluster_field "$port" cluster_state)" = ok ]; then
      view="$(redis_cli "$port" cluster nodes || true)"
    fi
  done
  # node id -> port, from one node's view, to name whose replica a node is
  while read -r id addr _; do
    if [ -n "$id" ]; then addr="${addr%%@*}"; port_of[$id]="${addr##*:}"; fi
  done <<<"$view"
  printf '%-6s %-8s %-8s %-22s %-6s %s\n' port pid state role cluster slots
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    if pid="$(redis_node_pid "$port")"; then
      line="$({ redis_cli "$port" cluster nodes || true; } | grep ' myself' || true)"
      if [ -z "$line" ]; then
        printf '%-6s %-8s %-8s %-22s %-6s\n' "$port" "$pid" running "(not answering)" -
        continue
      fi
      state="$(redis_cluster_field "$port" cluster_state)"
    else
      pid=- state=-
      # what the others say about a stopped node (master,fail / slave,fail?)
      line="$(grep " [^ ]*:$port@" <<<"$view" || true)"
    fi
    read -r _ _ flags master _ _ _ _ slots <<<"$line"
    flags="${flags/myself,/}"
    case "$flags" in
      *master*) role=master ;;
      *slave*) role="replica of ${port_of[$master]:-?}" ;;
      *) role="${flags:--}" ;;
    esac
    [[ "$flags" == *master* ]] || slots=""
    # a stopped node: show how the others flag it (fail, or pfail while undecided)
    case "$pid,$flags" in -,*fail\?*) role="$role (pfail)" ;; -,*fail*) role="$role (fail)" ;; esac
    if [ "$pid" = - ]; then running_word=down; else running_word=running; fi
    printf '%-6s %-8s %-8s %-22s %-6s %s\n' "$port" "$pid" "$running_word" "$role" "${state:--}" "${slots:-}"
  done
  if redis_cluster_serving; then
    echo "cluster ok: every slot served, every master writable ($running/${#REDIS_CLUSTER_PORTS[@]} nodes running)"
  else
    echo "cluster NOT ok ($running/${#REDIS_CLUSTER_PORTS[@]} nodes running)"
    return 1
  fi
}

# --- RabbitMQ --------------------------------------------------------------------------
#
# Each node is started with /usr/lib/rabbitmq/bin/rabbitmq-server (the /usr/sbin
# wrapper switches to the rabbitmq user and writes one startup log for all) and
# an environment of its own: /etc/rabbitmq/rabbitmq-env.conf names the machine's
# node rabbit@localhost and /etc/rabbitmq/rabbitmq.conf pins its listener to 5672,
# so neither may apply. HOME is the cluster's directory for the servers and for
# every rabbitmqctl call alike: its .erlang.cookie is what lets them talk, and
# the machine's node (whose cookie is /var/lib/rabbitmq's) cannot be reached
# from here by mistake.

RABBITMQ_CLUSTER_HOST=127.0.0.1
RABBITMQ_BIN=/usr/lib/rabbitmq/bin
RABBITMQ_CLUSTER_USER="${SECKILL_RABBITMQ_USER:-seckill}"
RABBITMQ_CLUSTER_PASSWORD="${SECKILL_RABBITMQ_PASSWORD:-seckill}"
# Plugins enabled on every node (a plugin must be on every node of a cluster
# before it is used). None by default: the confirm partitions are routed by the
# publisher over a direct exchange (inventory.messages.partition_of), so they
# need no consistent-hash exchange.
RABBITMQ_CLUSTER_PLUGINS="${SECKILL_RABBITMQ_PLUGINS-}"

rabbitmq_cluster_use() {  # base: the three ports from there, and their directory
  RABBITMQ_CLUSTER_BASE="$1"
  RABBITMQ_CLUSTER_PORTS=("$1" "$(($1 + 1))" "$(($1 + 2))")
  if [ "$RABBITMQ_CLUSTER_BASE" = 5681 ]; then
    RABBITMQ_CLUSTER_DIR="$PROJECT_DIR/var/cluster/rabbitmq"
  else
    RABBITMQ_CLUSTER_DIR="$PROJECT_DIR/var/cluster/rabbitmq-$RABBITMQ_CLUSTER_BASE"
  fi
}
rabbitmq_cluster_use "${SECKILL_RABBITMQ_CLUSTER_BASE:-5681}"

rabbitmq_node_name() { printf 'seckill-%s@localhost' "$1"; }
rabbitmq_node_dir() { printf '%s/%s' "$RABBITMQ_CLUSTER_DIR" "$1"; }
# Erlang distribution 20000 above the AMQP port, as RabbitMQ's default would be
# (5672 -> 25672), so the three nodes and the machine's never share one.
rabbitmq_dist_port() { printf '%s' "$(($1 + 20000))"; }

rabbitmq_env() {  # port: the environment a node and the CLI calls about it run with
  local dir; dir="$(rabbitmq_node_dir "$1")"
  printf '%s\n' "HOME=$RABBITMQ_CLUSTER_DIR" \
    "RABBITMQ_CONF_ENV_FILE=$dir/rabbitmq-env.conf" \
    "RABBITMQ_NODENAME=$(rabbitmq_node_name "$1")" \
    "RABBITMQ_NODE_IP_ADDRESS=$RABBITMQ_CLUSTER_HOST" \
    "RABBITMQ_NODE_PORT=$1" \
    "RABBITMQ_DIST_PORT=$(rabbitmq_dist_port "$1")" \
    "RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf" \
    "RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config" \
    "RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins" \
    "RABBITMQ_MNESIA_BASE=$dir/mnesia" \
    "RABBITMQ_LOG_BASE=$dir/log" \
    "RABBITMQ_PID_FILE=$dir/rabbitmq.pid" \
    "ERL_EPMD_ADDRESS=127.0.0.1"
}

rabbitmq_ctl() {  # port tool args...: a CLI tool (rabbitmqctl, rabbitmq-queues ...) against that node
  local port="$1" tool="$2"; shift 2
  local vars=(); mapfile -t vars < <(rabbitmq_env "$port")
  env -u ERL_FLAGS -u RABBITMQ_ENV_LOADED "${vars[@]}" timeout 60 "$RABBITMQ_BIN/$tool" -q -n "$(rabbitmq_node_name "$port")" "$@"
}

rabbitmq_node_pid() {  # port: prints the pid of our node on that port, fails if it is not running
  local pid
  pid="$(cat "$(rabbitmq_node_dir "$1")/rabbitmq.pid" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  # kill -9 leaves the pid file behind and the pid may be reused: trust it only
  # while that process is a beam running this node (its name is in its environment)
  tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q 'beam' || return 1
  tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qx "RABBITMQ_NODENAME=$(rabbitmq_node_name "$1")" || return 1
  printf '%s' "$pid"
}

rabbitmq_node_write_config() {  # port
  local dir; dir="$(rabbitmq_node_dir "$1")"
  mkdir -p "$dir/mnesia" "$dir/log"
  # rabbitmq.conf holds the user's password: the owner's only, as the cookie is,
  # from the first byte (a file that exists keeps its mode: chmod as well)
  (umask 077; : >"$dir/rabbitmq.conf" && : >"$dir/rabbitmq-env.conf")
  chmod 600 "$dir/rabbitmq.conf" "$dir/rabbitmq-env.conf"
  cat >"$dir/rabbitmq.conf" <<CONF
# Written by scripts/cluster on every start of this node: edit cluster.sh instead.
listeners.tcp.local = $RABBITMQ_CLUSTER_HOST:$1
# The user of a fresh node; a node that joins takes the cluster's users instead
# (rabbitmq_cluster_user makes sure of it afterwards).
default_user = $RABBITMQ_CLUSTER_USER
default_pass = $RABBITMQ_CLUSTER_PASSWORD
# no administrator tag: the app needs its vhost's permissions only (as in compose)
default_user_tags.administrator = false
default_permissions.configure = .*
default_permissions.read = .*
default_permissions.write = .*
# A node cut off from the majority pauses rather than serving a split cluster;
# quorum queues follow their own majority anyway.
cluster_partition_handling = pause_minority
log.console = false
log.file.level = info
CONF
  # the same as the environment rabbitmq_env sets, for anything that reads the
  # file alone; the distribution listens on loopback only, as the machine's node
  cat >"$dir/rabbitmq-env.conf" <<CONF
# Written by scripts/cluster: this node's environment, instead of /etc/rabbitmq/rabbitmq-env.conf.
NODENAME=$(rabbitmq_node_name "$1")
NODE_IP_ADDRESS=$RABBITMQ_CLUSTER_HOST
NODE_PORT=$1
DIST_PORT=$(rabbitmq_dist_port "$1")
CONFIG_FILE=$dir/rabbitmq.conf
ADVANCED_CONFIG_FILE=$dir/advanced.config
ENABLED_PLUGINS_FILE=$dir/enabled_plugins
MNESIA_BASE=$dir/mnesia
LOG_BASE=$dir/log
PID_FILE=$dir/rabbitmq.pid
ERL_EPMD_ADDRESS=127.0.0.1
SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
CONF
  local plugins="${RABBITMQ_CLUSTER_PLUGINS// /,}"
  printf '[%s].\n' "$plugins" >"$dir/enabled_plugins"
}

rabbitmq_cluster_ensure_installed() {
  [ -x "$RABBITMQ_BIN/rabbitmq-server" ] || { log "installing rabbitmq-server"; apt_install rabbitmq-server; }
}

rabbitmq_cluster_cookie() {  # the cluster's own Erlang cookie, made once
  local cookie="$RABBITMQ_CLUSTER_DIR/.erlang.cookie"
  mkdir -p "$RABBITMQ_CLUSTER_DIR"
  if [ ! -s "$cookie" ]; then
    (umask 077; head -c 32 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 32 >"$cookie")
  fi
  chmod 400 "$cookie"
}

rabbitmq_cluster_start_nodes() {  # starts every node that is not running, all at once; fails on a port taken by others
  local port started=() vars
  for port in "${RABBITMQ_CLUSTER_PORTS[@]}"; do
    rabbitmq_node_pid "$port" >/dev/null && continue
    if port_open "$port" || port_open "$(rabbitmq_dist_port "$port")"; then
      log "port $port or $(rabbitmq_dist_port "$port") is in use by a process this script did not start: stop it first"
      return 1
    fi
  done
  rabbitmq_cluster_cookie
  for port in "${RABBITMQ_CLUSTER_PORTS[@]}"; do
    rabbitmq_node_pid "$port" >/dev/null && continue
    rabbitmq_node_write_config "$port"
    rm -f "$(rabbitmq_node_dir "$port")/rabbitmq.pid"
    mapfile -t vars < <(rabbitmq_env "$port")
    # -detached: the node outlives this script. Started together: a node that
    # was stopped with the others waits at boot for the peers it last saw.
    (cd "$(rabbitmq_node_dir "$port")" && env -u ERL_FLAGS -u RABBITMQ_ENV_LOADED "${vars[@]}" \
      setsid "$RABBITMQ_BIN/rabbitmq-server" -detached >>"$(rabbitmq_node_dir "$port")/log/startup.log" 2>&1 </dev/null)
    started+=("$port")
  done
  [ "${#started[@]}" -gt 0 ] || return 0
  log "starting RabbitMQ node(s) ${started[*]}"
  for port in "${started[@]}"; do
    wait_port "$port" "RabbitMQ node $port" 120 || { log "see $(rabbitmq_node_dir "$port")/log/"; return 1; }
  done
}

rabbitmq_cluster_view() {  # port: "running|disk" lines of that node's cluster view (one CLI call)
  rabbitmq_ctl "$1" rabbitmqctl cluster_status --formatter json 2>/dev/null | python3 -c '
import json, sys
data = json.load(sys.stdin)
for node in data.get("running_nodes", []): print("running", node)
for node in data.get("disk_nodes", []): print("disk", node)
' 2>/dev/null
}

rabbitmq_cluster_form() {  # joins every node that is not a member to the cluster of the others
  local port ref="" most=0 n views=() tmp
  tmp="$(mktemp -d)"
  for port in "${RABBITMQ_CLUSTER_PORTS[@]}"; do rabbitmq_cluster_view "$port" >"$tmp/$port" & done
  wait
  # the node whose view has the most members is the cluster; a node that sees
  # only itself (fresh, or wiped) joins it
  for port in "${RABBITMQ_CLUSTER_PORTS[@]}"; do
    n="$(grep -c '^disk ' "$tmp/$port" || true)"
    if [ "$n" -gt "$most" ]; then most="$n"; ref="$port"; fi
  done
  [ -n "$ref" ] || { rm -rf "$tmp"; log "no RabbitMQ node answers cluster_status"; return 1; }
  local joining=()
  for port in "${RABBITMQ_CLUSTER_PORTS[@]}"; do
    [ "$port" = "$ref" ] && continue
    grep -qx "disk $(rabbitmq_node_name "$ref")" "$tmp/$port" || joining+=("$port")
  done
  if [ "${#joining[@]}" -gt 0 ]; then
    log "joining RabbitMQ node(s) ${joining[*]} to the cluster of $ref"
    for port in "${joining[@]}"; do
      # a wiped node the cluster still lists as a member must be forgotten first
      if grep -qx "disk $(rabbitmq_node_name "$port")" "$tmp/$ref"; then
        rabbitmq_ctl "$port" rabbitmqctl stop_app >/dev/null
        rabbitmq_ctl "$ref" rabbitmqctl forget_cluster_node "$(rabbitmq_node_name "$port")" >/dev/null || true
      fi
    done
    for port in "${joining[@]}"; do
      { rabbitmq_ctl "$port" rabbitmqctl stop_app && rabbitmq_ctl "$port" rabbitmqctl reset; } >/dev/null &
    done
    wait
    # one at a time: each join changes the cluster's schema
    for port in "${joining[@]}"; do
      # (it reports the new node's tables on stderr as errors while it joins)
      rabbitmq_ctl "$port" rabbitmqctl join_cluster "$(rabbitmq_node_name "$ref")" >"$tmp/join" 2>&1 || {
        cat "$tmp/join" >&2; rm -rf "$tmp"
        log "node $port did not join $ref: bash scripts/cluster down --wipe, then up, starts afresh"; return 1
      }
    done
    for port in "${joining[@]}"; do rabbitmq_ctl "$port" rabbitmqctl start_app >/dev/null & done
    wait
    for port in "${joining[@]}"; do wait_port "$port" "RabbitMQ node $port" 60 || { rm -rf "$tmp"; return 1; }; done
  fi
  rm -rf "$tmp"
}

rabbitmq_cluster_clustered() {  # every node running, and the first node's view has all of them running
  local port view
  for port in "${RABBITMQ_CLUSTER_PORTS[@]}"; do rabbitmq_node_pid "$port" >/dev/null || return 1; done
  view="$(rabbitmq_cluster_view "${RABBITMQ_CLUSTER_PORTS[0]}")" || return 1
  for port in "${RABBITMQ_CLUSTER_PORTS[@]}"; do
    grep -qx "running $(rabbitmq_node_name "$port")" <<<"$view" || return 1
  done
}

rabbitmq_cluster_user() {  # the cluster's user, with every permission on "/"
  local port="${RABBITMQ_CLUSTER_PORTS[0]}"
  rabbitmq_ctl "$port" rabbitmqctl authenticate_user "$RABBITMQ_CLUSTER_USER" "$RABBITMQ_CLUSTER_PASSWORD" >/dev/null 2>&1 &&
    return 0
  log "RabbitMQ cluster: setting up user $RABBITMQ_CLUSTER_USER"
  rabbitmq_ctl "$port" rabbitmqctl add_user "$RABBITMQ_CLUSTER_USER" "$RABBITMQ_CLUSTER_PASSWORD" >/dev/null 2>&1 ||
    rabbitmq_ctl "$port" rabbitmqctl change_password "$RABBITMQ_CLUSTER_USER" "$RABBITMQ_CLUSTER_PASSWORD" >/dev/null
  rabbitmq_ctl "$port" rabbitmqctl set_user_tags "$RABBITMQ_CLUSTER_USER" >/dev/null  # no tags: not an administrator
  rabbitmq_ctl "$port" rabbitmqctl set_permissions -p / "$RABBITMQ_CLUSTER_USER" '.*' '.*' '.*' >/dev/null
}

rabbitmq_cluster_grow() {  # a replica of every quorum queue on every node
  # RabbitMQ 3.10 places a quorum queue's replicas when it is declared and never
  # again: one declared before the others joined (or while a node was being
  # replaced) stays short of replicas until grown. A no-op for queues that have them.
  local port pids=()
  for port in "${RABBITMQ_CLUSTER_PORTS[@]}"; do
    rabbitmq_ctl "$port" rabbitmq-queues grow "$(rabbitmq_node_name "$port")" all >/dev/null 2>&1 & pids+=($!)
  done
  wait "${pids[@]}" || true  # a queue that cannot grow now is grown by the next up
}

rabbitmq_cluster_url() {  # CELERY_BROKER_URL of this cluster: every node's URL, joined by ';'
  local urls=() port
  for port in "${RABBITMQ_CLUSTER_PORTS[@]}"; do
    urls+=("amqp://$RABBITMQ_CLUSTER_USER:$RABBITMQ_CLUSTER_PASSWORD@$RABBITMQ_CLUSTER_HOST:$port//")
  done
  local IFS=';'
  printf '%s' "${urls[*]}"
}

rabbitmq_cluster_ports_taken() {  # any of the three ports (or their distribution ports) in use by anything
  local port
  for port in "${RABBITMQ_CLUSTER_PORTS[@]}"; do
    if port_open "$port" || port_open "$(rabbitmq_dist_port "$port")"; then return 0; fi
  done
  return 1
}

rabbitmq_cluster_up() {
  local deadline=$((SECONDS + 120))
  rabbitmq_cluster_ensure_installed
  rabbitmq_cluster_start_nodes
  rabbitmq_cluster_form
  while ! rabbitmq_cluster_clustered; do
    if ((SECONDS >= deadline)); then
      log "the RabbitMQ cluster is not clustered after 120 s:"; rabbitmq_cluster_status || true; return 1
    fi
    sleep 0.5
  done
  local user
  rabbitmq_cluster_user & user=$!
  rabbitmq_cluster_grow
  wait "$user" || return 1
  log "RabbitMQ cluster ok on $RABBITMQ_CLUSTER_HOST:${RABBITMQ_CLUSTER_PORTS[0]}-${RABBITMQ_CLUSTER_PORTS[-1]}"
}

rabbitmq_cluster_down() {  # [--wipe]
  local port pid pids=() i
  for port in "${RABBITMQ_CLUSTER_PORTS[@]}"; do
    if pid="$(rabbitmq_node_pid "$port")"; then
      pids+=("$pid")
    elif port_open "$port"; then
      log "port $port: not a node of $RABBITMQ_CLUSTER_DIR (no live pid file), left running"
    fi
  done
  # every node at once (a beam stops cleanly on SIGTERM): stopped one by one,
  # the last to stop is the one the others wait for at their next boot
  if [ "${#pids[@]}" -gt 0 ]; then
    kill -TERM "${pids[@]}" 2>/dev/null || true
    kill -CONT "${pids[@]}" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
      kill -0 "${pids[@]}" 2>/dev/null || break
      sleep 0.1
    done
    for pid in "${pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then log "RabbitMQ node $pid ignored SIGTERM for 30 s: SIGKILL"; kill -KILL "$pid" || true; fi
    done
    log "stopped ${#pids[@]} RabbitMQ node(s)"
  fi
  if [ "${1:-}" = --wipe ]; then
    rm -rf "$RABBITMQ_CLUSTER_DIR"
    log "removed $RABBITMQ_CLUSTER_DIR: the next up forms a fresh cluster"
  fi
}

rabbitmq_cluster_status() {  # one line per node; exit 0 when every node runs and all are clustered
  local port pid view="" running=0 state member
  for port in "${RABBITMQ_CLUSTER_PORTS[@]}"; do
    rabbitmq_node_pid "$port" >/dev/null || continue
    running=$((running + 1))
    [ -n "$view" ] || view="$(rabbitmq_cluster_view "$port" || true)"
  done
  printf '%-6s %-8s %-8s %-28s %s\n' port pid state node cluster
  for port in "${RABBITMQ_CLUSTER_PORTS[@]}"; do
    if pid="$(rabbitmq_node_pid "$port")"; then state=running; else pid=- state=down; fi
    if grep -qx "running $(rabbitmq_node_name "$port")" <<<"$view"; then member="running member"
    elif grep -qx "disk $(rabbitmq_node_name "$port")" <<<"$view"; then member="member, not running"
    else member="not a member"; fi
    printf '%-6s %-8s %-8s %-28s %s\n' "$port" "$pid" "$state" "$(rabbitmq_node_name "$port")" "$member"
  done
  if [ "$running" = "${#RABBITMQ_CLUSTER_PORTS[@]}" ] && rabbitmq_cluster_clustered; then
    echo "rabbitmq cluster ok: ${#RABBITMQ_CLUSTER_PORTS[@]} nodes running and clustered ($(without_passwords "$(rabbitmq_cluster_url)"))"
  else
    echo "rabbitmq cluster NOT ok ($running/${#RABBITMQ_CLUSTER_PORTS[@]} nodes running)"
    return 1
  fi
}
