"""The chain a restore prepares and the binary logs it replays, from manifests alone."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from backups import manifest as m

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def made(i: int, kind: str, *, base: str | None = None, lsn: tuple[int, int] = (0, 0), at: int = 0) -> m.Manifest:
    when = (T0 + timedelta(minutes=at or i)).isoformat()
    return m.Manifest(name=f"{i:02d}-{kind}", kind=kind, started_at=when, finished_at=when, server="x:1", base=base,
                      from_lsn=lsn[0], to_lsn=lsn[1], binlog_file=f"mariadb-bin.{i:06d}", binlog_pos=100 + i)


def test_the_chain_is_the_last_full_and_the_incrementals_on_it():
    found = [made(1, m.FULL, lsn=(0, 10)), made(2, m.INCREMENTAL, base="01-full", lsn=(10, 20)),
             made(3, m.LOGS), made(4, m.FULL, lsn=(0, 30)), made(5, m.INCREMENTAL, base="04-full", lsn=(30, 40)),
             made(6, m.INCREMENTAL, base="05-incremental", lsn=(40, 50))]
    assert [x.name for x in m.chain(found)] == ["04-full", "05-incremental", "06-incremental"]


def test_until_takes_the_chain_finished_by_then():
    found = [made(1, m.FULL, lsn=(0, 10)), made(2, m.INCREMENTAL, base="01-full", lsn=(10, 20)),
             made(4, m.FULL, lsn=(0, 30)), made(5, m.INCREMENTAL, base="04-full", lsn=(30, 40))]
    assert [x.name for x in m.chain(found, until=T0 + timedelta(minutes=3))] == ["01-full", "02-incremental"]
    assert [x.name for x in m.chain(found, until=T0 + timedelta(minutes=4))] == ["04-full"]
    with pytest.raises(m.ChainBroken, match="no full backup"):
        m.chain(found, until=T0)


def test_a_broken_chain_is_refused():
    wrong_base = [made(1, m.FULL, lsn=(0, 10)), made(2, m.INCREMENTAL, base="00-full", lsn=(10, 20))]
    with pytest.raises(m.ChainBroken, match="based on 00-full"):
        m.chain(wrong_base)
    gap = [made(1, m.FULL, lsn=(0, 10)), made(2, m.INCREMENTAL, base="01-full", lsn=(12, 20))]
    with pytest.raises(m.ChainBroken, match="begins at LSN 12"):
        m.chain(gap)
    with pytest.raises(m.ChainBroken, match="no full backup"):
        m.chain([made(1, m.LOGS)])


def test_the_logs_replayed_start_at_the_chain_and_have_no_gap():
    names = ["mariadb-bin.000003", "mariadb-bin.000001", "mariadb-bin.000002", "mariadb-bin.000010", "other.000002"]
    assert m.binlogs_from(names[:3], "mariadb-bin.000002") == ["mariadb-bin.000002", "mariadb-bin.000003"]
    with pytest.raises(m.ChainBroken, match="missing between mariadb-bin.000003 and mariadb-bin.000010"):
        m.binlogs_from(names, "mariadb-bin.000002")
    with pytest.raises(m.ChainBroken, match="not among the copied logs"):
        m.binlogs_from(["mariadb-bin.000003"], "mariadb-bin.000002")


def test_a_manifest_reads_back_as_written(tmp_path):
    one = made(1, m.INCREMENTAL, base="00-full", lsn=(5, 9))
    one.write(tmp_path)
    assert m.Manifest.read(tmp_path) == one
    assert m.manifests(tmp_path.parent / "nowhere") == []
