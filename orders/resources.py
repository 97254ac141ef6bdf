"""What the order admin exports (CSV / XLSX): the order rows as stored."""
from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from import_export import fields

from inventory.resources import ExportResource
from orders.models import Order


class OrderResource(ExportResource):
    # ids, not rows: no query per exported line
    sku = fields.Field(attribute="sku_id", column_name="sku")
    user = fields.Field(attribute="user_id", column_name="user")

    class Meta:
        model = Order
        name = _("Orders")
        fields = ("order_id", "sku", "user", "quantity", "unit_price", "amount", "currency", "status", "bucket",
                  "failure_reason", "idempotency_key",
                  "payment_id", "created_at", "confirmed_at", "expires_at", "paid_at", "closed_at", "updated_at")
        export_order = fields
