"""bash scripts/backup and bash scripts/restore (python -m backups backup|restore ...)."""
from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from backups import backup as b, manifest as m
from backups.restore import ROOT, redis_distrust, restore
from backups.server import SYSTEM_PORT, ServerError, Target

DEFAULT_BINLOG_DIR = "/var/lib/mysql-binlog"  # deploy/mariadb/60-seckill-durable.cnf: another disk in production


def backup_dir() -> Path:
    return Path(os.environ.get("SECKILL_BACKUP_DIR") or ROOT / "var" / "backups")


def target() -> Target:
    return Target.from_url(os.environ.get("DATABASE_URL") or f"mysql://root:@127.0.0.1:{SYSTEM_PORT}/seckill")


def when(text: str) -> datetime:
    """An ISO time; without a zone, the machine's."""
    at = datetime.fromisoformat(text)
    return at if at.tzinfo else at.astimezone()


def say(text: str) -> None:
    print(f"[seckill] {text}", file=sys.stderr, flush=True)


def backup_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="bash scripts/backup", description=(
        "Back up the server of DATABASE_URL while it runs, into SECKILL_BACKUP_DIR (default var/backups): full, "
        "incremental (on the last backup), logs (its binary logs copied), or list."))
    ap.add_argument("what", choices=(*m.KINDS, "list"), nargs="?", default="list")
    args = ap.parse_args(argv)
    where = backup_dir()
    if args.what == "list":
        print("\n".join(b.listing(where)))
        return 0
    where.mkdir(parents=True, exist_ok=True)
    if args.what == m.LOGS:
        made = b.logs_copy(target=target(), backup_dir=where)
    else:
        made = b.backup_take(kind=args.what, target=target(), backup_dir=where)
    print(f"{made.name}: {made.kind} in {made.seconds:.1f} s, {made.bytes / 1e6:.1f} MB, binlog "
          f"{made.binlog_file}:{made.binlog_pos}" + (f", lsn {made.from_lsn}..{made.to_lsn}" if made.to_lsn else "")
          + (f", base {made.base}" if made.base else "") + (f", copied {' '.join(made.logs)}" if made.logs else ""))
    return 0


def restore_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="bash scripts/restore", description=(
        "Restore the backups of SECKILL_BACKUP_DIR into a fresh data directory, replay the binary logs (the "
        "backup's copies and SECKILL_BINLOG_DIR's) to their end or --until, and start a server on it."))
    ap.add_argument("--to", action="append", default=[], metavar="DATADIR|PORT",
                    help="a fresh data directory (default var/restore/<time>/data), a port (default the "
                         "port of DATABASE_URL), or both: --to 3306 --to /srv/mysql-new")
    ap.add_argument("--until", type=when, help="replay only what was committed before this time (ISO)")
    ap.add_argument("--rebuild-redis", action="store_true",
                    help="fence every SKU and token claim in Redis before the server takes its port: each SKU "
                         "is rebuilt from the restored rows behind the confirm queue")
    ap.add_argument("--binlog-dir", type=Path, help="where the restored server writes its own binary log "
                    "(fresh; default beside its data directory)")
    ap.add_argument("--logs-from", type=Path, action="append", default=None,
                    help="a directory of surviving binary logs (default SECKILL_BINLOG_DIR, else "
                         f"{DEFAULT_BINLOG_DIR})")
    ap.add_argument("--no-logs", action="store_true", help="the backups only: lose what was committed after them")
    args = ap.parse_args(argv)
    tgt = target()
    port, datadir = tgt.port, None
    for to in args.to:
        if to.isdigit():
            port = int(to)
        else:
            datadir = Path(to).resolve()
    if datadir is None:
        datadir = ROOT / "var" / "restore" / m.stamp(datetime.now(UTC)) / "data"
    binlog_dir = args.binlog_dir or datadir.parent / f"{datadir.name}-binlog"
    logs_from = args.logs_from or [Path(os.environ.get("SECKILL_BINLOG_DIR") or DEFAULT_BINLOG_DIR)]
    done = restore(backup_dir=backup_dir(), datadir=datadir, port=port, binlog_dir=binlog_dir,
                   run_dir=datadir.parent, log_dirs=logs_from, until=args.until, replay_logs=not args.no_logs,
                   rebuild_redis=redis_distrust if args.rebuild_redis else None, client=tgt, say=say)
    print(f"restored {' -> '.join(done.chain)} + {len(done.logs)} binary log(s) into {done.datadir}, serving on "
          f"127.0.0.1:{done.port} after {done.seconds:.1f} s ("
          + ", ".join(f"{k} {v:.1f} s" for k, v in done.steps.items()) + ")")
    if args.rebuild_redis:
        print("Redis fenced: each SKU sells again once its fence comes out of the confirm queue (a worker must run)")
    print("next: python manage.py reconcile (drift per SKU), then bash scripts/backup full on the new server")
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("backup", "restore"):
        print("usage: python -m backups backup|restore ...", file=sys.stderr)
        return 2
    try:
        return (backup_main if argv[0] == "backup" else restore_main)(argv[1:])
    except (ServerError, m.ChainBroken) as exc:
        say(str(exc))
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
