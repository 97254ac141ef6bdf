"""Celery's internals the project's Celery app relies on (seckill_site/celery.py).

What it uses that Celery does not document, read against celery 5.6.3 with
kombu 5.7.0 (celery/app/base.py, celery/app/amqp.py,
celery/worker/consumer/consumer.py):

- the task consumer's step list, `Consumer.Blueprint.default_steps`, and the
  name of the step it drops, `celery.worker.consumer.delayed_delivery:DelayedDelivery`;
- the app's cached pools, `Celery._pool` (what `app.pool` returns) and
  `app.amqp._producer_pool` (what `app.producer_pool` returns): kombu's pools
  keyed by connection, which Celery fills once and keeps for the process's
  life (Celery's own `_after_fork` clears the same two);
- kombu handing a publish the broker refused (py-amqp's `MessageNacked`) on as
  its OperationalError, caused by it.
"""
from __future__ import annotations

from core.adapters import require

WRITTEN_FOR = {"celery": ("5.6.3",), "kombu": ("5.7.0",)}
require(WRITTEN_FOR, __file__)  # before Celery's modules: a version without them fails here, by name

from amqp.exceptions import MessageNacked
from celery.worker.consumer import Consumer
from kombu import pools

DELAYED_DELIVERY_STEP = "celery.worker.consumer.delayed_delivery:DelayedDelivery"


def _steps_without_delayed_delivery() -> list[str]:
    steps = list(Consumer.Blueprint.default_steps)
    if DELAYED_DELIVERY_STEP not in steps:
        # renamed or gone: the filter would keep the step without a word
        raise RuntimeError(f"Celery's task consumer has no step {DELAYED_DELIVERY_STEP} "
                           f"(seckill_site/adapters/celery.py was written for its step list): {steps}")
    return [step for step in steps if step != DELAYED_DELIVERY_STEP]


class TaskConsumer(Consumer):
    """Celery's task consumer without native delayed delivery.

    Celery turns that step on by itself when it sees quorum queues, and then
    declares its exchanges on every URL of a broker list in turn, retrying a
    dead node before the consumer starts. No task of the project has an ETA
    or a countdown, so the step has nothing to do here."""

    class Blueprint(Consumer.Blueprint):
        default_steps = _steps_without_delayed_delivery()


def is_refused_publish(exc: BaseException) -> bool:
    """The broker refused the publish (basic.nack), raised as it is or as kombu wraps it."""
    return isinstance(exc, MessageNacked) or isinstance(exc.__cause__, MessageNacked)


def broker_pools_forget(app) -> None:
    """Close every pooled broker connection of the process and make `app` take
    new ones at its next publish (the worker's own consumer is not pooled)."""
    pools.reset()
    app._pool = None
    app.amqp._producer_pool = None
