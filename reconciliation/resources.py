"""What the reconciliation admin exports (CSV / XLSX): per-SKU rows and findings."""
from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from import_export import fields

from inventory.resources import ExportResource
from reconciliation.models import Finding, SkuReconciliation


class SkuReconciliationResource(ExportResource):
    run = fields.Field(attribute="run_id", column_name="run")
    sku = fields.Field(attribute="sku_id", column_name="sku")

    class Meta:
        model = SkuReconciliation
        name = _("Per-SKU reconciliation rows")
        fields = ("id", "run", "sku", "redis_available", "mysql_available", "mysql_total", "mysql_frozen",
                  "mysql_locked", "mysql_sold", "in_flight", "gives_unapplied", "expected_redis", "drift", "state")
        export_order = fields


class FindingResource(ExportResource):
    run = fields.Field(attribute="run_id", column_name="run")
    sku = fields.Field(attribute="sku_id", column_name="sku")

    class Meta:
        model = Finding
        name = _("Reconciliation findings")
        fields = ("id", "run", "kind", "sku", "redis_value", "mysql_value", "repaired", "ids", "detail")
        export_order = fields
