from django.contrib import admin, messages
from django.shortcuts import redirect
from django.urls import path
from django.utils.html import format_html

from inventory.admin import ReadOnlyAdmin
from inventory.resources import ViewerExportMixin
from reconciliation import lease, services
from reconciliation.models import Finding, ReconciliationRun, RunLease, SkuReconciliation
from reconciliation.resources import FindingResource, SkuReconciliationResource


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class SkuRowInline(ReadOnlyInline):
    model = SkuReconciliation
    fields = readonly_fields = ("sku", "redis_available", "mysql_available", "in_flight", "gives_unapplied",
                                "expected_redis", "coloured_drift", "state")

    @admin.display(description="drift")
    def coloured_drift(self, obj):
        colour = "#2e7d32" if obj.drift == 0 else "#b00020"
        return format_html('<b style="color:{}">{}</b>', colour, obj.drift)


class FindingInline(ReadOnlyInline):
    model = Finding
    fields = readonly_fields = ("kind", "sku", "redis_value", "mysql_value", "repaired", "detail")


@admin.register(ReconciliationRun)
class ReconciliationRunAdmin(ReadOnlyAdmin):
    change_list_template = "admin/reconciliation/reconciliationrun/change_list.html"
    list_display = ("id", "trigger", "started_at", "finished_at", "skus_checked", "drifting", "repairs", "orphans",
                    "alerts")
    list_filter = ("trigger", "started_at")
    inlines = [SkuRowInline, FindingInline]
    readonly_fields = ("trigger", "started_at", "finished_at", "skus_checked", "skus_drifting", "repairs", "orphans",
                       "alerts", "error")

    @admin.display(description="drifting", ordering="skus_drifting")
    def drifting(self, obj):
        colour = "#2e7d32" if obj.skus_drifting == 0 else "#b00020"
        return format_html('<b style="color:{}">{}</b>', colour, obj.skus_drifting)

    def get_urls(self):
        return [path("run-now/", self.admin_site.admin_view(self.run_now), name="reconciliation_run_now")] + \
            super().get_urls()

    def run_now(self, request):
        if request.method != "POST" or not request.user.has_perm("inventory.move_stock"):
            messages.error(request, "Only ops may start a reconciliation run.")
            return redirect("admin:reconciliation_reconciliationrun_changelist")
        try:
            run = services.reconciliation_run(trigger=ReconciliationRun.Trigger.ADMIN)
        except lease.ReconciliationBusy:
            messages.warning(request, "Another reconciliation run is going on; its report will appear here.")
            return redirect("admin:reconciliation_reconciliationrun_changelist")
        messages.success(request, f"Run #{run.pk}: {run.skus_checked} SKU(s), {run.skus_drifting} drifting, "
                                  f"{run.repairs} repair(s), {run.alerts} alert(s).")
        return redirect("admin:reconciliation_reconciliationrun_change", run.pk)


@admin.register(SkuReconciliation)
class SkuReconciliationAdmin(ViewerExportMixin, ReadOnlyAdmin):
    resource_classes = [SkuReconciliationResource]
    list_display = ("run", "sku", "redis_available", "mysql_available", "in_flight", "expected_redis", "drift",
                    "state")
    list_filter = ("state", "sku")


@admin.register(Finding)
class FindingAdmin(ViewerExportMixin, ReadOnlyAdmin):
    """Every finding of every run, filterable and exportable (CSV / XLSX)."""

    resource_classes = [FindingResource]
    list_display = ("id", "run", "kind", "sku", "redis_value", "mysql_value", "repaired", "detail")
    list_filter = ("kind", "repaired")
    search_fields = ("sku__sku_id", "detail", "ids")


@admin.register(RunLease)
class RunLeaseAdmin(ReadOnlyAdmin):
    """Who runs reconciliation now: a holder with an expiry in the future is a
    run going on (or one that died, until its lease expires)."""

    list_display = ("name", "holder", "expires_at")
