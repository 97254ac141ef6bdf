"""What both local clusters' runners share: the log, ports, packages, private
files, and the one way their nodes are stopped. Standard library only: the
scripts run it before the virtualenv exists."""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_DIR = ROOT / "var" / "cluster"
HOST = "127.0.0.1"

Log = Callable[[str], None]


class ClusterError(RuntimeError):
    """A cluster could not be brought to the state asked for; the message says why."""


def log(message: str) -> None:
    """A line on stderr, as scripts/lib.sh's log writes it."""
    print(f"[seckill] {message}", file=sys.stderr, flush=True)


_CREDENTIALS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@;, ]*):[^@/;, ]*@")


def without_passwords(text: str) -> str:
    """Every scheme://user:password@ in `text` as scheme://user:***@ (for logs)."""
    return _CREDENTIALS.sub(r"\1:***@", text)


def port_open(port: int) -> bool:
    """Something accepts connections on 127.0.0.1:port (a paused process too:
    the kernel accepts for it)."""
    try:
        socket.create_connection((HOST, port), timeout=1).close()
        return True
    except OSError:
        return False


def wait_port(port: int, name: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if port_open(port):
            return
        time.sleep(0.1)
    raise ClusterError(f"{name} did not open port {port} within {seconds:.0f} s")


_apt = threading.Lock()  # both clusters come up side by side; dpkg takes one install at a time
_apt_updated = [False]


def apt_install(*packages: str, say: Log = log) -> None:
    if os.geteuid() != 0:
        raise ClusterError(f"need root to install: {' '.join(packages)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with _apt:
        if not _apt_updated[0]:
            subprocess.run(["apt-get", "update", "-qq"], env=env, check=True)
            _apt_updated[0] = True
        say(f"installing {' '.join(packages)}")
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], env=env,
                       check=True, stdout=subprocess.DEVNULL)


def installed(command: str) -> bool:
    return shutil.which(command) is not None


def write_private(path: Path, text: str) -> None:
    """`text` into `path`, readable by its owner only from the first byte (a file
    that exists keeps its mode when opened: chmod as well). Passwords go in these."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def made_once(path: Path, make: Callable[[], str], mode: int) -> str:
    """The secret in `path`, made by `make` the first time (written aside and
    moved in, so a reader never sees half of it)."""
    if not path.exists() or path.stat().st_size == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        aside = path.with_name(f"{path.name}.tmp.{os.getpid()}")
        write_private(aside, make())
        os.replace(aside, path)
    path.chmod(mode)
    return path.read_text()


def hex_secret() -> str:
    return secrets.token_hex(24)


def alnum_secret() -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(secrets.choice(alphabet) for _ in range(32))


def pid_file(path: Path) -> int | None:
    """The pid a node wrote, if it is a number (kill -9 leaves the file behind)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def proc_text(pid: int, what: str) -> str:
    """/proc/<pid>/<what> (cmdline, environ) with its NULs as newlines; "" when gone."""
    try:
        return (Path("/proc") / str(pid) / what).read_bytes().replace(b"\0", b"\n").decode(errors="replace")
    except OSError:
        return ""


def stopped(pid: int) -> bool:
    """The process is SIGSTOPped (state T)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def alive(pid: int) -> bool:
    """The process exists and is no zombie (a node this process started and has
    not reaped yet is gone all the same)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop_all(pids: list[int], *, grace_s: float, what: str, nodes: str, say: Log = log) -> None:
    """SIGTERM to every node at once, SIGKILL to any still there after
    `grace_s`. At once: stopped one by one, a Redis Cluster would fail the
    stopped masters over before the last goes (the next start finds the roles
    shuffled), and a RabbitMQ node stopped last is the one the others wait for
    at their next boot. SIGCONT too: a paused node holds its SIGTERM until resumed."""
    if not pids:
        return
    for sig in (signal.SIGTERM, signal.SIGCONT):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    for pid in pids:
        if alive(pid):
            say(f"{what} {pid} ignored SIGTERM for {grace_s:.0f} s: SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    say(f"stopped {len(pids)} {nodes} node(s)")


def in_parallel(*calls: Callable[[], object]) -> list[BaseException | None]:
    """Run each call in a thread of its own; what each raised (None: it returned)."""
    errors: list[BaseException | None] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            calls[i]()
        except BaseException as exc:  # handed back to the caller, who decides
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
