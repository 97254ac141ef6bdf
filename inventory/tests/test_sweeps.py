"""A sweep task is its service call (inventory.sweeps): registered under the
name it is given, recorded as run when the call returns, not when it raises
unless it asks to be. Real Redis."""
from __future__ import annotations

import pytest
from celery import current_app

from core.redis.connection import redis
from inventory.redis import liveness
from inventory.redis.keys import SWEEPS_KEY
from inventory.sweeps import sweep_task

NAMES = ("tests.sweeps.returns", "tests.sweeps.raises", "tests.sweeps.raises_recorded")


@pytest.fixture
def no_records():
    """Only this test's own records: the real sweeps' stay as they are."""
    redis().hdel(SWEEPS_KEY, *NAMES)
    yield
    redis().hdel(SWEEPS_KEY, *NAMES)


def test_a_sweep_is_the_task_of_its_name_and_is_recorded_when_it_returns(no_records):
    @sweep_task("tests.sweeps.returns", expires=30)
    def returns() -> int:
        """Beat: a sweep."""
        return 7

    task = current_app.tasks["tests.sweeps.returns"]  # what a worker runs when beat sends the name
    assert task.name == "tests.sweeps.returns" and task.expires == 30
    assert returns.__doc__ == "Beat: a sweep."
    assert "tests.sweeps.returns" not in liveness.sweeps_last_run()
    assert task() == 7
    assert "tests.sweeps.returns" in liveness.sweeps_last_run()


def test_a_sweep_that_raises_is_not_recorded_unless_it_asks(no_records):
    @sweep_task("tests.sweeps.raises")
    def raises() -> int:
        raise RuntimeError("MySQL away")

    @sweep_task("tests.sweeps.raises_recorded", record_raised=True)
    def raises_recorded() -> int:
        raise RuntimeError("MySQL away")

    for sweep in (raises, raises_recorded):
        with pytest.raises(RuntimeError):
            sweep()
    assert set(liveness.sweeps_last_run()) & set(NAMES) == {"tests.sweeps.raises_recorded"}
