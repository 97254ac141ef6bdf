"""The bounded backlog's gate (core.admission), in one process: who runs, who
waits and for how long, who is refused at once."""
from __future__ import annotations

import threading
import time

import pytest

from core import admission


def test_slots_run_the_queue_waits_and_the_rest_is_refused_at_once():
    gate = admission.Gate(slots=2, queue=1, wait_s=5)
    assert gate.enter() and gate.enter()
    entered = threading.Event()
    waiter = threading.Thread(target=lambda: gate.enter() and entered.set())
    waiter.start()
    time.sleep(0.1)
    assert gate.waiting == 1 and not entered.is_set()
    started = time.monotonic()
    assert gate.enter() is False  # the queue is full: no wait at all
    assert time.monotonic() - started < 0.05
    gate.leave()
    waiter.join(timeout=5)
    assert entered.is_set() and gate.busy == 2 and gate.refused == 1


def test_a_waiter_gives_up_after_the_wait():
    gate = admission.Gate(slots=1, queue=4, wait_s=0.2)
    assert gate.enter()
    started = time.monotonic()
    assert gate.enter() is False
    assert 0.15 <= time.monotonic() - started < 1.0
    assert gate.waiting == 0 and gate.refused == 1


def test_an_idle_stretch_lends_the_slot_and_takes_it_back():
    gate = admission.Gate(slots=1, queue=0, wait_s=0)
    assert gate.enter()
    admission.held(gate)
    try:
        with admission.idle():
            assert gate.enter()  # another request runs in the lent slot
            gate.leave()
        assert gate.busy == 1
        assert gate.enter() is False  # taken back: full again
    finally:
        admission.held(None)
    with admission.idle():  # outside a gated request: nothing to lend
        assert gate.busy == 1


def test_the_refusal_is_the_contracts_503():
    seen = {}

    def start_response(status, headers):
        seen.update(status=status, headers=dict(headers))

    body = b"".join(admission.refuse(start_response))
    assert seen["status"].startswith("503 ")
    assert seen["headers"]["Content-Type"] == "application/json" and seen["headers"]["Retry-After"] == "1"
    assert int(seen["headers"]["Content-Length"]) == len(body)
    import json

    assert json.loads(body)["code"] == "unavailable"


@pytest.mark.parametrize("bad", [{"slots": 0, "queue": 1, "wait_s": 1}, {"slots": 1, "queue": -1, "wait_s": 1}])
def test_nonsense_settings_are_refused(bad):
    with pytest.raises(ValueError, match="slots >= 1"):
        admission.Gate(**bad)
