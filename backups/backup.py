"""Taking a backup of a running server while it sells: a full one, an
incremental on the last, or a copy of its binary logs. mariadb-backup copies
InnoDB's pages and the redo written meanwhile, then takes BACKUP STAGE
BLOCK_COMMIT for a moment to note the binary log position the copy is
consistent with: no sale stops, and a replay of the logs from that position
brings the copy up to any later moment."""
from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

from backups import manifest as m
from backups.server import ServerError, Target, client_tool, run


def _checkpoints(data: Path) -> dict[str, str]:
    """mariadb-backup's xtrabackup_checkpoints: backup_type, from_lsn, to_lsn, ..."""
    out = {}
    for line in (data / "xtrabackup_checkpoints").read_text().splitlines():
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


def _binlog_info(data: Path) -> tuple[str, int, str]:
    """The binary log file, position and GTID the copy is consistent with."""
    path = data / "xtrabackup_binlog_info"
    if not path.is_file():
        raise ServerError("the server runs without a binary log (log_bin=OFF): a backup without one cannot be "
                          "brought past its own moment; install deploy/mariadb/60-seckill-durable.cnf and restart it")
    parts = path.read_text().split()
    return parts[0], int(parts[1]), parts[2] if len(parts) > 2 else ""


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def server_paths(target: Target) -> tuple[Path, Path | None]:
    """The server's data directory and its binary logs' directory (None with log_bin off)."""
    [[datadir, log_bin, basename]] = target.query("SELECT @@datadir, @@log_bin, IFNULL(@@log_bin_basename, '')")
    return Path(datadir), (Path(basename).parent if log_bin == "1" and basename else None)


def backup_take(*, kind: str, target: Target, backup_dir: Path, now: datetime | None = None) -> m.Manifest:
    """A full backup, or an incremental one on the last of the chain; returns its manifest."""
    if kind not in (m.FULL, m.INCREMENTAL):
        raise ValueError(kind)
    started = now or datetime.now(UTC)
    base = m.chain(backup_dir)[-1] if kind == m.INCREMENTAL else None
    name = f"{m.stamp(started)}-{kind}"
    directory = backup_dir / name
    partial = backup_dir / f".{name}.partial"  # renamed into place once complete: a crash leaves no half backup
    partial.mkdir(parents=True)
    datadir, _ = server_paths(target)
    t0 = time.monotonic()
    try:
        with target.options_file() as opts:
            run([client_tool("mariadb-backup"), f"--defaults-extra-file={opts}", "--backup",
                 f"--target-dir={partial / 'data'}", f"--datadir={datadir}",
                 *([f"--incremental-basedir={backup_dir / base.name / 'data'}"] if base else [])])
        checkpoints = _checkpoints(partial / "data")
        binlog_file, binlog_pos, gtid = _binlog_info(partial / "data")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    made = m.Manifest(
        name=name, kind=kind, started_at=started.isoformat(), finished_at=datetime.now(UTC).isoformat(),
        server=f"{target.host}:{target.port}", base=base.name if base else None,
        from_lsn=int(checkpoints["from_lsn"]), to_lsn=int(checkpoints["to_lsn"]),
        binlog_file=binlog_file, binlog_pos=binlog_pos, gtid=gtid, seconds=round(time.monotonic() - t0, 3),
        bytes=_size(partial / "data"))
    made.write(partial)
    partial.rename(directory)
    return made


def logs_copy(*, target: Target, backup_dir: Path, now: datetime | None = None,
              binlog_dir: Path | None = None) -> m.Manifest:
    """Close the current binary log (FLUSH BINARY LOGS) and copy every log the
    server still has into <backup_dir>/binlog: a restore replays them. A file
    copied before and unchanged is left alone; the one open at the last copy
    is copied again whole. `binlog_dir` is where the server writes them (asked
    of the server when not given)."""
    started = now or datetime.now(UTC)
    t0 = time.monotonic()
    if binlog_dir is None:
        _, binlog_dir = server_paths(target)
    if binlog_dir is None:
        raise ServerError("the server runs without a binary log (log_bin=OFF): nothing to copy")
    target.query("FLUSH BINARY LOGS")
    listed = [(row[0], int(row[1])) for row in target.query("SHOW BINARY LOGS")]
    [[current, position, *_]] = target.query("SHOW MASTER STATUS")
    out = backup_dir / m.LOG_DIR
    out.mkdir(parents=True, exist_ok=True)
    copied, size = [], 0
    for name, _listed_size in listed:
        source, dest = binlog_dir / name, out / name
        if not source.exists():
            continue
        if dest.exists() and dest.stat().st_size == source.stat().st_size and name != current:
            continue
        tmp = out / f".{name}.partial"
        shutil.copyfile(source, tmp)
        tmp.rename(dest)
        copied.append(name)
        size += dest.stat().st_size
    name = f"{m.stamp(started)}-logs"
    (backup_dir / name).mkdir()
    made = m.Manifest(name=name, kind=m.LOGS, started_at=started.isoformat(), finished_at=datetime.now(UTC).isoformat(),
                      server=f"{target.host}:{target.port}", binlog_file=current, binlog_pos=int(position),
                      seconds=round(time.monotonic() - t0, 3), bytes=size, logs=copied)
    made.write(backup_dir / name)
    return made


def listing(backup_dir: Path) -> list[str]:
    """One line per backup, oldest first, and the chain a restore would prepare now."""
    found = m.manifests(backup_dir)
    lines = [f"{x.name:<44} {x.kind:<11} {x.seconds:>7.1f} s {x.bytes / 1e6:>9.1f} MB  "
             f"binlog {x.binlog_file}:{x.binlog_pos}" + (f"  lsn {x.from_lsn}..{x.to_lsn}" if x.to_lsn else "")
             + (f"  base {x.base}" if x.base else "") for x in found]
    try:
        lines.append("restore chain: " + " -> ".join(x.name for x in m.chain(found)))
    except m.ChainBroken as exc:
        lines.append(f"restore chain: none ({exc})")
    return lines
