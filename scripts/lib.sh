# Shared set-up for scripts/up and scripts/test. Sourced, not run.
# Installs (Debian packages, as root) and starts MariaDB, Redis and RabbitMQ when
# they are missing or stopped, then builds the virtualenv from requirements.txt (what
# the image runs) and requirements-dev.txt (tests, lint, benchmark tools). HAProxy (ensure_haproxy) is installed only where
# asked for, and started by whoever needs it, with a config of its own.
set -euo pipefail

PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SECKILL_VENV:-$PROJECT_DIR/.venv}"
PY="$VENV/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '[seckill] %s\n' "$*" >&2; }

without_passwords() {  # text: every scheme://user:password@ in it as scheme://user:***@ (for logs)
  sed -E 's#([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@;, ]*):[^@/;, ]*@#\1:***@#g' <<<"$1"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && exec 3>&- 3<&-; }

wait_port() {  # port name seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do port_open "$1" && return 0; sleep 0.1; done
  log "$2 did not open port $1 within $3 s"; return 1
}

APT_UPDATED=0
apt_install() {
  if [ "$(id -u)" != 0 ]; then log "need root to install: $*"; return 1; fi
  if [ "$APT_UPDATED" = 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get update -qq; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_build_deps() {
  local missing=()
  command -v pkg-config >/dev/null || missing+=(pkg-config)
  pkg-config --exists mariadb 2>/dev/null || pkg-config --exists mysqlclient 2>/dev/null || missing+=(libmariadb-dev)
  command -v gcc >/dev/null || missing+=(gcc)
  python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
  if [ "${#missing[@]}" -gt 0 ]; then log "installing build dependencies: ${missing[*]}"; apt_install "${missing[@]}" python3-dev; fi
}

# Written when ensure_mariadb installs the server: only that server's accounts are
# this script's to change.
MARIADB_INSTALLED_MARKER="${SECKILL_MARIADB_MARKER:-/var/lib/seckill/mariadb-installed-by-scripts}"

mariadb_url() {  # args...: the mariadb client as DATABASE_URL's user (root with no password on
  # 127.0.0.1:3306 when it is unset, the local defaults); the password through MYSQL_PWD, not argv
  local parts=()
  mapfile -t parts < <(python3 -c '
import sys, urllib.parse as u
url = u.urlsplit(sys.argv[1])
print(u.unquote(url.username or "root")); print(url.hostname or "127.0.0.1"); print(url.port or 3306)
print(u.unquote(url.password or ""))' "${DATABASE_URL:-mysql://root:@127.0.0.1:3306/}")
  MYSQL_PWD="${parts[3]}" mariadb "-u${parts[0]}" "-h${parts[1]}" "-P${parts[2]}" "$@"
}

ensure_mariadb() {
  if ! port_open 3306; then
    if ! command -v mariadbd >/dev/null && ! command -v mysqld >/dev/null; then
      log "installing MariaDB"; apt_install mariadb-server mariadb-client
      mkdir -p "$(dirname "$MARIADB_INSTALLED_MARKER")" && date -u >"$MARIADB_INSTALLED_MARKER"
    fi
    ensure_mariadb_durable
    log "starting MariaDB"
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
    # the server of its pid file only: any mariadbd counts for --exec alone, a node of
    # the local database cluster (bash scripts/cluster) too, which is no reason to stay down
    start-stop-daemon --start --oknodo --background --pidfile /run/mysqld/mysqld.pid \
      --exec "$(command -v mariadbd || command -v mysqld)" -- --user=mysql --bind-address=127.0.0.1
    wait_port 3306 MariaDB 60
  fi
  mariadb_url -e "SELECT 1" >/dev/null 2>&1 && return 0
  if [ -n "${DATABASE_URL:-}" ]; then
    log "MariaDB refuses the user of DATABASE_URL ($(without_passwords "$DATABASE_URL")): check its user and password"
    return 1
  fi
  if [ -f "$MARIADB_INSTALLED_MARKER" ]; then
    # root over TCP with an empty password, as the local defaults expect
    log "MariaDB refuses root over TCP without a password; this script installed it ($MARIADB_INSTALLED_MARKER):" \
      "switching root@localhost to an empty password, as the local defaults expect"
    mariadb -uroot -e \
      "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD(''); FLUSH PRIVILEGES;"
    return 0
  fi
  log "MariaDB on 127.0.0.1:3306 refuses root without a password, and this script did not install it, so its" \
    "accounts are left as they are. Set DATABASE_URL=mysql://USER:PASSWORD@127.0.0.1:3306/seckill (a user that" \
    "may create databases: the tests make test_<name>) and run again."
  return 1
}

MARIADB_DURABLE_CNF=/etc/mysql/mariadb.conf.d/60-seckill-durable.cnf
MARIADB_BINLOG_DIR="${SECKILL_BINLOG_DIR:-/var/lib/mysql-binlog}"

ensure_mariadb_durable() {  # the binary log and durable commits (deploy/mariadb/60-seckill-durable.cnf), read
  # when the server next starts: a running server is never restarted for it (scripts/backup says so)
  [ -d "$(dirname "$MARIADB_DURABLE_CNF")" ] || return 0
  local want="$PROJECT_DIR/deploy/mariadb/60-seckill-durable.cnf"
  if [ "$MARIADB_BINLOG_DIR" != /var/lib/mysql-binlog ]; then
    want="$(mktemp)"; sed "s#/var/lib/mysql-binlog#$MARIADB_BINLOG_DIR#" \
      "$PROJECT_DIR/deploy/mariadb/60-seckill-durable.cnf" >"$want"
  fi
  mkdir -p "$MARIADB_BINLOG_DIR" && chown mysql:mysql "$MARIADB_BINLOG_DIR" 2>/dev/null || true
  if ! cmp -s "$want" "$MARIADB_DURABLE_CNF"; then
    log "installing $MARIADB_DURABLE_CNF (binary log in $MARIADB_BINLOG_DIR, sync_binlog=1)"
    cp "$want" "$MARIADB_DURABLE_CNF"
  fi
}

ensure_mariadb_backup() {  # mariadb-backup, of the server's own version (Debian's package of the same source)
  command -v mariadb-backup >/dev/null || command -v mariabackup >/dev/null ||
    { log "installing mariadb-backup"; apt_install mariadb-backup; }
}

ensure_redis() {
  if ! port_open 6379; then
    command -v redis-server >/dev/null || { log "installing Redis"; apt_install redis-server; }
    log "starting Redis"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/seckill.log
    wait_port 6379 Redis 30
  fi
}

ensure_rabbitmq() {
  if ! port_open 5672; then
    command -v rabbitmq-server >/dev/null || { log "installing RabbitMQ"; apt_install rabbitmq-server; }
    log "starting RabbitMQ"
    rabbitmq-server -detached || true
    wait_port 5672 RabbitMQ 120
  fi
}

ensure_browser() {  # headless Chromium and its driver, for the browser tests
  if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    log "installing Chromium and ChromeDriver"; apt_install chromium chromium-driver
  fi
}

ensure_wrk() {  # the benchmark's load generator (it falls back to its Python client without it)
  command -v wrk >/dev/null || { log "installing wrk"; apt_install wrk || log "no wrk: the benchmark uses its asyncio client"; }
}

ensure_haproxy() {  # the proxy in front of the web instances (scripts/up --cluster, the proxy tests)
  command -v haproxy >/dev/null || { log "installing HAProxy"; apt_install haproxy; }
}

ensure_netns_tools() {  # the multi-host test bed (scripts/cluster --hosts): ip netns, bridges, nftables cuts
  command -v ip >/dev/null || { log "installing iproute2"; apt_install iproute2; }
  command -v nft >/dev/null || { log "installing nftables"; apt_install nftables; }
}

haproxy_config() {  # out listen source web...: a HAProxy config from deploy/haproxy.cfg.in, checked
  local out="$1" listen="$2" source="$3"
  shift 3
  SECKILL_PROXY_LISTEN="$listen" SECKILL_PROXY_SOURCE="$source" SECKILL_PROXY_WEBS="$*" \
    sh "$PROJECT_DIR/scripts/haproxy-config" "$PROJECT_DIR/deploy/haproxy.cfg.in" "$out"
  haproxy -q -c -f "$out" || { log "HAProxy refused $out"; return 1; }
}

ensure_galera() {  # the local database cluster's packages (bash scripts/cluster, the test leg, scripts/up --cluster)
  local missing=()
  command -v mariadbd >/dev/null || missing+=(mariadb-server mariadb-client)
  [ -e /usr/lib/galera/libgalera_smm.so ] || missing+=(galera-4)
  command -v mariabackup >/dev/null || missing+=(mariadb-backup)  # the full copy (SST) a joiner may need
  command -v socat >/dev/null || missing+=(socat)  # mariabackup's SST streams through it
  command -v haproxy >/dev/null || missing+=(haproxy)  # the front
  if [ "${#missing[@]}" -gt 0 ]; then log "installing ${missing[*]}"; apt_install "${missing[@]}"; fi
}

ensure_services() {
  ensure_mariadb
  ensure_redis
  ensure_rabbitmq
}

requirements_stamp() {  # the pins of both files, sorted: a comment, or a pin moved between them, installs nothing
  cat "$PROJECT_DIR/requirements.txt" "$PROJECT_DIR/requirements-dev.txt" | sed -e 's/#.*//' -e 's/[[:space:]]//g' |
    grep -v '^$' | LC_ALL=C sort | sha256sum | cut -d' ' -f1
}

ensure_venv() {
  ensure_build_deps
  local stamp="$VENV/.requirements.sha"
  local want
  # one stamp for both files (the runtime's and the tests' and tools'): a change of a pin installs again
  want="$(requirements_stamp)"
  if [ ! -x "$PY" ]; then log "creating virtualenv $VENV"; python3 -m venv "$VENV"; fi
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "installing Python requirements"
    "$VENV/bin/pip" install -q --upgrade pip >/dev/null
    "$VENV/bin/pip" install -q -r "$PROJECT_DIR/requirements.txt" -r "$PROJECT_DIR/requirements-dev.txt"
    echo "$want" > "$stamp"
  fi
}

ensure_messages() {
  # The translation catalogues (locale/*/LC_MESSAGES/django.po) compiled to .mo;
  # the compiled files are committed too, so this only matters after an edit.
  [ -d "$PROJECT_DIR/locale" ] || return 0
  command -v msgfmt >/dev/null || { log "installing gettext"; apt_install gettext; }
  (cd "$PROJECT_DIR" && DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-seckill_site.settings.local}" \
    "$PY" manage.py compilemessages -v 0 --ignore=.venv --ignore=var >/dev/null)
}

ensure_database() {  # name
  mariadb_url -e "CREATE DATABASE IF NOT EXISTS \`$1\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
}
