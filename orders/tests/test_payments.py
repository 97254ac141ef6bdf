"""Payments from the provider (orders.services.payments, orders.api.webhook):
the signed capture callback pays an order once, a capture that cannot pay is
recorded once as a refund to make and moves no unit, and ops close refunds in
the admin. Real MariaDB, Redis, RabbitMQ and a real worker confirming orders."""
from __future__ import annotations

import http.client
import json
import re
import threading
import time
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.utils import timezone

from core.errors import BadSignature, NotCancellable
from inventory.models import Sku
from inventory.redis import live as redis_live
from orders.models import Order, PaymentRefund
from orders.services import life, payments
from testsupport.factories import unique
from testsupport.payments import PRICE, SECRET, URL, capture, hook, sign
from testsupport.processes import start_web
from testsupport.stores import assert_balanced, gives_applied, moves_applied, settled

pytestmark = [pytest.mark.worker, pytest.mark.mariadb_both]

def buckets(sku_id: str) -> tuple[int, int, int, int, int]:
    sku = Sku.objects.get(pk=sku_id)
    return sku.total_stock, sku.available_stock, sku.frozen_stock, sku.locked_stock, sku.sold_stock


def pay_now(order_id: str, payment_id: str) -> payments.Capture:
    """The capture service called directly, for what one unit at PRICE costs."""
    return payments.payment_capture(order_id=order_id, payment_id=payment_id, amount=PRICE, currency="CNY")


def pid() -> str:
    return f"pay_{uuid.uuid4().hex}"


# --- the signature -------------------------------------------------------------------------

def test_signature_is_an_hmac_of_the_timestamp_and_the_raw_body():
    raw = b'{"order_id":"x","payment_id":"p","status":"captured"}'
    now = int(time.time())
    assert payments.signature_make(secret=SECRET, timestamp=now, body=raw) == sign(raw, t=now)
    payments.signature_verify(secret=SECRET, header=sign(raw, t=now), body=raw)
    # a provider rotating its secret sends two v1 values: one matching is enough
    old, new = sign(raw, secret="old-" + SECRET, t=now), sign(raw, t=now)
    payments.signature_verify(secret=SECRET, header=f"{old},{new.split(',')[1]}", body=raw)
    for header in (sign(raw + b" ", t=now), sign(raw, secret="other", t=now), sign(raw, t=now - 301),
                   sign(raw, t=now + 301), None, "", "t=,v1=", f"t={now}", sign(raw, t=now).split(",")[1],
                   f"t={now},v1=zz", f"t=1e9,v1={'0' * 64}", f"{sign(raw, t=now)},t={now}"):
        with pytest.raises(BadSignature):
            payments.signature_verify(secret=SECRET, header=header, body=raw)


def test_a_wrong_missing_old_or_future_signature_is_400_and_changes_nothing(pending, webhook_on):
    sku, [(oid, _)] = pending(1)
    p = pid()
    raw = capture(oid, p)
    now = int(time.time())
    tries = {
        "wrong secret": sign(raw, secret="not-the-secret"),
        "another body": sign(capture(oid, "y")),
        # far past the 300 s either way: the requests before this one take time on a slow machine,
        # and a stamp 301 s ahead came within the tolerance by the time it was sent (seen in CI)
        "too old": sign(raw, t=now - 1000),
        "from the future": sign(raw, t=now + 1000),
        "malformed": "v1=abc",
        "no timestamp": sign(raw).split(",")[1],
        "not hex": f"t={now},v1={'g' * 64}",
        "missing": None,
    }
    for what, header in tries.items():
        r = hook(raw, header)
        assert r.status_code == 400 and r.json()["code"] == "bad_signature", (what, r.content)
    # a body that is not even JSON, badly signed, is a bad signature too (it is never parsed)
    assert hook(b"{not json", "t=1,v1=" + "0" * 64).json()["code"] == "bad_signature"
    order = Order.objects.get(pk=oid)
    assert order.status == Order.Status.PENDING_PAYMENT and order.payment_id is None
    assert not PaymentRefund.objects.filter(payment_id=p).exists()
    # within the tolerance either way it is accepted
    ok = hook(raw, sign(raw, t=now - 290))
    assert ok.status_code == 200 and ok.json()["status"] == "PAID", ok.content


def test_without_a_secret_the_webhook_is_404(pending, settings):
    settings.SECKILL_PAYMENT_WEBHOOK_SECRET = ""
    sku, [(oid, _)] = pending(1)
    raw = capture(oid, pid())
    r = hook(raw)
    assert r.status_code == 404 and r["Content-Type"] == "application/json"
    assert r.json()["code"] == "not_found"
    assert Order.objects.get(pk=oid).status == Order.Status.PENDING_PAYMENT


