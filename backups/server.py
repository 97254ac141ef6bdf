"""The MariaDB servers a backup reads and a restore starts: the client of a
running one (its address from DATABASE_URL), and a server on a data directory
of this package's own (the restore's, the drill's), with the durable settings
a restore depends on."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# The settings a server this package starts runs with, and the ones
# deploy/mariadb/60-seckill-durable.cnf gives the machine's server: a commit is
# on disk in InnoDB's redo log and in the binary log before the client hears
# of it, and the binary log holds rows (a replay inserts what was inserted,
# whatever the clock or a NOW() says at replay time).
DURABLE = {
    "innodb_flush_log_at_trx_commit": "1",
    "sync_binlog": "1",
    "binlog_format": "ROW",
    "server_id": "1",
}
BINLOG_BASENAME = "mariadb-bin"
# The single server's own files, as scripts/lib.sh starts it (ensure_mariadb).
SYSTEM_PORT, SYSTEM_PID_FILE, SYSTEM_SOCKET = 3306, Path("/run/mysqld/mysqld.pid"), Path("/run/mysqld/mysqld.sock")


class ServerError(RuntimeError):
    """A server did not start or stop, or a client step failed (its output attached)."""


@dataclass(frozen=True)
class Target:
    """A running server, as a client reaches it."""

    host: str = "127.0.0.1"
    port: int = SYSTEM_PORT
    user: str = "root"
    password: str = ""
    database: str = ""
    socket: str = ""  # a Unix socket instead of host and port (root by the OS user: unix_socket auth)

    @classmethod
    def from_url(cls, url: str) -> Target:
        """mysql://user:password@host:port/database (DATABASE_URL)."""
        u = urllib.parse.urlsplit(url)
        return cls(host=u.hostname or "127.0.0.1", port=u.port or SYSTEM_PORT,
                   user=urllib.parse.unquote(u.username or "root"), password=urllib.parse.unquote(u.password or ""),
                   database=u.path.lstrip("/"))

    def url(self, *, port: int | None = None) -> str:
        auth = urllib.parse.quote(self.user) + (":" + urllib.parse.quote(self.password) if self.password else ":")
        return f"mysql://{auth}@{self.host}:{port or self.port}/{self.database}"

    def on_port(self, port: int) -> Target:
        return Target(self.host, port, self.user, self.password, self.database)

    def on_socket(self, path: Path) -> Target:
        return Target(self.host, self.port, "root", "", self.database, str(path))

    @contextlib.contextmanager
    def options_file(self) -> Iterator[str]:
        """A 0600 option file with the address and the password, for the
        MariaDB tools (`--defaults-extra-file`): never a password in argv."""
        fd, path = tempfile.mkstemp(prefix="seckill-client-", suffix=".cnf")
        try:
            where = f"socket={self.socket}\nprotocol=SOCKET" if self.socket else \
                f"host={self.host}\nport={self.port}\nprotocol=TCP"
            with os.fdopen(fd, "w") as fh:
                for group in ("client", "mariadb-backup"):
                    fh.write(f"[{group}]\n{where}\nuser={self.user}\npassword={self.password}\n")
            yield path
        finally:
            os.unlink(path)

    def query(self, sql: str) -> list[list[str]]:
        """Rows of `sql` as text (the mariadb client, batch mode)."""
        with self.options_file() as opts:
            out = run([client_tool("mariadb"), f"--defaults-extra-file={opts}", "-N", "-B", "-e", sql])
        return [line.split("\t") for line in out.splitlines() if line]

    def alive(self) -> bool:
        try:
            self.query("SELECT 1")
            return True
        except ServerError:
            return False


def client_tool(name: str) -> str:
    """A MariaDB tool by its name, or its older alias (mariadb-backup: mariabackup)."""
    aliases = {"mariadb-backup": ("mariadb-backup", "mariabackup"), "mariadb": ("mariadb", "mysql"),
               "mariadb-binlog": ("mariadb-binlog", "mysqlbinlog"), "mariadbd": ("mariadbd", "mysqld"),
               "mariadb-install-db": ("mariadb-install-db", "mysql_install_db")}
    for candidate in aliases.get(name, (name,)):
        found = shutil.which(candidate) or shutil.which(candidate, path="/usr/sbin:/usr/bin")
        if found:
            return found
    raise ServerError(f"{name} is not installed (bash scripts/backup installs the Debian package mariadb-backup)")


