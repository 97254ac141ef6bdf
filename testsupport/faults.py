"""Faults landed on a running sale: a fault started mid-sale, a SKU row held locked from
another connection, a RabbitMQ restart (the fault itself lives in benchmarks.faults)."""
from __future__ import annotations

from collections.abc import Callable

from testsupport import wait_until
from testsupport.http import sell


def sell_during(fault: Callable[[], None], web_port: int, tokens: list[str], sku_id: str, n_threads: int = 24,
                after_taken: int = 10):
    """Run a sale and land `fault` in it: the fault starts once the gate has
    taken `after_taken` units, and the test fails if the sale was already over
    by then (the fault must land mid-sale)."""
    import threading

    from inventory.redis import live as redis_live

    selling = threading.Event()
    started_mid_sale: list[bool] = []
    start = (redis_live.live_stock(sku_id=sku_id) or redis_live.LiveStock(0, 0, 0, 0, 0)).available

    def land() -> None:
        def under_way() -> bool:
            live = redis_live.live_stock(sku_id=sku_id)
            return live is not None and start - live.available >= after_taken

        wait_until(under_way, timeout=30, interval=0.01, what="the sale under way")
        started_mid_sale.append(selling.is_set())
        fault()

    t = threading.Thread(target=land)
    selling.set()
    t.start()
    try:
        results = sell(web_port, tokens, sku_id, n_threads=n_threads)
    finally:
        selling.clear()
        t.join()
    assert started_mid_sale == [True], "the fault did not land during the sale"
    return results


class RowHold:
    """Hold a SKU's row lock from another connection, so the confirm consumer
    blocks in MySQL with its batch unacknowledged (a fault can then land on a
    consumer that really holds messages)."""

    def __init__(self, sku_id: str):
        import threading

        self.sku_id = sku_id
        self.held, self.release = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self):
        from django.db import connection, transaction

        from inventory.models import Sku

        try:
            with transaction.atomic():
                Sku.objects.select_for_update().get(pk=self.sku_id)
                self.held.set()
                self.release.wait(60)
        finally:
            connection.close()

    def __enter__(self):
        self.thread.start()
        assert self.held.wait(10), "could not lock the SKU row"
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.thread.join(30)


def rabbitmq_restart() -> None:
    from benchmarks.faults import rabbitmq_restart as restart

    restart()


class AnswersLost:
    """The server does the work and the client never hears of it: after a
    statement whose SQL contains `statement` ran (in autocommit: committed), or
    after a COMMIT when `commits`, this thread's connection is closed and the
    caller gets `code` (2013, lost connection) instead of the answer, `times`
    times. What a writer meets when its node dies mid-COMMIT or the database
    front moves to another node. `.lost` counts the answers it took away."""

    def __init__(self, *, statement: str | None = None, commits: bool = False, times: int = 1,
                 code: int = 2013) -> None:
        import threading

        self.statement, self.commits, self.left, self.code = statement, commits, times, code
        self.lost = 0
        self._thread = threading.get_ident()

    def _take(self) -> bool:
        import threading

        if self.left <= 0 or threading.get_ident() != self._thread:
            return False
        self.left -= 1
        self.lost += 1
        return True

    def _fail(self, conn):
        from django.db import OperationalError

        conn.close()
        return OperationalError(self.code, "Lost connection to server during query (a test's fault)")

    def __enter__(self):
        import contextlib
        from unittest import mock

        from django.db import connection, connections

        self._stack = contextlib.ExitStack()
        if self.statement is not None:
            def wrapper(execute, sql, params, many, context):
                result = execute(sql, params, many, context)
                if self.statement in sql and connection.get_autocommit() and self._take():
                    raise self._fail(context["connection"])
                return result
            self._stack.enter_context(connection.execute_wrapper(wrapper))
        if self.commits:
            backend = type(connections["default"])
            real = backend._commit

            def commit(conn):
                real(conn)
                if self._take():
                    raise self._fail(conn)
            self._stack.enter_context(mock.patch.object(backend, "_commit", commit))
        return self

    def __exit__(self, *exc):
        self._stack.close()
