"""The reconciliation report for people (staff) and its metrics for machines."""
from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, render

from reconciliation import selectors
from reconciliation.models import ReconciliationRun


def dashboard(request):
    """The stock dashboard, in the admin (mounted under /admin/ by the project's urls)."""
    from django.contrib import admin
    from django.core.exceptions import PermissionDenied
    from django.template.response import TemplateResponse

    if not request.user.has_perm("inventory.view_sku"):
        raise PermissionDenied
    context = {**admin.site.each_context(request), "title": "Stock dashboard",
               "rows": selectors.dashboard_rows(), "statuses": selectors.DASHBOARD_STATUSES}
    return TemplateResponse(request, "admin/dashboard.html", context)


@staff_member_required
def report(request):
    return render(request, "reconciliation/report.html", selectors.report_context())


@staff_member_required
def run_detail(request, run_id: int):
    run = get_object_or_404(ReconciliationRun, pk=run_id)
    return render(request, "reconciliation/run.html", {
        "run": run, "rows": selectors.run_rows(run=run), "findings": selectors.run_findings(run=run)})


def metrics(request):
    """Prometheus text format. A bearer token (SECKILL_METRICS_TOKEN) or a staff login."""
    token = settings.SECKILL_METRICS_TOKEN
    presented = request.META.get("HTTP_AUTHORIZATION", "").removeprefix("Bearer ").strip()
    # Bytes, not str: a header with non-ASCII characters is refused, not an error.
    allowed = (token and hmac.compare_digest(presented.encode("utf-8", "replace"), token.encode())) or (
        request.user.is_authenticated and request.user.is_staff)
    if not allowed:
        return HttpResponseForbidden("metrics: bearer token or staff login required\n")
    lines = selectors.metrics_lines()
    return HttpResponse("\n".join(lines) + "\n", content_type="text/plain; version=0.0.4")
