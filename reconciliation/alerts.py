"""Alerts for ops: a drift that persisted across observations, a finding that
asks for ops, and new dead letters go to settings.ADMINS by mail and, when
SECKILL_ALERT_WEBHOOK is set, as a JSON POST to it.

At most once per finding or dead letter: an Alert row, unique per subject, is
inserted before anything is sent, so a second sender (two runs, the sweep and
a run) finds it there and sends nothing. A failed send is logged and recorded
on the row, never raised into the caller and never retried (at most once).

Sent from the beat and worker side only (after a run, and by a sweep task),
outside any transaction that wrote the findings; never from the purchase path.
Dead letters are written by inventory and orders, which may not import this
app: the sweep finds the ones with no alert yet.
"""
from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.core.mail import mail_admins
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy

from core.reporting import url_redacted
from inventory.models import DeadLetter
from reconciliation.models import Alert, Finding

logger = logging.getLogger(__name__)

# A drift seen twice (lowered, raised after the previous run saw it too) and a
# drift that could not be repaired safely.
ALERT_KINDS = (Finding.Kind.DRIFT_ALERT, Finding.Kind.DRIFT_RAISED, Finding.Kind.DRIFT_LOWERED)
# Older subjects are history, not news (and bound every sweep's read).
LOOKBACK = timedelta(days=1)
SWEEP_LIMIT = 200


def _record_once(**subject) -> Alert | None:
    """Insert the subject's Alert row; None when another sender has it."""
    try:
        with transaction.atomic():
            return Alert.objects.create(**subject)
    except IntegrityError:
        return None


def _post_webhook(url: str, payload: dict) -> str:
    request = urllib.request.Request(url, data=json.dumps(payload, default=str).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=settings.SECKILL_ALERT_WEBHOOK_TIMEOUT_SECONDS) as response:
        return f"webhook {response.status}"


def _failure(exc: Exception) -> str:
    """A failed POST, told without the URL: urllib puts it into some of its
    errors (an unknown scheme, a redirect), and the URL is the secret."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        reason = exc.reason.__class__.__name__ if isinstance(exc.reason, Exception) else "error"
        return f"{exc.__class__.__name__}: {reason}"
    return exc.__class__.__name__


def alert_deliver(*, subject: str, lines: list[str], payload: dict) -> str:
    """Mail ADMINS and POST the webhook. Returns what happened; never raises."""
    outcome = []
    try:
        mail_admins(subject, "\n".join(lines), fail_silently=False)
        outcome.append("mail sent" if settings.ADMINS else "no ADMINS")
    except Exception as exc:  # an alert must not break the run that found it
        logger.error("alert mail %r not sent: %r", subject, exc)
        outcome.append(f"mail failed: {exc.__class__.__name__}")
    url = settings.SECKILL_ALERT_WEBHOOK
    if url:
        try:
            outcome.append(_post_webhook(url, {"subject": subject, **payload}))
        except Exception as exc:
            # The host only: a webhook's path (or userinfo) is its credential.
            logger.error("alert webhook %s not reached for %r: %s", url_redacted(url), subject, _failure(exc))
            outcome.append(f"webhook failed: {exc.__class__.__name__}")
    return "; ".join(outcome)[:255]


def _record(alerts: Iterable[Alert], outcome: str) -> None:
    Alert.objects.filter(pk__in=[a.pk for a in alerts]).update(outcome=outcome)


def findings_alert(*, run_id: int | None = None, limit: int = SWEEP_LIMIT) -> list[int]:
    """Alert the findings that ask for ops and have no alert yet (of one run,
    or of the last day). Returns the ids of the findings alerted now."""
    candidates = Finding.objects.filter(kind__in=ALERT_KINDS, alert__isnull=True)
    if run_id is not None:
        candidates = candidates.filter(run_id=run_id)
    else:
        candidates = candidates.filter(run__started_at__gte=timezone.now() - LOOKBACK)
    ours = []
    for finding in candidates.order_by("pk")[:limit]:
        alert = _record_once(finding=finding)
        if alert is not None:
            ours.append((finding, alert))
    if not ours:
        return []
    subject = str(gettext_lazy("Seckill: %(n)d reconciliation finding(s) need attention") % {"n": len(ours)})
    lines = [f"run {f.run_id} {f.get_kind_display()} sku={f.sku_id} redis={f.redis_value} "
             f"mysql={f.mysql_value}: {f.detail}" for f, _a in ours]
    outcome = alert_deliver(subject=subject, lines=lines, payload={"kind": "findings", "findings": [
        {"id": f.pk, "run": f.run_id, "kind": f.kind, "sku": f.sku_id, "redis": f.redis_value,
         "mysql": f.mysql_value, "detail": f.detail} for f, _a in ours]})
    _record([a for _f, a in ours], outcome)
    return [f.pk for f, _a in ours]


def dead_letters_alert(*, limit: int = SWEEP_LIMIT) -> list[int]:
    """Alert the open dead letters of the last day that have no alert yet.
    Returns the ids alerted now."""
    candidates = DeadLetter.objects.filter(status=DeadLetter.Status.OPEN, alert__isnull=True,
                                           created_at__gte=timezone.now() - LOOKBACK)
    ours = []
    for letter in candidates.order_by("pk")[:limit]:
        alert = _record_once(dead_letter=letter)
        if alert is not None:
            ours.append((letter, alert))
    if not ours:
        return []
    subject = str(gettext_lazy("Seckill: %(n)d new dead letter(s) in the admin") % {"n": len(ours)})
    lines = [f"#{d.pk} {d.task_name} at {d.created_at:%Y-%m-%d %H:%M:%S}: {d.reason}" for d, _a in ours]
    outcome = alert_deliver(subject=subject, lines=lines, payload={"kind": "dead_letters", "dead_letters": [
        {"id": d.pk, "task": d.task_name, "reason": d.reason, "created_at": d.created_at.isoformat()}
        for d, _a in ours]})
    _record([a for _d, a in ours], outcome)
    return [d.pk for d, _a in ours]


def alerts_send(*, run_id: int | None = None) -> dict[str, int]:
    """Both kinds; never raises (an alert must not fail a run or a sweep)."""
    out = {"findings": 0, "dead_letters": 0}
    try:
        out["findings"] = len(findings_alert(run_id=run_id))
        out["dead_letters"] = len(dead_letters_alert())
    except Exception:
        logger.exception("alerts not sent")
    return out
