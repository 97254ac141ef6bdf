"""The reconciliation report for people (staff) and its metrics for machines."""
from __future__ import annotations

import hmac
from functools import wraps

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, render

from reconciliation import selectors
from reconciliation.models import ReconciliationRun

# Who may read the reconciliation report and its metrics: both admin groups
# have it (support reads, ops acts), a staff user outside them does not.
REPORT_PERMISSION = "reconciliation.view_reconciliationrun"
# The live sale view shows the SKUs' stock figures.
LIVE_PERMISSION = "inventory.view_sku"


def staff_with(permission: str):
    """A page for staff holding `permission`: anyone else not logged in as
    staff goes to the admin's login; staff without it get 403."""
    def decorate(view):
        @wraps(view)
        def checked(request, *args, **kwargs):
            if not request.user.has_perm(permission):
                raise PermissionDenied
            return view(request, *args, **kwargs)
        return staff_member_required(checked)
    return decorate


@staff_with(LIVE_PERMISSION)
def dashboard(request):
    """The live sale view, in the admin (mounted under /admin/ by the project's
    urls): the first paint from the server, then `live.js` polls `dashboard_data`."""
    from django.contrib import admin
    from django.template.response import TemplateResponse
    from django.utils.translation import gettext as _

    data = selectors.live_sale()
    context = {**admin.site.each_context(request), "title": _("Live sale"), "live": data}
    return TemplateResponse(request, "admin/dashboard.html", context)


@staff_with(LIVE_PERMISSION)
def dashboard_data(request):
    """The live sale view's figures as JSON, polled by the page (plain reads, no row lock)."""
    from django.http import JsonResponse

    return JsonResponse(selectors.live_sale())


@staff_with(REPORT_PERMISSION)
def report(request):
    """The latest run and the history charts, inside the admin's frame (header,
    user links, dark mode); `?sku=` picks the SKU whose buckets are charted."""
    from django.contrib import admin
    from django.utils import timezone
    from django.utils.translation import gettext as _

    context = selectors.report_context(tz=timezone.get_current_timezone(), sku_id=request.GET.get("sku"))
    return render(request, "reconciliation/report.html", {
        **admin.site.each_context(request), "title": _("Reconciliation: Redis gate vs MySQL book"), **context})


@staff_with(REPORT_PERMISSION)
def run_detail(request, run_id: int):
    from django.contrib import admin
    from django.utils.translation import gettext as _

    run = get_object_or_404(ReconciliationRun, pk=run_id)
    return render(request, "reconciliation/run.html", {
        **admin.site.each_context(request), "title": _("Run #%(id)s (%(trigger)s)") % {
            "id": run.pk, "trigger": run.get_trigger_display()},
        "run": run, "rows": selectors.run_rows(run=run), "findings": selectors.run_findings(run=run)})


def metrics(request):
    """Prometheus text format. A bearer token (SECKILL_METRICS_TOKEN) or a
    staff login that may read the report; 403 otherwise (a scraper gets no
    login page).

    A request with a bearer token is decided by the token alone: it never
    loads a session (seckill_site.wsgi serves it through the API's chain,
    which has none), so a scraper costs no MySQL session lookup and a wrong
    token sent with a made-up session cookie costs none either."""
    scheme, _, presented = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() == "bearer":
        token = settings.SECKILL_METRICS_TOKEN
        # Bytes, not str: a header with non-ASCII characters is refused, not an error.
        allowed = bool(token) and hmac.compare_digest(presented.strip().encode("utf-8", "replace"), token.encode())
    else:
        user = getattr(request, "user", None)
        allowed = user is not None and user.is_authenticated and user.is_staff and user.has_perm(REPORT_PERMISSION)
    if not allowed:
        return HttpResponseForbidden("metrics: bearer token or a staff login with the report's view permission "
                                     "required\n")
    from core.metrics import exposition  # the purchase path's counters, summed over the web processes

    lines = selectors.metrics_lines()
    return HttpResponse(("\n".join(lines) + "\n").encode() + exposition(),
                        content_type="text/plain; version=0.0.4; charset=utf-8")
