"""What each backup is, written beside it as manifest.json, and the chain a
restore prepares. Pure: nothing here touches a server.

The backup directory (SECKILL_BACKUP_DIR, default var/backups):

  <stamp>-full/         manifest.json, data/ (mariadb-backup's target)
  <stamp>-incremental/  manifest.json, data/ (the pages changed since its base)
  <stamp>-logs/         manifest.json (which binary logs were copied, and up to where)
  binlog/               the binary logs themselves, copied by every `logs`

A stamp is the UTC time the backup began, to the microsecond, so names sort
in the order they were taken."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

FULL, INCREMENTAL, LOGS = "full", "incremental", "logs"
KINDS = (FULL, INCREMENTAL, LOGS)
MANIFEST = "manifest.json"
LOG_DIR = "binlog"


class ChainBroken(RuntimeError):
    """The backups cannot be prepared into one consistent data directory."""


@dataclass
class Manifest:
    name: str                 # its directory's name
    kind: str                 # full | incremental | logs
    started_at: str           # ISO UTC
    finished_at: str          # ISO UTC; the data is consistent at a moment just before it
    server: str               # host:port it was taken from
    base: str | None = None   # an incremental's: the backup it holds the changes since
    from_lsn: int = 0         # InnoDB's log sequence numbers the pages cover
    to_lsn: int = 0
    binlog_file: str = ""     # where the binary log stood at the consistent moment: a replay starts there
    binlog_pos: int = 0
    gtid: str = ""
    seconds: float = 0.0
    bytes: int = 0
    logs: list[str] = field(default_factory=list)  # a logs backup's: the files copied

    @property
    def finished(self) -> datetime:
        return datetime.fromisoformat(self.finished_at)

    def write(self, directory: Path) -> None:
        (directory / MANIFEST).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, directory: Path) -> Manifest:
        return cls(**json.loads((directory / MANIFEST).read_text()))


def stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def manifests(backup_dir: Path) -> list[Manifest]:
    """Every backup under `backup_dir`, oldest first (by name: the stamp)."""
    if not backup_dir.is_dir():
        return []
    return [Manifest.read(d) for d in sorted(backup_dir.iterdir()) if (d / MANIFEST).is_file()]


def chain(backup_dir: Path | list[Manifest], until: datetime | None = None) -> list[Manifest]:
    """The last full backup (finished by `until`, when given) and the
    incrementals taken on it in turn: what a restore prepares. Each
    incremental must name the one before it as its base and begin at the LSN
    it ended at; anything else is a broken chain, refused rather than
    prepared into a data directory that silently misses pages."""
    found = manifests(backup_dir) if isinstance(backup_dir, Path) else backup_dir
    data = [m for m in found if m.kind in (FULL, INCREMENTAL) and (until is None or m.finished <= until)]
    fulls = [i for i, m in enumerate(data) if m.kind == FULL]
    if not fulls:
        raise ChainBroken("no full backup" + (f" finished by {until.isoformat()}" if until else "") +
                          ": run `bash scripts/backup full` first")
    out = [data[fulls[-1]]]
    for m in data[fulls[-1] + 1:]:
        if m.base != out[-1].name:
            raise ChainBroken(f"incremental {m.name} is based on {m.base}, not on {out[-1].name} before it")
        if m.from_lsn != out[-1].to_lsn:
            raise ChainBroken(f"incremental {m.name} begins at LSN {m.from_lsn}, its base {out[-1].name} "
                              f"ended at {out[-1].to_lsn}")
        out.append(m)
    return out


def binlog_index(name: str) -> int:
    """mariadb-bin.000042 -> 42 (the order a replay reads them in)."""
    return int(name.rsplit(".", 1)[1])


def binlogs_from(names: list[str], first: str) -> list[str]:
    """The binary logs a replay reads, starting at `first` (the chain's last
    position), in order; ChainBroken if one between is missing (a gap would
    replay later rows on top of missing ones)."""
    basename = first.rsplit(".", 1)[0]
    mine = sorted((n for n in names if n.rsplit(".", 1)[0] == basename and n.rsplit(".", 1)[1].isdigit()),
                  key=binlog_index)
    wanted = [n for n in mine if binlog_index(n) >= binlog_index(first)]
    if not wanted or wanted[0] != first:
        raise ChainBroken(f"the binary log {first} the last backup stopped in is not among the copied logs")
    for before, after in zip(wanted, wanted[1:]):
        if binlog_index(after) != binlog_index(before) + 1:
            raise ChainBroken(f"binary logs missing between {before} and {after}")
    return wanted