def run(args: list[str], **kw) -> str:
    """Run a tool; its stdout, or ServerError with the tail of what it said."""
    done = subprocess.run(args, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise ServerError(f"{Path(args[0]).name} failed ({done.returncode}): {(done.stderr or done.stdout)[-2000:]}")
    return done.stdout


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def free_port_in(ports: range) -> int:
    """The first port of `ports` nobody listens on."""
    for port in ports:
        if port_free(port):
            return port
    raise ServerError(f"every port of {ports.start}-{ports.stop - 1} is taken")


@dataclass
class LocalServer:
    """A mariadbd on `datadir`, listening on 127.0.0.1:`port` only, its binary
    log in `binlog_dir` (another disk than the data's, in production), its
    socket, pid file and error log in `run_dir`. Not the machine's server
    unless `port` is 3306, which then uses its pid file, as scripts/lib.sh does."""

    datadir: Path
    port: int
    binlog_dir: Path
    run_dir: Path
    user: str = "mysql"
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def pid_file(self) -> Path:
        return SYSTEM_PID_FILE if self.port == SYSTEM_PORT else self.run_dir / f"mariadbd-{self.port}.pid"

    @property
    def socket(self) -> Path:
        return SYSTEM_SOCKET if self.port == SYSTEM_PORT else self.run_dir / f"mariadbd-{self.port}.sock"

    @property
    def error_log(self) -> Path:
        return self.run_dir / f"mariadbd-{self.port}.err"

    def target(self, database: str = "") -> Target:
        return Target(port=self.port, database=database)

    def _own(self, *paths: Path) -> None:
        for path in paths:
            path.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                shutil.chown(path, self.user, self.user)
                subprocess.run(["chown", "-R", f"{self.user}:{self.user}", str(path)], check=True)

    def initialize(self) -> None:
        """A fresh, empty server: root over TCP with no password, as the local defaults expect."""
        self._own(self.datadir, self.binlog_dir, self.run_dir)
        run([client_tool("mariadb-install-db"), "--no-defaults", f"--datadir={self.datadir}", f"--user={self.user}",
             "--auth-root-authentication-method=normal", "--skip-test-db"])

    def argv(self) -> list[str]:
        options = {
            "datadir": str(self.datadir), "port": str(self.port), "bind-address": "127.0.0.1",
            "socket": str(self.socket), "pid-file": str(self.pid_file), "log-error": str(self.error_log),
            "user": self.user, "log-bin": str(self.binlog_dir / BINLOG_BASENAME),
            "character-set-server": "utf8mb4", "collation-server": "utf8mb4_general_ci",
            "max-connections": "500",
            **{k.replace("_", "-"): v for k, v in DURABLE.items()}, **self.extra,
        }
        # --no-defaults: the machine's my.cnf names its own datadir, log and port
        return [client_tool("mariadbd"), "--no-defaults", *(f"--{k}={v}" for k, v in options.items())]

    def start(self, timeout: float = 90) -> None:
        if not port_free(self.port):
            raise ServerError(f"port {self.port} is taken: a server already runs there")
        self._own(self.datadir, self.binlog_dir, self.run_dir)
        if self.port == SYSTEM_PORT:
            self._own(SYSTEM_PID_FILE.parent)
        with open(self.run_dir / f"mariadbd-{self.port}.out", "ab") as out:
            subprocess.Popen(self.argv(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.target().alive():
                return
            time.sleep(0.2)
        raise ServerError(f"mariadbd on {self.port} did not answer in {timeout:.0f} s; "
                          f"{self.error_log}: {_tail(self.error_log)}")

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if Path(f"/proc/{pid}").exists() else None

    def stop(self, timeout: float = 60) -> None:
        """A clean shutdown (SIGTERM: InnoDB and the binary log flushed)."""
        self._signal(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed beyond what each commit already wrote."""
        self._signal(signal.SIGKILL, 30)

    def _signal(self, sig: int, timeout: float) -> None:
        pid = self.pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (Path(f"/proc/{pid}").exists() and not _zombie(pid)):
            time.sleep(0.1)
        while time.monotonic() < deadline and not port_free(self.port):
            time.sleep(0.1)
        if not port_free(self.port):
            raise ServerError(f"mariadbd {pid} on {self.port} still listens after signal {sig}")


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


def _tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except FileNotFoundError:
        return "(no log)"
