"""Celery over RabbitMQ: the queues, their arguments, and how tasks travel.
Part of every settings module (imported at the end of base)."""
from __future__ import annotations

import os

from kombu import Exchange, Queue

from .env import env_bool, env_int

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
# A broker cluster is its nodes' URLs joined by ';' (bash scripts/cluster up
# prints them): Celery hands the list to kombu, which moves to the next node on a
# connection error, round-robin (named here: Celery passes its own None along,
# and some kombu versions then never failed over). The project's own connections
# come from core.broker, which tries every node on each connect.
CELERY_BROKER_FAILOVER_STRATEGY = "round-robin"
# The worker retries its connection this many times before it gives up, one
# node per retry and a pause after each round of them: per node, so that a
# cluster is waited out about as long as a single broker is by Celery's default (100).
CELERY_BROKER_CONNECTION_MAX_RETRIES = 100 * max(1, len([u for u in CELERY_BROKER_URL.split(";") if u.strip()]))
# A node whose host vanishes closes no socket: the heartbeat is what notices it.
# Celery's default of 120 s (two missed beats: up to 4 minutes) would leave a
# worker's task consumer and beat on a dead node that long; a killed process on
# a live host is noticed at once either way.
CELERY_BROKER_HEARTBEAT = env_int("SECKILL_BROKER_HEARTBEAT", 30)
CELERY_QUEUE = os.environ.get("SECKILL_QUEUE", "seckill")
CELERY_DEAD_LETTER_QUEUE = CELERY_QUEUE + ".dead"
# Queue arguments can never change once a queue exists (RabbitMQ refuses the
# declaration), so the task queue keeps the limit it was created with.
CELERY_DELIVERY_LIMIT = env_int("SECKILL_DELIVERY_LIMIT", 5)
SECKILL_CONFIRM_QUEUE = CELERY_QUEUE + ".confirm"
# The confirm stream in partitions by SKU (inventory.messages.queues.partition_of):
# partition 0 is SECKILL_CONFIRM_QUEUE itself, so 1 (the default) is that one
# queue and going to N keeps what is in it; partition k>0 is
# "<SECKILL_CONFIRM_QUEUE>.<k>". Each worker consumes every partition (one
# thread and connection each); each queue has one active consumer.
SECKILL_CONFIRM_PARTITIONS = max(1, env_int("SECKILL_CONFIRM_PARTITIONS", 1))
# Which partitions this worker prefers to be the active consumer of: worker i
# (1-based) of SECKILL_WORKERS prefers the partitions k with k % n == i - 1, so
# n workers numbered 1..n split the active partitions between them
# (inventory.messages.queues.preferred_partitions; docs/architecture.md, "The
# confirm stream in partitions"). 0 (the default): no preference, every
# partition alike, the first worker to register is active on all.
SECKILL_WORKER_INDEX = max(0, env_int("SECKILL_WORKER_INDEX", 0))
SECKILL_WORKERS = max(1, env_int("SECKILL_WORKERS", 1))
# The bulk confirm consumer holds many messages at once; each worker crash
# counts a delivery for every one of them, so its limit leaves room for a few.
SECKILL_CONFIRM_DELIVERY_LIMIT = env_int("SECKILL_CONFIRM_DELIVERY_LIMIT", 20)
_dead_letter_exchange = Exchange(CELERY_QUEUE + ".dlx", type="direct", durable=True)
CELERY_TASK_QUEUES = [
    Queue(
        CELERY_QUEUE,
        Exchange(CELERY_QUEUE, type="direct", durable=True),
        routing_key=CELERY_QUEUE,
        durable=True,
        queue_arguments={
            # Quorum queues count deliveries; past the limit RabbitMQ hands the
            # message to the dead-letter exchange instead of looping forever.
            "x-queue-type": "quorum",
            "x-delivery-limit": CELERY_DELIVERY_LIMIT,
            "x-dead-letter-exchange": _dead_letter_exchange.name,
            "x-dead-letter-routing-key": CELERY_DEAD_LETTER_QUEUE,
        },
    ),
]
CELERY_DEAD_LETTER = Queue(
    CELERY_DEAD_LETTER_QUEUE,
    _dead_letter_exchange,
    routing_key=CELERY_DEAD_LETTER_QUEUE,
    durable=True,
    queue_arguments={"x-queue-type": "quorum"},
)
CELERY_TASK_DEFAULT_QUEUE = CELERY_QUEUE
CELERY_TASK_DEFAULT_EXCHANGE = CELERY_QUEUE
CELERY_TASK_DEFAULT_ROUTING_KEY = CELERY_QUEUE
CELERY_TASK_DEFAULT_DELIVERY_MODE = "persistent"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# A task that raised is rejected without requeue, i.e. dead-lettered, not acked.
CELERY_TASK_ACKS_ON_FAILURE_OR_TIMEOUT = False
# Celery's own consumer carries gives and sweeps only (confirms have their own
# consumer): a small prefetch.
CELERY_WORKER_PREFETCH_MULTIPLIER = env_int("SECKILL_WORKER_PREFETCH", 4)
# Threads, not prefork: a task is a few Redis and MySQL round trips, and
# prefork's per-task hand-off to a child process costs more CPU than the task.
CELERY_WORKER_POOL = os.environ.get("SECKILL_WORKER_POOL", "threads")
# Cancelling the tasks that run when the broker connection drops needs a pool
# that can kill a job: the threads pool cannot, and Celery then ends the whole
# worker ("does not implement kill_job", celery/celery#7185 and #10490). With
# threads a running task finishes, its ack is lost with the channel, the broker
# delivers it again, and every task is idempotent.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = CELERY_WORKER_POOL == "prefork"
CELERY_WORKER_CONCURRENCY = env_int("SECKILL_WORKER_CONCURRENCY", 4)
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Every publisher waits for RabbitMQ's confirm, the purchase path included, so
# an accepted reservation lives in two places before its 202
# (docs/architecture.md, "Messages").
# SECKILL_WEB_PUBLISH_CONFIRM=0 skips it on the purchase path (a measurement
# only: the in-flight record in Redis is then the only copy for a moment).
CELERY_BROKER_TRANSPORT_OPTIONS = {"confirm_publish": True}
SECKILL_WEB_PUBLISH_CONFIRM = env_bool("SECKILL_WEB_PUBLISH_CONFIRM", True)
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_PUBLISH_RETRY = True
# Celery's own publishes (the gives an ops move sends once it commits) give up
# after three quick tries instead of holding the caller: the outbox row written
# with the move is sent again by the relay. The purchase path does not publish
# through Celery (inventory.messages.group_publisher, within
# SECKILL_PUBLISH_BUDGET_MS).
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.3,
}
CELERY_BEAT_SCHEDULER = "seckill_site.beat:DatabaseScheduler"
CELERY_TIMEZONE = os.environ.get("TIME_ZONE", "UTC")
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Celery's task consumer without its native delayed delivery (no task here has
# an ETA; the step stalls a worker's start on a dead node of a broker cluster).
CELERY_WORKER_CONSUMER = "seckill_site.celery:TaskConsumer"
