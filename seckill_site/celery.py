"""The Celery app: broker settings come from Django settings (CELERY_ namespace)."""
import os

from celery import Celery
from celery.signals import worker_init
from celery.worker.consumer import Consumer as CeleryConsumer

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "seckill_site.settings.local")



class TaskConsumer(CeleryConsumer):
    """Celery's task consumer without native delayed delivery.

    Celery turns that step on by itself when it sees quorum queues, and then
    declares its exchanges on every URL of a broker list in turn, retrying a
    dead node for about 17 s before it gives up (seen here after a node kill:
    gives and sweeps started that much late). No task of the project has an
    ETA or a countdown, so the step has nothing to do here
    (CELERY_WORKER_CONSUMER names this class)."""

    class Blueprint(CeleryConsumer.Blueprint):
        default_steps = [step for step in CeleryConsumer.Blueprint.default_steps
                         if not step.endswith(":DelayedDelivery")]


app = Celery("seckill_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# The confirm consumer and the bucket mover run inside every worker, beside
# Celery's own consumer.
app.steps["worker"].add("orders.consumers:ConfirmConsumerStep")
app.steps["worker"].add("orders.movers:BucketMoverStep")


@worker_init.connect
def _declare_dead_letter_queue(**_kwargs) -> None:
    """The dead-letter queue must exist before the first message is rejected."""
    from django.conf import settings

    with app.connection_for_write() as conn:
        settings.CELERY_DEAD_LETTER(conn.default_channel).declare()