def test_a_signed_body_that_is_not_a_capture_is_400_invalid(pending, webhook_on, settings):
    sku, [(oid, _)] = pending(1)
    bodies = [b"{not json", b"[]", json.dumps({"order_id": oid}).encode(),
              json.dumps({"order_id": oid, "payment_id": 7, "status": "captured"}).encode(),
              json.dumps({"order_id": oid, "payment_id": "", "status": "captured"}).encode(),
              json.dumps({"order_id": oid, "payment_id": "p" * 129, "status": "captured"}).encode(),
              json.dumps({"order_id": oid, "payment_id": "a\nb", "status": "captured"}).encode(),
              capture(oid, pid(), status="refunded"), capture("o" * 65, pid())]
    for raw in bodies:
        r = hook(raw)
        assert r.status_code == 400 and r.json()["code"] == "invalid", (raw[:80], r.content)
    settings.SECKILL_MAX_BODY_BYTES = 64
    big = capture(oid, "p" * 80)
    assert hook(big).json()["code"] == "too_large"
    assert Order.objects.get(pk=oid).status == Order.Status.PENDING_PAYMENT
    assert not PaymentRefund.objects.filter(order_ref__in=[oid, "o" * 65]).exists()
    assert Client().get(URL).status_code == 405


# --- captures ----------------------------------------------------------------------------------

def test_a_capture_pays_the_order_and_its_retry_changes_nothing(pending, webhook_on):
    sku, [(oid, client)] = pending(1, stock=3)
    p = pid()
    first = hook(capture(oid, p))
    assert first.status_code == 200, first.content
    assert first.json() == {"order_id": oid, "payment_id": p, "outcome": "paid", "status": "PAID",
                            "refund_reason": None}
    paid = Order.objects.get(pk=oid)
    assert (paid.status, paid.payment_id) == (Order.Status.PAID, p)
    again = hook(capture(oid, p))
    assert again.status_code == 200 and again.json()["outcome"] == "paid"
    assert Order.objects.get(pk=oid).paid_at == paid.paid_at
    assert client.get(f"/api/v1/orders/{oid}").json()["status"] == "PAID"
    moves_applied(sku.sku_id)
    settled(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock, row.sold_stock) == (2, 0, 1)
    assert not PaymentRefund.objects.filter(payment_id=p).exists()


def test_a_capture_after_cancel_or_expiry_is_one_refund_and_moves_no_unit(pending, webhook_on):
    sku, [(cancelled, client), (expired, _), (late, _)] = pending(3, stock=3)
    assert client.post(f"/api/v1/orders/{cancelled}/cancel").status_code == 200
    # one order swept to EXPIRED, one past its window the sweep has not reached yet
    Order.objects.filter(pk__in=[expired, late]).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert Order.objects.filter(pk=expired).update(status=Order.Status.EXPIRED, closed_at=timezone.now()) == 1
    gives_applied(sku.sku_id)
    before, live_before = buckets(sku.sku_id), redis_live.live_stock(sku_id=sku.sku_id).available
    ids = {cancelled: pid(), expired: pid(), late: pid()}
    for _ in range(2):  # the provider's retry records nothing more
        for oid, p in ids.items():
            r = hook(capture(oid, p))
            assert r.status_code == 200 and r.json()["outcome"] == "refund_recorded", r.content
    refunds = {r.order_id: r for r in PaymentRefund.objects.filter(payment_id__in=ids.values())}
    assert {oid: (r.payment_id, r.reason, r.status) for oid, r in refunds.items()} == {
        cancelled: (ids[cancelled], "order_cancelled", "to_refund"),
        expired: (ids[expired], "order_expired", "to_refund"),
        late: (ids[late], "order_expired", "to_refund")}
    assert refunds[cancelled].amount == Decimal("12.50") and refunds[late].order_status == "PENDING_PAYMENT"
    final = dict(Order.objects.filter(pk__in=ids).values_list("order_id", "status"))
    assert final == {cancelled: "CANCELLED", expired: "EXPIRED", late: "PENDING_PAYMENT"}
    assert not Order.objects.filter(pk__in=ids, payment_id__isnull=False).exists()
    assert buckets(sku.sku_id) == before
    assert redis_live.live_stock(sku_id=sku.sku_id).available == live_before
    # the late one is swept as usual; its unit goes back once, nothing sold
    while life.orders_expire(sku_ids=[sku.sku_id]):
        pass
    gives_applied(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.available_stock, row.locked_stock, row.sold_stock) == (3, 0, 0)


