"""The data directory lost mid-sale and restored from the backups: the run's
own MariaDB (127.0.0.1:3396-3399, its binary log in a directory apart, as on
another disk), backed up full and incrementally while the load runs, killed
(SIGKILL) and its data directory deleted, then restored with
`backups.restore.restore` as `bash scripts/restore --rebuild-redis` does."""
from __future__ import annotations

import shutil
import time

from benchmarks.chaos.context import Context, clock

REBUILD_WAIT_S = 60


def mariadb_restore(ctx: Context) -> None:
    """The data directory lost mid-sale (kill -9, rm -rf) after a full and an incremental backup; restored with its
    binary logs, Redis rebuilt behind the confirm queue."""
    from django.db import close_old_connections

    from backups import backup, manifest
    from backups.restore import redis_distrust, restore
    from backups.server import LocalServer
    from benchmarks.harness import progress, stores
    from inventory.redis import snapshots
    from orders.models import Order

    db: LocalServer = ctx.stack.db
    base = db.run_dir.parent
    backups = base / "backups"
    full = backup.backup_take(kind=manifest.FULL, target=db.target(), backup_dir=backups)
    inc = backup.backup_take(kind=manifest.INCREMENTAL, target=db.target(), backup_dir=backups)
    backup.logs_copy(target=db.target(), backup_dir=backups, binlog_dir=db.binlog_dir)
    time.sleep(0.5)  # the sale goes on: confirms only the binary log holds
    after = set(Order.objects.filter(confirmed_at__gt=inc.finished).values_list("order_id", flat=True))
    close_old_connections()
    ctx.mark()
    db.kill()
    shutil.rmtree(db.datadir)
    lost_at = clock()
    progress(f"mariadb-restore: data directory deleted ({len(after)} orders confirmed after the last backup)")
    n = len(list(base.glob("data-*"))) + 1
    done = restore(backup_dir=backups, datadir=base / f"data-{n}", port=db.port, binlog_dir=base / f"binlog-{n}",
                   run_dir=db.run_dir, log_dirs=[db.binlog_dir], rebuild_redis=redis_distrust,
                   client=db.target(stores.DB_NAME), say=lambda s: progress(f"mariadb-restore: {s}"))
    ctx.stack.db = LocalServer(datadir=done.datadir, port=db.port, binlog_dir=base / f"binlog-{n}", run_dir=db.run_dir)
    restored_at = clock()
    close_old_connections()
    deadline = time.monotonic() + REBUILD_WAIT_S
    while time.monotonic() < deadline and not all(snapshots.snapshot_exists(sku_id=s) for s in ctx.skus):
        time.sleep(0.1)
    rebuilt = all(snapshots.snapshot_exists(sku_id=s) for s in ctx.skus)
    back = Order.objects.filter(order_id__in=after).count()
    ctx.notes.append(
        f"full {full.seconds:.1f} s {full.bytes / 1e6:.0f} MB, "
        f"incremental {inc.seconds:.1f} s {inc.bytes / 1e6:.0f} MB;"
        f" restored in {restored_at - lost_at:.1f} s ({len(done.logs)} log(s) replayed);"
        f" {back}/{len(after)} orders after the last backup back from the logs;"
        + (f" selling again {clock() - lost_at:.1f} s after the loss" if rebuilt
           else f" not rebuilt within {REBUILD_WAIT_S} s"))
    if back != len(after) or not rebuilt:
        ctx.failures.append("restore incomplete")
