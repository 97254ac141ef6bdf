"""One reconciliation run at a time, across processes and database nodes.

A lease is a row (RunLease) that a run takes with a conditional UPDATE: free,
expired, or already its own. The run renews it as it goes (`Lease.hold`) and
stops with LeaseLost if another process took it over, which happens only
after the lease expired, that is after the holder went LEASE_SECONDS without
renewing (a dead process, or one that could not reach the database that long).
Time is the database's clock (UTC_TIMESTAMP), so web and worker hosts whose
clocks differ agree on when a lease expires. Every statement is safe to send
twice: a retry after a COMMIT whose answer was lost finds the row already
holding this holder, and matches it again.
"""
from __future__ import annotations

import contextlib
import uuid
from contextlib import contextmanager

from django.db import connection

from core.retry import with_mysql_retry
from reconciliation.models import RunLease

LEASE_SECONDS = 60
RECONCILIATION = "reconciliation"


class ReconciliationBusy(Exception):
    """Another reconciliation run holds the lease."""


class LeaseLost(Exception):
    """The lease expired and another run took it: this run must stop."""


def _table() -> str:
    return connection.ops.quote_name(RunLease._meta.db_table)


def _execute(sql: str, params: list) -> int:
    def run() -> int:
        with connection.cursor() as cur:
            cur.execute(sql, params)
            return cur.rowcount
    return with_mysql_retry(run)


class Lease:
    def __init__(self, name: str, *, seconds: int = LEASE_SECONDS) -> None:
        self.name, self.seconds = name, seconds
        self.holder = uuid.uuid4().hex

    def take(self) -> bool:
        """True when this holder has the lease now (free, expired or its own)."""
        _execute(f"INSERT IGNORE INTO {_table()} (name, holder, expires_at) VALUES (%s, '', UTC_TIMESTAMP(6))",
                 [self.name])
        return _execute(
            f"UPDATE {_table()} SET holder = %s, expires_at = UTC_TIMESTAMP(6) + INTERVAL %s SECOND "
            f"WHERE name = %s AND (holder = '' OR holder = %s OR expires_at < UTC_TIMESTAMP(6))",
            [self.holder, self.seconds, self.name, self.holder]) == 1

    def hold(self) -> None:
        """Renew the lease, or raise LeaseLost when another holder has it."""
        if _execute(f"UPDATE {_table()} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL %s SECOND "
                    f"WHERE name = %s AND holder = %s", [self.seconds, self.name, self.holder]) != 1:
            raise LeaseLost(f"the {self.name} lease was taken over")

    def give_up(self) -> None:
        _execute(f"UPDATE {_table()} SET holder = '', expires_at = UTC_TIMESTAMP(6) WHERE name = %s AND holder = %s",
                 [self.name, self.holder])


@contextmanager
def run_lease(name: str = RECONCILIATION, *, seconds: int = LEASE_SECONDS):
    """The lease for the block's length, or ReconciliationBusy at once."""
    lease = Lease(name, seconds=seconds)
    if not lease.take():
        raise ReconciliationBusy(f"another {name} run is going on")
    try:
        yield lease
    finally:
        with contextlib.suppress(Exception):  # the database away: the lease expires on its own
            lease.give_up()
