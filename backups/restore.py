"""A restore to a fresh data directory, in an order that keeps every promise:

1. the chain (the last full backup and its incrementals) is copied aside and
   prepared: the full one brought to its consistent moment, each incremental
   applied on it in turn;
2. moved into the fresh data directory;
3. a server started on it on a private port nobody else knows, so no worker
   confirms into rows that are not all back yet;
4. the binary logs replayed on it from the chain's last position, to their end
   or to --until: every commit the logs hold, in commit order;
5. (--rebuild-redis) Redis distrusted against the restored rows: every SKU's
   snapshot dropped and fenced, the tokens' claims fenced
   (`manage.py stock_distrust --all`, the same fences a lost Redis gets), while
   the server is still private: from here the gate takes nothing until each
   fence has come out of the confirm queue behind every message a 202 promised,
   and the worker rebuilds each SKU from the rows then;
6. the server stopped and started on its own port: the workers reconnect and
   drain the confirm queue into it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from backups import manifest as m
from backups.server import LocalServer, ServerError, Target, client_tool, free_port_in, port_free, run

ROOT = Path(__file__).resolve().parent.parent
PRIVATE_PORTS = range(33060, 33160)


@dataclass
class Restored:
    """What a restore did, and how long each step took (seconds)."""

    chain: list[str]
    logs: list[str]
    datadir: Path
    port: int
    steps: dict[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return round(sum(self.steps.values()), 2)


def log_sources(backup_dir: Path, extra: list[Path]) -> dict[str, Path]:
    """Each binary log by name, from the backup's copies and the directories in
    `extra` (the surviving log disk): the longest copy of each (a log copied
    while open is shorter than the same log on the disk it was written to)."""
    found: dict[str, Path] = {}
    for directory in [backup_dir / m.LOG_DIR, *extra]:
        if not directory.is_dir():
            continue
        for path in directory.iterdir():
            if not path.is_file() or path.name.endswith((".index", ".partial", ".state")) or "." not in path.name:
                continue
            if path.name not in found or path.stat().st_size > found[path.name].stat().st_size:
                found[path.name] = path
    return found


def _prepare(chain: list[m.Manifest], backup_dir: Path, work: Path) -> Path:
    tool = client_tool("mariadb-backup")
    full = work / "full"
    shutil.copytree(backup_dir / chain[0].name / "data", full)
    run([tool, "--prepare", f"--target-dir={full}"])
    for inc in chain[1:]:
        copy = work / inc.name
        shutil.copytree(backup_dir / inc.name / "data", copy)
        run([tool, "--prepare", f"--target-dir={full}", f"--incremental-dir={copy}"])
    return full


def replay(*, target: Target, logs: list[Path], start_pos: int, until: datetime | None) -> None:
    """The binary logs, from `start_pos` in the first, piped into the server."""
    if not logs:
        return
    argv = [client_tool("mariadb-binlog"), f"--start-position={start_pos}"]
    if until is not None:
        # mariadb-binlog reads the time in the machine's zone, as it prints event times
        argv.append(f"--stop-datetime={until.astimezone().strftime('%Y-%m-%d %H:%M:%S')}")
    argv += [str(p) for p in logs]
    with target.options_file() as opts:
        dump = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        load = subprocess.run([client_tool("mariadb"), f"--defaults-extra-file={opts}", "--binary-mode"],
                              stdin=dump.stdout, capture_output=True, text=True)
        dump.stdout.close()
        dump_err = dump.stderr.read().decode(errors="replace")
        dump.wait()
    if dump.returncode != 0 or load.returncode != 0:
        raise ServerError(f"binary log replay failed: {dump_err[-1000:]} {load.stderr[-2000:]}")


def redis_distrust(target: Target) -> None:
    """`manage.py stock_distrust --all` against the restored server (DATABASE_URL on it)."""
    env = dict(os.environ, DATABASE_URL=target.url())
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "stock_distrust", "--all"], env=env,
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise ServerError(f"stock_distrust --all failed: {done.stderr[-2000:]}")


def restore(*, backup_dir: Path, datadir: Path, port: int, binlog_dir: Path, run_dir: Path,
            log_dirs: list[Path], until: datetime | None = None, replay_logs: bool = True,
            rebuild_redis: Callable[[Target], None] | None = None, client: Target | None = None,
            say: Callable[[str], None] = lambda _s: None) -> Restored:
    """Steps 1-6 above; `binlog_dir` is where the new server writes its own
    binary log (not a directory a log is replayed from), `log_dirs` where
    surviving logs are read besides the backup's copies. `client`: the
    application's account (DATABASE_URL), which `rebuild_redis` connects as;
    the replay goes through the server's socket as root (the restored
    accounts are the lost server's: Debian's root authenticates by the OS user
    there). Returns what it did."""
    client = client or Target()
    if datadir.exists() and any(datadir.iterdir()):
        raise ServerError(f"{datadir} is not empty: a restore goes into a fresh data directory")
    if binlog_dir.exists() and any(binlog_dir.iterdir()):
        raise ServerError(f"{binlog_dir} is not empty: the restored server starts a binary log of its own there")
    if not port_free(port):
        raise ServerError(f"a server already listens on {port}: stop it (or restore to another port) first")
    chain = m.chain(backup_dir, until)
    sources = log_sources(backup_dir, log_dirs)
    names = m.binlogs_from(list(sources), chain[-1].binlog_file) if replay_logs else []
    done = Restored(chain=[c.name for c in chain], logs=names, datadir=datadir, port=port)
    work = run_dir / f"restore-work-{m.stamp(datetime.now().astimezone())}"
    work.mkdir(parents=True)
    t = time.monotonic()

    def step(name: str) -> None:
        nonlocal t
        done.steps[name] = round(time.monotonic() - t, 2)
        say(f"{name}: {done.steps[name]:.1f} s")
        t = time.monotonic()

    try:
        say(f"preparing {' -> '.join(done.chain)}")
        full = _prepare(chain, backup_dir, work)
        step("prepare")
        datadir.mkdir(parents=True, exist_ok=True)
        run([client_tool("mariadb-backup"), "--move-back", f"--target-dir={full}", f"--datadir={datadir}"])
        step("copy back")
        # the logs as they are now, before the new server writes anything of its own
        snapshot = work / "replay"
        snapshot.mkdir()
        logs = [Path(shutil.copyfile(sources[n], snapshot / n)) for n in names]
        private = LocalServer(datadir=datadir, port=free_port_in(PRIVATE_PORTS), binlog_dir=binlog_dir,
                              run_dir=run_dir)
        private.start()
        step("start (private)")
        try:
            say(f"replaying {len(logs)} binary log(s) from {chain[-1].binlog_file}:{chain[-1].binlog_pos}"
                + (f" until {until.isoformat()}" if until else ""))
            replay(target=private.target().on_socket(private.socket) if os.geteuid() == 0
                   else client.on_port(private.port), logs=logs, start_pos=chain[-1].binlog_pos, until=until)
            step("replay")
            if rebuild_redis is not None:
                rebuild_redis(client.on_port(private.port))
                step("redis distrust")
        finally:
            private.stop()
        public = LocalServer(datadir=datadir, port=port, binlog_dir=binlog_dir, run_dir=run_dir)
        public.start()
        step("start")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return done