def test_a_second_capture_with_another_id_is_a_refund_and_sells_nothing_twice(pending, webhook_on):
    sku, [(oid, _)] = pending(1, stock=2)
    first, second = pid(), pid()
    assert hook(capture(oid, first)).json()["outcome"] == "paid"
    r = hook(capture(oid, second))
    assert r.status_code == 200 and r.json()["refund_reason"] == "second_capture", r.content
    assert hook(capture(oid, second)).status_code == 200  # retried
    assert PaymentRefund.objects.filter(order_id=oid).count() == 1
    assert Order.objects.get(pk=oid).payment_id == first
    moves_applied(sku.sku_id)
    assert buckets(sku.sku_id)[4] == 1


def test_a_payment_id_another_order_holds_and_an_unknown_order_are_refunds(pending, webhook_on):
    sku, [(a, _), (b, _)] = pending(2)
    p = pid()
    assert hook(capture(a, p)).json()["outcome"] == "paid"
    reused = hook(capture(b, p))
    assert reused.status_code == 200 and reused.json()["refund_reason"] == "payment_id_reused", reused.content
    assert Order.objects.get(pk=b).status == Order.Status.PENDING_PAYMENT
    # the first order's own retry still answers its payment, not the refund
    assert hook(capture(a, p)).json()["outcome"] == "paid"
    # another case is another id: exact comparison, as Order.payment_id
    assert hook(capture(b, p.upper())).json()["outcome"] == "paid"
    nowhere = uuid.uuid4().hex
    q = pid()
    for _ in range(2):
        unknown = hook(capture(nowhere, q))
        assert unknown.status_code == 200 and unknown.json()["refund_reason"] == "unknown_order", unknown.content
    refund = PaymentRefund.objects.get(payment_id=q)
    # the refund to make is what the provider took
    assert (refund.order_id, refund.order_ref, refund.amount, refund.currency) == (None, nowhere, PRICE, "CNY")
    assert PaymentRefund.objects.get(payment_id=p).order_id == b


