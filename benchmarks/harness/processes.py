"""The processes a run starts: web tiers under each HTTP server, workers, beat,
HAProxy in front of several web instances. Each is a `Server` in STARTED, which
the CPU accounting (harness.cpu) finds by pid."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

from benchmarks.harness import BIN, HOST, ROOT, stores


def _pdeathsig() -> None:
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def die_with_parent():
    """A Popen `preexec_fn`: the child gets SIGTERM when the run that started
    it dies (Linux), so a run killed by a timeout leaves no gunicorn or worker
    behind consuming the next run's queues. Linux ties this to the starting
    thread, so a process started from another thread (a fault restarting a
    worker) is left alone: it gets None."""
    import threading

    return _pdeathsig if threading.current_thread() is threading.main_thread() else None


# Every server this run started, for the CPU accounting: it finds them by pid,
# whatever program they run.
STARTED: list[Server] = []


class Server:
    """A process (and its process group) this run started, its output in var/<log>."""

    def __init__(self, args: list[str], env: dict[str, str], log: str, group: str = "other"):
        (ROOT / "var").mkdir(exist_ok=True)
        self.args, self.env, self.log_name, self.group = args, env, log, group
        self.p: subprocess.Popen | None = None
        STARTED.append(self)
        self.start()

    def start(self) -> Server:
        with open(ROOT / "var" / self.log_name, "ab") as log:  # the child keeps its own copy of the descriptor
            self.p = subprocess.Popen(self.args, env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True, preexec_fn=die_with_parent())
        return self

    @property
    def alive(self) -> bool:
        return self.p is not None and self.p.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive:
            os.killpg(self.p.pid, sig)
            self.p.wait(30)

    def stop(self) -> None:
        if self.alive:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()

    def children(self) -> list[int]:
        """Pids of the processes this server forked (gunicorn's workers)."""
        out = subprocess.run(["pgrep", "-P", str(self.p.pid)], capture_output=True, text=True).stdout
        return [int(x) for x in out.split()]

    def log_text(self) -> str:
        path = ROOT / "var" / self.log_name
        return path.read_text(errors="replace") if path.exists() else ""


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((HOST, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listening on {port}; see var/*.log")


# The HTTP servers the web tier can run under: granian through the project's
# launcher (seckill_site/serve.py) is the default, gunicorn (gunicorn.conf.py)
# stays supported, uWSGI and the plain granian command (8 blocking threads, no
# launcher) are there to compare by measurement.
WEB_SERVERS = ("granian", "gunicorn", "uwsgi", "granian-cli")
DEFAULT_SERVER = "granian"
# Threads (request slots) per worker process, as gunicorn.conf.py gives gthread.
WEB_THREADS = 8
SERVE = ROOT / "seckill_site" / "serve.py"


def _own_metrics_dir(env: dict[str, str], server: str, port: int) -> None:
    """A fresh Prometheus multiprocess directory for a server started without
    a launcher that picks one (gunicorn.conf.py and serve.py do)."""
    from seckill_site import webserver

    metrics = ROOT / "var" / "prometheus" / f"{server}-{HOST}_{port}"
    webserver.metrics_dir_empty(str(metrics))
    env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics)


def web_server(server: str, app: str, port: int, workers: int, env: dict[str, str], log: str,
               threads: int | None = None) -> Server:
    """Start `app` (a WSGI "module:callable") under `server` on the port with
    `workers` processes, in the web group (the CPU accounting finds it and its
    worker processes by pid). `threads` forces the request threads per process
    (gunicorn's --threads, SECKILL_WEB_THREADS for serve.py); left None, each
    launcher sizes them as deployed (WEB_THREADS for uWSGI, which has none)."""
    bind = f"{HOST}:{port}"
    # the launchers' settings: serve.py reads SECKILL_WEB_*, gunicorn.conf.py the same or GUNICORN_*
    env = dict(env, SECKILL_WEB_BIND=bind, GUNICORN_BIND=bind, WEB_CONCURRENCY=str(workers))
    if threads:
        env.update(SECKILL_WEB_THREADS=str(threads), GUNICORN_THREADS=str(threads))
    if server == "gunicorn":
        # the command line wins over gunicorn.conf.py, which sizes threads for its backlog
        args = [str(BIN / "gunicorn"), app, *(["--threads", str(threads)] if threads else [])]
    elif server == "granian" and SERVE.exists():
        args = [str(BIN / "python"), "-m", "seckill_site.serve", app]
    elif server in ("granian", "granian-cli"):
        # The plain CLI (on a checkout without the launcher, or to compare with
        # it): the counterparts of gunicorn.conf.py's backlog, keepalive and graceful_timeout.
        _own_metrics_dir(env, server, port)
        args = [str(BIN / "granian"), "--interface", "wsgi", "--workers", str(workers),
                "--blocking-threads", str(threads or WEB_THREADS), "--backlog", "2048", "--http1-keep-alive",
                "--respawn-failed-workers", "--workers-kill-timeout", "10", "--no-access-log",
                "--host", HOST, "--port", str(port), app]
    elif server == "uwsgi":
        _own_metrics_dir(env, server, port)
        args = _uwsgi(app, bind, workers, threads or WEB_THREADS)
    else:
        raise ValueError(f"unknown web server {server!r}; one of {', '.join(WEB_SERVERS)}")
    web = Server(args, env, log, group="web")
    wait_port(port)
    return web


def _uwsgi(app: str, bind: str, workers: int, threads: int) -> list[str]:
    """uWSGI's command line, each option the counterpart of the deployment's:
    - http-socket: the workers parse HTTP themselves. A response with no
      Content-Length (Django sets none) ends by closing the connection, so there
      is no keep-alive: http11-socket closes the same way, and the HTTP router
      that keeps it costs a process hop a request (docs/benchmark.md, "Choosing
      the web server").
    - lazy-apps: the app is imported in each worker, after the fork, as gunicorn
      and granian do: the group publisher's thread and the connection pools
      start in the process that uses them.
    - die-on-term: SIGTERM stops uWSGI (by default it reloads).
    - harakiri, worker-reload-mercy: gunicorn.conf.py's timeout and
      graceful_timeout; thunder-lock: one accept() at a time across workers."""
    if not (BIN / "uwsgi").exists():
        raise SystemExit("no uWSGI in the virtualenv: pip install pyuwsgi (requirements-dev.txt)")
    return [str(BIN / "uwsgi"), "--master", "--die-on-term", "--lazy-apps", "--need-app",
            "--processes", str(workers), "--threads", str(threads), "--enable-threads",
            "--http-socket", bind, "--listen", "1024", "--thunder-lock", "--harakiri", "30",
            "--worker-reload-mercy", "10", "--disable-logging", "--pythonpath", str(ROOT), "--module", app]


def start_web(port: int, workers: int, extra: dict[str, str] | None = None, log: str = "bench-web.log",
              server: str = DEFAULT_SERVER) -> Server:
    """The site on `port` under `server`, as the web tier's MySQL user (whose statements are counted)."""
    database = f"mysql://{stores.WEB_DB_USER}:@{stores.DB_HOST}:{stores.DB_PORT}/{stores.DB_NAME}"
    env = dict(os.environ, DATABASE_URL=database, **(extra or {}))
    return web_server(server, "seckill_site.wsgi:application", port, workers, env, log)


def start_worker(log: str = "bench-worker.log", extra: dict[str, str] | None = None,
                 wait: bool = True, partitions: int | None = None, name: str | None = None) -> Server:
    """A worker; `partitions` sets its SECKILL_CONFIRM_PARTITIONS (a consumer
    thread per partition; the web tier must publish to as many, so a run sets
    it in the environment for both). `name` is its Celery node name ("w1@%h"),
    which its confirm consumers' tags carry: two workers need two names."""
    env = dict(os.environ, **(extra or {}))
    if partitions is not None:
        env["SECKILL_CONFIRM_PARTITIONS"] = str(partitions)
    worker = Server([str(BIN / "celery"), "-A", "seckill_site", "worker", "-l", "warning", "--concurrency", "4",
                     "--without-mingle", "--without-gossip", *(["-n", name] if name else []),
                     "-Q", os.environ["SECKILL_QUEUE"]],
                    env, log, group="worker")
    if wait:
        wait_consuming()
    return worker


# HAProxy in front of several web instances, with the config scripts/up
# --cluster runs: scripts/haproxy-config fills deploy/haproxy.cfg.in.
# It connects to the instances from PROXY_SOURCE, which they trust for
# X-Forwarded-For (SECKILL_TRUSTED_PROXIES).
PROXY_SOURCE = "127.0.0.2"


def start_proxy(port: int, web_ports: list[int], log: str = "bench-haproxy.log") -> Server:
    """HAProxy on `port` in front of the web instances on `web_ports`, with a
    runtime API socket (`.socket`, read by proxy_servers); returns once every
    instance is UP."""
    (ROOT / "var").mkdir(exist_ok=True)
    config, sock = ROOT / "var" / f"{log}.cfg", ROOT / "var" / f"{log}.sock"
    env = dict(os.environ, SECKILL_PROXY_LISTEN=f"{HOST}:{port}", SECKILL_PROXY_SOURCE=PROXY_SOURCE,
               SECKILL_PROXY_WEBS=" ".join(f"{HOST}:{p}" for p in web_ports), SECKILL_PROXY_STATS_SOCKET=str(sock))
    subprocess.run(["sh", str(ROOT / "scripts" / "haproxy-config"), str(ROOT / "deploy" / "haproxy.cfg.in"),
                    str(config)], env=env, check=True)
    subprocess.run(["haproxy", "-q", "-c", "-f", str(config)], check=True)
    proxy = Server(["haproxy", "-W", "-db", "-f", str(config)], dict(os.environ), log, group="proxy")
    proxy.socket = sock
    wait_proxy(proxy, len(web_ports))
    return proxy


def proxy_servers(proxy: Server) -> dict[str, str]:
    """HAProxy's view of its web instances: {"web1": "UP", "web2": "DOWN", ...}
    (empty while its runtime API is not up)."""
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


def wait_proxy(proxy: Server, instances: int, timeout: float = 60) -> None:
    """Until HAProxy has `instances` web instances, every one UP."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proxy.alive:
            raise SystemExit(f"HAProxy exited; see var/{proxy.log_name}")
        seen = proxy_servers(proxy)
        if len(seen) == instances and set(seen.values()) == {"UP"}:
            return
        time.sleep(0.2)
    raise SystemExit(f"HAProxy does not see every web instance UP: {proxy_servers(proxy)}")


def start_beat(log: str = "bench-beat.log") -> Server:
    (ROOT / "var").mkdir(exist_ok=True)
    schedule = ROOT / "var" / f"{log}.schedule"
    return Server([str(BIN / "celery"), "-A", "seckill_site", "beat", "-l", "warning", "-s", str(schedule)],
                  dict(os.environ), log, group="worker")


def wait_consuming(timeout: float = 60, consumers: int = 1) -> None:
    """Until `consumers` confirm consumers of every partition report themselves alive."""
    from django.conf import settings

    from inventory.redis import liveness

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = liveness.partitions_consumed(within_s=3)
        if all(seen.get(k, 0) >= consumers for k in range(settings.SECKILL_CONFIRM_PARTITIONS)):
            return
        time.sleep(0.1)
    raise SystemExit("no confirm consumer came up; see var/*worker*.log")
