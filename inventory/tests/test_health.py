"""inventory.health: when a sweep counts as late (the figures themselves over
GET /api/v1/health: test_api.py; beat's records: core/tests/test_beat.py)."""
from inventory import health


def test_a_sweep_is_late_after_three_intervals_from_when_it_is_measured():
    every, now = 10_000, 1_000_000
    slack = health.BEAT_SLACK_MS
    # Measured from its last run, when it ran since beat began holding it.
    assert not health.sweep_late(now_ms=now, every_ms=every, ran=now - 3 * every - slack, held=0, started=0)
    assert health.sweep_late(now_ms=now, every_ms=every, ran=now - 3 * every - slack - 1, held=0, started=0)
    # A run from before beat held it again does not count: measured from the hold
    # (or the start of beat, whichever is later).
    held = now - every
    assert not health.sweep_late(now_ms=now, every_ms=every, ran=held - 1, held=held, started=0)
    assert health.sweep_late(now_ms=now, every_ms=every, ran=0, held=1, started=now - 4 * every - slack)
    assert not health.sweep_late(now_ms=now, every_ms=every, ran=None, held=None, started=now - every)
    # No record at all: nothing shows beat alive.
    assert health.sweep_late(now_ms=now, every_ms=every, ran=None, held=None, started=None)
