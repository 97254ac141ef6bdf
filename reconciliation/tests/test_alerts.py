"""Alerts reach ops once per finding or dead letter: by mail to ADMINS and by
the webhook, never twice, even with two senders at once; a dead webhook is
logged, never raised."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.core import mail

from core.redis.connection import redis
from inventory.messages import names
from inventory.redis import keys as redis_keys
from inventory.services.dead_letters import dead_letter_record
from reconciliation import alerts
from reconciliation.models import Alert, Finding
from reconciliation.services import reconciliation_run


class Hook:
    """A tiny webhook receiver on 127.0.0.1 that records the JSON it is sent."""

    def __init__(self) -> None:
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's name
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/alert"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def channels(settings, live_db):
    hook = Hook()
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.ADMINS = [("Ops", "ops@example.com")]
    settings.SECKILL_ALERT_WEBHOOK = hook.url
    alerts.alerts_send()  # what earlier tests left un-alerted is not this test's news
    mail.outbox = []
    hook.received.clear()
    yield hook
    hook.close()


def drift_below(sku_id: str, units: int) -> None:
    redis().hincrby(redis_keys.sku_keys(sku_id).stock, "available", -units)


def run(sku_id: str):
    return reconciliation_run(trigger="command", observe_gap_s=0.05, sku_ids=[sku_id])


def test_a_drift_alert_is_sent_once_by_mail_and_webhook(make_sku, channels):
    sku = make_sku(stock=10)
    drift_below(sku.sku_id, 2)
    first = run(sku.sku_id)
    finding = first.findings.get(kind=Finding.Kind.DRIFT_ALERT)
    assert len(mail.outbox) == 1 and "finding" in mail.outbox[0].subject
    assert mail.outbox[0].to == ["ops@example.com"]
    assert [p["findings"][0]["id"] for p in channels.received] == [finding.pk]

    # Sending again (the sweep, another run's hook) finds it claimed.
    alerts.alerts_send()
    alerts.alerts_send(run_id=first.pk)
    assert len(mail.outbox) == 1 and len(channels.received) == 1
    assert Alert.objects.get(finding=finding).outcome == "mail sent; webhook 204"

    # The drift persists: the next run raises it (a stable drift), one more alert for that new finding.
    second = run(sku.sku_id)
    raised = second.findings.get(kind=Finding.Kind.DRIFT_RAISED)
    assert len(mail.outbox) == 2 and channels.received[1]["findings"][0]["id"] == raised.pk
    alerts.alerts_send()
    assert len(mail.outbox) == 2 and len(channels.received) == 2


def test_a_new_dead_letter_is_alerted_once_by_the_sweep(channels, live_db):
    letter = dead_letter_record(task_name=names.CONFIRM_KIND, payload={"body": "x"}, reason="refused: junk")
    alerts.alerts_send()
    alerts.alerts_send()
    assert len(mail.outbox) == 1 and f"#{letter.pk}" in mail.outbox[0].body
    assert len(channels.received) == 1
    assert [d["id"] for d in channels.received[0]["dead_letters"]] == [letter.pk]


def test_two_senders_at_once_send_once(channels, live_db):
    letters = [dead_letter_record(task_name=names.CONFIRM_KIND, payload={"body": str(i)}, reason="refused")
               for i in range(5)]
    barrier = threading.Barrier(4)
    from django.db import connection

    def sweep():
        barrier.wait()
        try:
            alerts.alerts_send()
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    alerted = [d["id"] for payload in channels.received for d in payload["dead_letters"]]
    assert sorted(alerted) == sorted(d.pk for d in letters)  # each exactly once
    assert sum(len(m.body.splitlines()) for m in mail.outbox) == len(letters)


def test_a_dead_webhook_is_logged_not_raised(settings, channels, live_db, caplog):
    settings.SECKILL_ALERT_WEBHOOK = "http://127.0.0.1:9/nothing-listens"
    letter = dead_letter_record(task_name=names.CONFIRM_KIND, payload={"body": "x"}, reason="refused")
    assert alerts.alerts_send() == {"findings": 0, "dead_letters": 1}
    assert len(mail.outbox) == 1
    outcome = Alert.objects.get(dead_letter=letter).outcome
    assert outcome.startswith("mail sent; webhook failed")
    assert "not reached" in caplog.text
    alerts.alerts_send()  # at most once: a failed webhook is not retried
    assert len(mail.outbox) == 1


class FailingHook:
    """A webhook receiver that answers every POST with 500."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's name
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(500)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


SECRET_PARTS = ("hook-user", "hunter2pass", "T0SECRET", "B0SECRET", "xoxSECRET", "q5ecret")


@pytest.mark.parametrize("how", ["refused", "http-500", "bad-scheme"])
def test_a_failed_webhook_logs_neither_its_path_nor_its_credentials(settings, channels, live_db, caplog, how):
    failing = FailingHook()
    secret = "/services/T0SECRET/B0SECRET/xoxSECRET?token=q5ecret"
    settings.SECKILL_ALERT_WEBHOOK = {
        "refused": f"http://hook-user:hunter2pass@127.0.0.1:9{secret}",
        "http-500": f"http://127.0.0.1:{failing.port}{secret}",  # urllib cannot send userinfo
        "bad-scheme": f"hxxp://hook-user:hunter2pass@127.0.0.1{secret}",
    }[how]
    try:
        letter = dead_letter_record(task_name=names.CONFIRM_KIND, payload={"body": "x"}, reason="refused")
        with caplog.at_level("INFO"):
            alerts.alerts_send()
    finally:
        failing.close()
    outcome = Alert.objects.get(dead_letter=letter).outcome
    assert "webhook failed" in outcome
    [line] = [r.getMessage() for r in caplog.records if "alert webhook" in r.getMessage()]
    assert "not reached" in line and "127.0.0.1" in line  # which endpoint failed: its host
    if how == "http-500":
        assert "HTTP 500" in line
    for part in SECRET_PARTS:
        assert part not in caplog.text and part not in outcome, (part, line)


def test_urls_are_redacted_to_scheme_host_and_port():
    from core.reporting import credentials_hidden, url_redacted

    assert url_redacted("https://u:p@hooks.example.com:8443/a/b?c=d#e") == "https://hooks.example.com:8443/…"
    assert url_redacted("https://hooks.example.com") == "https://hooks.example.com"
    assert url_redacted("not a url") == "<unparsable URL>"
    assert credentials_hidden("amqp://seckill:pw@mq:5672// and redis://:pw2@cache:6379/0") == (
        "amqp://***@mq:5672// and redis://***@cache:6379/0")
