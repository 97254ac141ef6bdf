"""The Celery app: broker settings come from Django settings (CELERY_ namespace)."""
import os

from amqp.exceptions import MessageNacked
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


class SeckillCelery(Celery):
    """Celery, with its pooled broker connections dropped after a refused publish.

    A channel that published to a quorum queue whose leader was lost goes on
    being refused (basic.nack) after the new leader took over, while a new
    channel is taken at once (RabbitMQ 3.10, seen on the local cluster: every
    publish on the kept channel refused for minutes, a fresh one accepted
    0.6 s after the kill). Celery keeps its producers' channels in kombu's
    pools for good, so beat's sweeps and the gives would be refused until the
    process restarts. After a refusal the pools are emptied; the publish still
    fails (the outbox sends a give again, beat sends its sweep next time)."""

    def send_task(self, *args, **kwargs):
        try:
            return super().send_task(*args, **kwargs)
        except Exception as exc:
            # kombu hands the refusal on as its OperationalError, caused by it
            if isinstance(exc, MessageNacked) or isinstance(exc.__cause__, MessageNacked):
                self.broker_pools_forget()
            raise

    def broker_pools_forget(self) -> None:
        from kombu import pools

        pools.reset()  # closes every pooled connection of the process (not the worker's consumer)
        self._pool = None
        self.amqp._producer_pool = None


app = SeckillCelery("seckill_site")
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
