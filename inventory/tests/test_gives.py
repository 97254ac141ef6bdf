"""Gives reach Redis once, even across a snapshot rebuilt from MySQL; dead letters are kept."""
from __future__ import annotations

import json
import subprocess

from django.conf import settings

from conftest import wait_until
from inventory import redis_store, services
from inventory.models import DeadLetter, OutboxMessage


def test_snapshot_counts_its_gives_so_a_late_redelivery_adds_nothing(make_sku, live_db):
    sku = make_sku(stock=4)
    services.stock_restock(sku_id=sku.sku_id, quantity=3, reason="more", actor="t")
    payload = OutboxMessage.objects.get(sku_id=sku.sku_id, op_id__startswith="restock:").payload
    keys = redis_store.sku_keys(sku.sku_id)
    redis_store.redis().delete(keys.stock, keys.buyers, keys.idem, keys.applied)  # Redis lost the SKU
    assert services.stock_warm(sku_id=sku.sku_id)
    assert redis_store.live_stock(sku_id=sku.sku_id).available == 7  # MySQL already counts the restock
    outcome = services.stock_give_apply(sku_id=sku.sku_id, op_id=payload["op_id"], quantity=3, user_id=None,
                                        total_delta=3)
    assert outcome == redis_store.GIVE_ALREADY
    assert redis_store.live_stock(sku_id=sku.sku_id).available == 7


def test_confirm_queue_has_a_delivery_limit_and_dead_letters_reach_the_table(live_db):
    from seckill_site.celery import app

    listed = subprocess.run(["rabbitmqctl", "list_queues", "-q", "--formatter", "json", "name", "arguments"],
                            capture_output=True, text=True, check=True, timeout=60).stdout
    # arguments come as [name, type, value] triples
    queues = {q["name"]: {a[0]: a[-1] for a in q["arguments"]} for q in json.loads(listed)}
    args = queues[settings.CELERY_QUEUE]
    assert args["x-queue-type"] == "quorum" and args["x-delivery-limit"] == settings.CELERY_DELIVERY_LIMIT
    assert args["x-dead-letter-exchange"] == settings.CELERY_QUEUE + ".dlx"

    # what RabbitMQ hands to the dead-letter exchange ends in the DeadLetter table
    with app.connection_for_write() as conn:
        producer = conn.Producer()
        dead = settings.CELERY_DEAD_LETTER
        producer.publish({"poison": True}, exchange=dead.exchange, routing_key=dead.routing_key,
                         declare=[dead], headers={"task": "inventory.tasks.confirm_reservation_task"},
                         serializer="json")
    before = DeadLetter.objects.count()
    wait_until(lambda: services.dead_letters_collect() or DeadLetter.objects.count() > before,
               what="dead letter collected")
    letter = DeadLetter.objects.latest("created_at")
    assert letter.task_name == "inventory.tasks.confirm_reservation_task"
    assert letter.payload["body"] == {"poison": True}
