"""Backups and restores of a MariaDB of the test's own (127.0.0.1:3396-3399, its
data directory under a temporary directory; the machine's 3306 is never
touched): what a restore brings back with and without the binary logs, and
up to --until. Then the drill: a sale on its own server that loses its data
directory mid-sale (benchmarks.chaos's mariadb-restore row, real web, worker
and beat processes)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from backups import backup, manifest as m
from backups.restore import restore
from backups.server import LocalServer, ServerError, free_port_in
from testsupport import ROOT

pytestmark = pytest.mark.restore_drill

PORTS = range(3396, 3400)


@pytest.fixture
def base():
    path = Path(tempfile.mkdtemp(prefix="seckill-restore-test-"))
    path.chmod(0o755)  # the servers run as mysql
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server(base):
    """A fresh server with a table, its binary log apart from its data (another disk)."""
    db = LocalServer(datadir=base / "data", port=free_port_in(PORTS), binlog_dir=base / "binlog", run_dir=base / "run")
    db.initialize()
    db.start()
    db.target().query("CREATE DATABASE shop; CREATE TABLE shop.sale (n INT PRIMARY KEY, at DATETIME(6)) ENGINE=InnoDB")
    servers = [db]
    yield db, servers
    for s in servers:
        s.stop()


def insert(db: LocalServer, numbers: range) -> None:
    db.target().query(";".join(f"INSERT INTO shop.sale VALUES ({n}, NOW(6))" for n in numbers))


def rows(db: LocalServer) -> list[int]:
    return [int(r[0]) for r in db.target().query("SELECT n FROM shop.sale ORDER BY n")]


def restored(base: Path, db: LocalServer, servers: list, name: str, **kw) -> LocalServer:
    """Restore into a fresh data directory on the lost server's port; the server it started."""
    done = restore(backup_dir=base / "backups", datadir=base / name, port=db.port, binlog_dir=base / f"{name}-binlog",
                   run_dir=base / "run", log_dirs=[db.binlog_dir], **kw)
    new = LocalServer(datadir=done.datadir, port=db.port, binlog_dir=base / f"{name}-binlog", run_dir=base / "run")
    servers.append(new)
    return new


def test_a_restore_replays_the_logs_past_the_last_backup(base, server):
    db, servers = server
    backups = base / "backups"
    insert(db, range(1, 6))
    full = backup.backup_take(kind=m.FULL, target=db.target(), backup_dir=backups)
    insert(db, range(6, 11))
    inc = backup.backup_take(kind=m.INCREMENTAL, target=db.target(), backup_dir=backups)
    assert (inc.base, inc.from_lsn) == (full.name, full.to_lsn) and inc.binlog_pos > full.binlog_pos
    assert [x.name for x in m.chain(backups)] == [full.name, inc.name]
    insert(db, range(11, 16))  # after the last backup: only the binary log has them
    time.sleep(1.1)  # the binary log's times are to the second
    until = datetime.now(UTC)
    time.sleep(1.1)
    insert(db, range(16, 21))
    db.kill()
    shutil.rmtree(db.datadir)  # the data disk lost; the log disk (db.binlog_dir) survives

    # Without the logs (a broken restore) the rows after the last backup are gone.
    without = restored(base, db, servers, "no-logs", replay_logs=False)
    assert rows(without) == list(range(1, 11))
    without.stop()
    # With them, every committed row is back; --until stops at its moment.
    whole = restored(base, db, servers, "whole")
    assert rows(whole) == list(range(1, 21))
    whole.stop()
    upto = restored(base, db, servers, "until", until=until)
    assert rows(upto) == list(range(1, 16))
    # The restored server logs what it is given, so a backup of it carries on from there.
    insert(upto, range(21, 22))
    again = backup.logs_copy(target=upto.target(), backup_dir=base / "after", binlog_dir=upto.binlog_dir)
    assert again.logs


def test_a_restore_refuses_a_data_directory_in_use(base, server):
    db, _ = server
    backup.backup_take(kind=m.FULL, target=db.target(), backup_dir=base / "backups")
    with pytest.raises(ServerError, match="not empty"):
        restore(backup_dir=base / "backups", datadir=db.datadir, port=db.port, binlog_dir=base / "b2",
                run_dir=base / "run", log_dirs=[db.binlog_dir])
    (base / "fresh").mkdir()
    with pytest.raises(ServerError, match="already listens"):  # the server still runs on its port
        restore(backup_dir=base / "backups", datadir=base / "fresh", port=db.port, binlog_dir=base / "b2",
                run_dir=base / "run", log_dirs=[db.binlog_dir])


def test_a_logs_backup_copies_the_binary_log_with_its_position(base, server):
    db, _ = server
    insert(db, range(1, 4))
    first = backup.logs_copy(target=db.target(), backup_dir=base / "backups")
    assert first.logs and all((base / "backups" / m.LOG_DIR / n).is_file() for n in first.logs)
    insert(db, range(4, 6))
    second = backup.logs_copy(target=db.target(), backup_dir=base / "backups")
    # FLUSH BINARY LOGS closed the file the rows went into: it is copied, the closed ones before it are not again
    assert first.binlog_file in second.logs
    assert m.binlog_index(second.binlog_file) == m.binlog_index(first.binlog_file) + 1
    assert "restore chain: none" in backup.listing(base / "backups")[-1]


def test_the_drill_loses_the_data_directory_mid_sale_and_keeps_every_202():
    """benchmarks.chaos's mariadb-restore row: a sale on its own server, a full and
    an incremental backup while it runs, kill -9 and rm -rf of the data directory,
    the restore with its logs and Redis fenced, the confirm queue drained into it."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.chaos", "--only", "mariadb-restore", "--row-json",
                           "--concurrency", "32"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("ROW-JSON ")]
    assert lines, done.stdout[-3000:] + done.stderr[-3000:]
    row = json.loads(lines[0][len("ROW-JSON "):])
    # every 202 is an order, once, none FAILED; the stock exact in both stores
    assert row["accepted"] > 0 and row["confirmed"] == row["accepted"], row
    assert (row["lost"], row["failed202"], row["duplicated"], row["oversold"], row["drift"]) == (0, 0, 0, 0, 0), row
    assert "buckets do not add up" not in row["note"], row
    # orders confirmed after the last backup came back from the binary log (without it they would be lost)
    after = re.search(r"(\d+)/(\d+) orders after the last backup back from the logs", row["note"])
    assert after and int(after[2]) > 0 and after[1] == after[2], row["note"]
    assert "selling again" in row["note"] and row["ok"], row