def test_capture_racing_cancel_and_expiry_has_one_winner_each(pending, webhook_on):
    """Per order, a capture, the buyer's cancel and the expiry sweep all at once."""
    n = 16
    sku, orders = pending(n, stock=n)
    ids = [oid for oid, _ in orders]
    owner = dict(Order.objects.filter(pk__in=ids).values_list("order_id", "user_id"))
    Order.objects.filter(pk__in=ids[: n // 2]).update(expires_at=timezone.now() + timedelta(milliseconds=200))
    captured = {oid: pid() for oid in ids}
    results: dict[str, dict[str, str]] = {oid: {} for oid in ids}

    def run(kind: str, oid: str, gate: threading.Barrier):
        try:
            gate.wait(5)
            try:
                if kind == "capture":
                    results[oid][kind] = pay_now(oid, captured[oid]).outcome
                elif kind == "cancel":
                    life.order_cancel(user_id=owner[oid], order_id=oid)
                    results[oid][kind] = "cancelled"
                else:
                    life.orders_expire(sku_ids=[sku.sku_id])
            except NotCancellable:
                results[oid][kind] = "refused"
        finally:
            connection.close()

    time.sleep(0.15)
    for oid in ids:
        gate = threading.Barrier(3)
        threads = [threading.Thread(target=run, args=(k, oid, gate)) for k in ("capture", "cancel", "expire")]
        [t.start() for t in threads]
        [t.join() for t in threads]
    while life.orders_expire(sku_ids=[sku.sku_id]):
        pass
    final = {o.order_id: o for o in Order.objects.filter(pk__in=ids)}
    refunds = {r.order_id: r for r in PaymentRefund.objects.filter(order_id__in=ids)}
    for oid in ids:
        order, outcome = final[oid], results[oid]
        if order.status == Order.Status.PAID:
            assert outcome == {"capture": "paid", "cancel": "refused"} and order.payment_id == captured[oid]
            assert oid not in refunds
        else:
            assert order.status in (Order.Status.CANCELLED, Order.Status.EXPIRED) and order.payment_id is None
            assert outcome["capture"] == "refund_recorded"
            assert outcome["cancel"] == ("cancelled" if order.status == Order.Status.CANCELLED else "refused")
            assert refunds[oid].payment_id == captured[oid]
            # A capture that came after the window passed is `order_expired` even
            # when the buyer's cancel (which has no window) closed the order later.
            assert refunds[oid].reason in {"CANCELLED": ("order_cancelled", "order_expired"),
                                           "EXPIRED": ("order_expired",)}[order.status]
    paid = sum(1 for o in final.values() if o.status == Order.Status.PAID)
    assert len(refunds) == n - paid
    gives_applied(sku.sku_id)
    settled(sku.sku_id)
    row = assert_balanced(sku.sku_id)
    assert (row.sold_stock, row.locked_stock, row.available_stock) == (paid, 0, n - paid)


def test_copies_of_one_capture_at_once_pay_once_or_record_once(pending, webhook_on):
    """The provider delivering the same callback several times at once."""
    from core.metrics import PAYMENT_REFUNDS

    sku, [(payable, _), (cancelled, client)] = pending(2)
    assert client.post(f"/api/v1/orders/{cancelled}/cancel").status_code == 200
    counted = PAYMENT_REFUNDS.labels("order_cancelled")._value.get()
    ids = {payable: pid(), cancelled: pid()}
    answers: list[tuple[str, int, str]] = []

    def deliver(oid: str, gate: threading.Barrier):
        try:
            gate.wait(5)
            r = hook(capture(oid, ids[oid]))
            answers.append((oid, r.status_code, r.json()["outcome"]))
        finally:
            connection.close()

    gate = threading.Barrier(12)
    threads = [threading.Thread(target=deliver, args=(oid, gate)) for oid in ids for _ in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(answers) == sorted([(payable, 200, "paid")] * 6 + [(cancelled, 200, "refund_recorded")] * 6)
    assert Order.objects.get(pk=payable).payment_id == ids[payable]
    assert list(PaymentRefund.objects.filter(payment_id__in=ids.values()).values_list("order_id", flat=True)) == [
        cancelled]
    assert PAYMENT_REFUNDS.labels("order_cancelled")._value.get() == counted + 1


def test_the_webhook_is_served_by_gunicorn_on_the_api_chain(process_env, pending):
    sku, [(oid, _)] = pending(1)
    server = start_web(process_env, name="web-payments", SECKILL_PAYMENT_WEBHOOK_SECRET=SECRET)
    try:
        def post(raw: bytes, signature: str) -> tuple[int, dict]:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            try:
                conn.request("POST", URL, raw, {"Content-Type": "application/json", "Seckill-Signature": signature})
                resp = conn.getresponse()
                return resp.status, json.loads(resp.read())
            finally:
                conn.close()

        p = pid()
        raw = capture(oid, p)
        status, body = post(raw, sign(raw, secret="nope"))
        assert (status, body["code"]) == (400, "bad_signature"), body
        status, body = post(raw, sign(raw))  # no CSRF token, no session: the API chain
        assert (status, body["outcome"], body["status"]) == (200, "paid", "PAID"), body
    finally:
        server.stop()
    assert Order.objects.get(pk=oid).payment_id == p


# --- the buyer's own pay -----------------------------------------------------------------------

def test_buyer_pay_off_is_409_payment_by_provider_and_the_webhook_still_pays(pending, webhook_on, settings):
    settings.SECKILL_BUYER_PAY = False
    sku, [(oid, client)] = pending(1)
    for body in (None, {"payment_id": pid()}):
        r = client.post(f"/api/v1/orders/{oid}/pay", body, format="json")
        assert r.status_code == 409 and r.json()["code"] == "payment_by_provider", r.content
    assert Order.objects.get(pk=oid).status == Order.Status.PENDING_PAYMENT
    assert hook(capture(oid, pid())).json()["status"] == "PAID"
    assert client.post(f"/api/v1/orders/{oid}/pay").json()["code"] == "payment_by_provider"
    settings.SECKILL_BUYER_PAY = True
    assert client.post(f"/api/v1/orders/{oid}/pay").status_code == 200


# --- the admin and the metrics -----------------------------------------------------------------

def staff(group: str) -> tuple[object, Client]:
    user = get_user_model().objects.create_user(username=unique(group), password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return user, client


def refund_for_cancelled(pending) -> PaymentRefund:
    sku, [(oid, client)] = pending(1)
    assert client.post(f"/api/v1/orders/{oid}/cancel").status_code == 200
    p = pid()
    assert pay_now(oid, p).refund_reason == "order_cancelled"
    return PaymentRefund.objects.get(payment_id=p)


def test_ops_mark_a_refund_refunded_in_the_admin_audited_support_only_sees(pending):
    refund = refund_for_cancelled(pending)
    _, support = staff("support")
    ops_user, ops = staff("ops")
    listing = support.get("/admin/orders/paymentrefund/?status__exact=to_refund")
    assert listing.status_code == 200 and refund.payment_id.encode() in listing.content
    assert b"mark_refunded" not in listing.content
    assert support.get(f"/admin/orders/paymentrefund/{refund.pk}/change/").status_code == 200
    chosen = {"action": "mark_refunded", "_selected_action": [refund.pk]}
    support.post("/admin/orders/paymentrefund/", {**chosen, "apply": "1", "note": "x"})
    assert PaymentRefund.objects.get(pk=refund.pk).status == "to_refund"
    assert b"mark_refunded" in ops.get("/admin/orders/paymentrefund/").content
    confirm = ops.post("/admin/orders/paymentrefund/", chosen)
    assert confirm.status_code == 200 and refund.payment_id.encode() in confirm.content
    # dismissing needs a note
    dismiss = ops.post("/admin/orders/paymentrefund/", {"action": "dismiss", "_selected_action": [refund.pk],
                                                        "apply": "1", "note": ""})
    assert dismiss.status_code == 200 and PaymentRefund.objects.get(pk=refund.pk).status == "to_refund"
    done = ops.post("/admin/orders/paymentrefund/", {**chosen, "apply": "1", "note": "provider refund re_42"})
    assert done.status_code == 302
    closed = PaymentRefund.objects.get(pk=refund.pk)
    assert (closed.status, closed.resolved_by, closed.resolution_note) == (
        "refunded", f"admin:{ops_user.username}", "provider refund re_42")
    assert closed.resolved_at is not None
    entries = LogEntry.objects.filter(object_id=str(refund.pk), content_type__model="paymentrefund")
    assert [e.change_message for e in entries] == ["refunded: provider refund re_42"]
    # closing it again changes nothing and logs nothing
    ops.post("/admin/orders/paymentrefund/", {**chosen, "apply": "1", "note": "again"})
    assert PaymentRefund.objects.get(pk=refund.pk).resolution_note == "provider refund re_42"
    assert entries.count() == 1
    assert payments.refund_resolve(refund_id=refund.pk, status="dismissed", actor="t", note="n") is False


SAMPLE = re.compile(r"^(?P<name>[a-z_]+(?:\{[^}]*\})?) (?P<value>\S+)$", re.M)


def test_the_metrics_count_refunds_and_show_the_open_ones(pending, settings):
    settings.SECKILL_METRICS_TOKEN = "m3trics"

    def scrape() -> dict[str, float]:
        r = Client().get("/reconciliation/metrics", HTTP_AUTHORIZATION="Bearer m3trics")
        assert r.status_code == 200
        return {m["name"]: float(m["value"]) for m in SAMPLE.finditer(r.content.decode())}

    before = scrape()
    refund = refund_for_cancelled(pending)
    after = scrape()
    counted = 'seckill_payment_refunds_total{reason="order_cancelled"}'
    assert after["seckill_payment_refunds_open"] == before.get("seckill_payment_refunds_open", 0) + 1
    assert after[counted] == before.get(counted, 0) + 1
    assert payments.refund_resolve(refund_id=refund.pk, status="refunded", actor="t")
    closed = scrape()
    assert closed["seckill_payment_refunds_open"] == after["seckill_payment_refunds_open"] - 1
    assert closed[counted] == after[counted]


def test_production_accepts_no_webhook_secret_but_refuses_a_short_one():
    from core.tests.test_deployment import PRODUCTION_ENV, manage

    assert manage("check", env=PRODUCTION_ENV).returncode == 0
    short = manage("check", env={**PRODUCTION_ENV, "SECKILL_PAYMENT_WEBHOOK_SECRET": "short-secret"})
    assert short.returncode != 0 and "SECKILL_PAYMENT_WEBHOOK_SECRET" in short.stderr, short.stderr[-800:]
    reused = manage("check", env={**PRODUCTION_ENV,
                                  "SECKILL_PAYMENT_WEBHOOK_SECRET": PRODUCTION_ENV["SECKILL_TASK_SIGNING_KEY"]})
    assert reused.returncode != 0 and "SECKILL_PAYMENT_WEBHOOK_SECRET" in reused.stderr
    good = manage("check", env={**PRODUCTION_ENV, "SECKILL_PAYMENT_WEBHOOK_SECRET": SECRET})
    assert good.returncode == 0, good.stderr[-800:]
