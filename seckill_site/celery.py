"""The Celery app: broker settings come from Django settings (CELERY_ namespace)."""
import os

from celery import Celery
from celery.signals import worker_init

from seckill_site.adapters import celery as celery_adapter

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "seckill_site.settings.local")

# The worker's task consumer (CELERY_WORKER_CONSUMER names it): Celery's,
# without native delayed delivery, which stalls a start on a dead node of a
# broker list and which no task here needs (none has an ETA or a countdown).
TaskConsumer = celery_adapter.TaskConsumer


class SeckillCelery(Celery):
    """Celery, with its pooled broker connections dropped after a refused publish.

    A channel that published to a quorum queue whose leader was lost can stay
    refused (basic.nack) after the new leader took over, while a new channel
    is taken at once (docs/architecture.md, "On a RabbitMQ cluster"). Celery
    keeps its producers' channels in kombu's pools for the process's life, so
    beat's sweeps and the gives would be refused until a restart. After a
    refusal the pools are emptied; the publish still fails (the outbox sends a
    give again, beat sends its sweep next time)."""

    def send_task(self, *args, **kwargs):
        try:
            return super().send_task(*args, **kwargs)
        except Exception as exc:
            if celery_adapter.is_refused_publish(exc):
                celery_adapter.broker_pools_forget(self)
            raise


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
