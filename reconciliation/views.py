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
    """The live sale view, in the admin (mounted under /admin/ by the project's
    urls): the first paint from the server, then `live.js` polls `dashboard_data`."""
    from django.contrib import admin
    from django.core.exceptions import PermissionDenied
    from django.template.response import TemplateResponse
    from django.utils.translation import gettext as _

    if not request.user.has_perm("inventory.view_sku"):
        raise PermissionDenied
    data = selectors.live_sale()
    context = {**admin.site.each_context(request), "title": _("Live sale"), "live": data}
    return TemplateResponse(request, "admin/dashboard.html", context)


def dashboard_data(request):
    """The live sale view's figures as JSON, polled by the page (staff only: the
    project's urls wrap it in admin_view; plain reads, no row lock)."""
    from django.core.exceptions import PermissionDenied
    from django.http import JsonResponse

    if not request.user.has_perm("inventory.view_sku"):
        raise PermissionDenied
    return JsonResponse(selectors.live_sale())


@staff_member_required
def report(request):
    """The latest run and the history charts, inside the admin's frame (header,
    user links, dark mode); `?sku=` picks the SKU whose buckets are charted."""
    from django.contrib import admin
    from django.utils import timezone
    from django.utils.translation import gettext as _

    context = selectors.report_context(tz=timezone.get_current_timezone(), sku_id=request.GET.get("sku"))
    return render(request, "reconciliation/report.html", {
        **admin.site.each_context(request), "title": _("Reconciliation: Redis gate vs MySQL book"), **context})


@staff_member_required
def run_detail(request, run_id: int):
    from django.contrib import admin
    from django.utils.translation import gettext as _

    run = get_object_or_404(ReconciliationRun, pk=run_id)
    return render(request, "reconciliation/run.html", {
        **admin.site.each_context(request), "title": _("Run #%(id)s (%(trigger)s)") % {
            "id": run.pk, "trigger": run.get_trigger_display()},
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
    from core.metrics import exposition  # the purchase path's counters, summed over the web processes

    lines = selectors.metrics_lines()
    return HttpResponse(("\n".join(lines) + "\n").encode() + exposition(),
                        content_type="text/plain; version=0.0.4; charset=utf-8")
