"""The Celery app: broker settings come from Django settings (CELERY_ namespace)."""
import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "seckill_site.settings.local")

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
