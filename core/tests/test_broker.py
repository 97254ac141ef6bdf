"""core.broker: a ';'-separated CELERY_BROKER_URL is a list of nodes, and every
connection the project makes tries each of them. Against the real broker on
5672, with two ports nobody listens on in front of it."""
from __future__ import annotations

import socket

from django.test import override_settings

from core.broker import broker_connect, broker_connection, broker_host, broker_urls

LIVE = "amqp://guest:guest@127.0.0.1:5672//"


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: connections are refused


def test_the_urls_are_split_on_semicolons():
    assert broker_urls("amqp://a:5681//; amqp://b:5682//;") == ["amqp://a:5681//", "amqp://b:5682//"]
    assert broker_urls(LIVE) == [LIVE]


def test_connect_tries_every_node_until_one_answers():
    dead = [f"amqp://guest:guest@127.0.0.1:{dead_port()}//" for _ in range(2)]
    with override_settings(CELERY_BROKER_URL=";".join(dead + [LIVE])):
        for _ in range(4):  # whichever node it starts at
            with broker_connection(connect_timeout=1) as conn:
                # kombu's own connect() gives up after two of the three
                broker_connect(conn)
                assert broker_host(conn) == "127.0.0.1:5672"
                conn.default_channel.queue_declare("", exclusive=True)


def test_the_node_to_avoid_goes_last():
    urls = [f"amqp://guest:guest@127.0.0.1:{port}//" for port in (5681, 5682, 5683)]
    with override_settings(CELERY_BROKER_URL=";".join(urls)):
        for _ in range(10):
            conn = broker_connection(avoid="127.0.0.1:5682")
            assert conn.alt[-1] == urls[1] and sorted(conn.alt) == urls
        starts = {broker_connection().alt[0] for _ in range(60)}
        assert starts == set(urls)  # the processes of a tier spread over the nodes


def test_the_workers_task_consumer_sets_up_no_delayed_delivery():
    """Celery adds native delayed delivery by itself on quorum queues and then
    waits on every dead node of a broker list; no task here has an ETA."""
    from celery.utils.imports import symbol_by_name

    from seckill_site.celery import app

    consumer = symbol_by_name(app.conf.worker_consumer)
    steps = consumer.Blueprint.default_steps
    assert not [s for s in steps if "delayed_delivery" in s]
    assert "celery.worker.consumer.tasks:Tasks" in steps  # the rest of Celery's consumer stays


def test_a_refused_celery_publish_drops_the_pooled_channels_so_the_next_one_is_taken():
    """A channel refused once may be refused for good (a quorum queue's leader
    lost, RabbitMQ 3.10): after a refusal Celery's publishes use new ones."""
    import time
    import uuid

    import pytest
    from amqp.exceptions import MessageNacked
    from django.conf import settings
    from kombu.exceptions import OperationalError

    from seckill_site.celery import app
    from testsupport import wait_until
    from testsupport.stores import rabbitmqctl

    name = f"refuse-{uuid.uuid4().hex[:8]}"
    pattern = "^" + settings.CELERY_QUEUE.replace(".", r"\.") + "$"

    def policy(limit: int) -> None:
        rabbitmqctl("set_policy", "--apply-to", "queues", "--priority", "99", name, pattern,
                    f'{{"max-length": {limit}, "overflow": "reject-publish"}}')

    def send():
        try:
            return app.send_task("seckill.test.nothing", queue=settings.CELERY_QUEUE, retry=False)
        except OperationalError as exc:  # kombu's wrapping of the refusal
            if isinstance(exc.__cause__, MessageNacked):
                raise exc.__cause__ from None
            raise

    send()  # the queue exists
    policy(0)
    try:
        def refused() -> bool:
            try:
                send()
                return False
            except MessageNacked:
                return True

        wait_until(refused, timeout=30, what="the task queue refusing publishes")
        pool = app.pool
        with pytest.raises(MessageNacked):
            send()
        assert app.pool is not pool  # the pooled connections were dropped
        policy(1_000_000_000)  # cleared, a limit stays with a quorum queue on 3.10: one it never reaches
        deadline = time.monotonic() + 30
        while True:
            try:
                send()
                break
            except MessageNacked:
                assert time.monotonic() < deadline, "still refused"
                time.sleep(0.2)
    finally:
        policy(1_000_000_000)
        rabbitmqctl("clear_policy", name)
        rabbitmqctl("purge_queue", settings.CELERY_QUEUE)
