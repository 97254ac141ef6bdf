"""The app's processes on the bed: the web tier on a web host (python -m
seckill_site.serve on <address>:8000), a Celery worker on a worker host, each
started inside its namespace (ip netns exec), and HAProxy in the root
namespace on 127.0.0.1 in front of the web hosts. The tests and the fault
matrix start them; `bed.down` kills whatever is left in the namespaces."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from benchmarks.hosts import bed, net
from benchmarks.hosts.net import Host

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin"
LOGS = ROOT / "var" / "hosts" / "logs"


class Proc:
    """A process started in a host's namespace (ip netns exec execs it: its pid is the process's own)."""

    def __init__(self, h: Host | None, args: list[str], env: dict[str, str], log: str):
        self.host, self.args, self.env, self.log = h, args, env, LOGS / log
        self.popen: subprocess.Popen | None = None

    def start(self) -> Proc:
        LOGS.mkdir(parents=True, exist_ok=True)
        argv = self.host.cmd(*self.args) if self.host else self.args
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(argv, env=self.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.alive:
            os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def wait_tcp(ip: str, port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((ip, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listening on {ip}:{port}; see {LOGS}")


def start_web(h: Host, env: dict[str, str], workers: int = 1, **extra: str) -> Proc:
    """The site on h:8000 (it trusts the bridge's address, HAProxy's source, for X-Forwarded-For)."""
    bind = f"{h.ip}:{bed.WEB_PORT}"
    env = dict(env, SECKILL_WEB_BIND=bind, GUNICORN_BIND=bind, WEB_CONCURRENCY=str(workers),
               SECKILL_TRUSTED_PROXIES=net.BRIDGE_IP, **extra)
    web = Proc(h, [str(BIN / "python"), "-m", "seckill_site.serve"], env, f"web-{h.name}.log").start()
    wait_tcp(h.ip, bed.WEB_PORT)
    return web


def start_worker(h: Host, env: dict[str, str], name: str | None = None) -> Proc:
    name = name or h.name
    return Proc(h, [str(BIN / "celery"), "-A", "seckill_site", "worker", "-l", "info", "-n", f"{name}@%h",
                    "--concurrency", "2", "--without-mingle", "--without-gossip", "-Q", env["SECKILL_QUEUE"]],
                env, f"worker-{h.name}.log").start()


def start_proxy(port: int, webs: list[Host], name: str = "haproxy", proc: type[Proc] = Proc) -> Proc:
    """HAProxy on 127.0.0.1:port in the root namespace, connecting to the web
    hosts from the bridge's address; its runtime API on var/hosts/logs/<name>.sock.
    `proc`: the Proc class it runs as (the fault matrix's has more verbs)."""
    LOGS.mkdir(parents=True, exist_ok=True)
    config, sock = LOGS / f"{name}.cfg", LOGS / f"{name}.sock"
    env = dict(os.environ, SECKILL_PROXY_LISTEN=f"127.0.0.1:{port}", SECKILL_PROXY_SOURCE=net.BRIDGE_IP,
               SECKILL_PROXY_WEBS=" ".join(f"{h.ip}:{bed.WEB_PORT}" for h in webs),
               SECKILL_PROXY_STATS_SOCKET=str(sock))
    subprocess.run(["sh", str(ROOT / "scripts" / "haproxy-config"), str(ROOT / "deploy" / "haproxy.cfg.in"),
                    str(config)], env=env, check=True)
    subprocess.run(["haproxy", "-q", "-c", "-f", str(config)], check=True)
    proxy = proc(None, ["haproxy", "-W", "-db", "-f", str(config)], dict(os.environ), f"{name}.log").start()
    proxy.port, proxy.socket = port, sock
    wait_tcp("127.0.0.1", port)
    return proxy


def proxy_servers(proxy: Proc) -> dict[str, str]:
    """HAProxy's view of its web hosts: {"web1": "UP", ...}."""
    import csv

    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2)
            s.connect(str(proxy.socket))
            s.sendall(b"show stat\n")
            raw = b""
            while chunk := s.recv(65536):
                raw += chunk
    except OSError:
        return {}
    rows = list(csv.DictReader(raw.decode().lstrip("# ").splitlines()))
    return {r["svname"]: r["status"] for r in rows
            if r.get("pxname") == "web" and r["svname"] not in ("BACKEND", "FRONTEND")}
