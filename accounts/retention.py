"""Retention of login records: django-axes' attempts and logs, and expired
sessions (docs/architecture.md, "Bounded data"). Deleted by primary key in chunks."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.sessions.models import Session
from django.db import models
from django.utils import timezone

CHUNK = 1000
CAP = 100_000


def _delete_chunked(rows: models.QuerySet, *, chunk: int, cap: int) -> int:
    deleted = 0
    while deleted < cap:
        pks = list(rows.order_by("pk").values_list("pk", flat=True)[:min(chunk, cap - deleted)])
        if not pks:
            break
        _total, by_model = rows.model.objects.filter(pk__in=pks).delete()
        deleted += by_model.get(rows.model._meta.label, 0)
    return deleted


def login_records_purge(*, before: datetime, chunk: int = CHUNK, cap: int = CAP) -> dict[str, int]:
    """django-axes 8 keeps a row per (user, address, agent) being counted
    (AccessAttempt, with its expiration), a log of successful logins
    (AccessLog) and one of failures (AccessFailureLog); rows older than
    `before` go, attempts only once past their cool-off too (a shorter
    retention lifts no lockout early). Expired sessions go too."""
    from axes.models import AccessAttempt, AccessFailureLog, AccessLog

    cooled = timezone.now() - timedelta(hours=float(settings.AXES_COOLOFF_TIME or 0))
    out = {"login_attempts": _delete_chunked(AccessAttempt.objects.filter(attempt_time__lt=min(before, cooled)),
                                             chunk=chunk, cap=cap)}
    for name, model in (("login_logs", AccessLog), ("login_failures", AccessFailureLog)):
        out[name] = _delete_chunked(model.objects.filter(attempt_time__lt=before), chunk=chunk, cap=cap)
    out["sessions"] = _delete_chunked(Session.objects.filter(expire_date__lt=timezone.now()), chunk=chunk, cap=cap)
    return out
