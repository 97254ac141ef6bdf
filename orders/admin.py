from django.contrib import admin

from inventory.resources import ViewerExportMixin
from orders.models import Order
from orders.resources import OrderResource


@admin.register(Order)
class OrderAdmin(ViewerExportMixin, admin.ModelAdmin):
    resource_classes = [OrderResource]
    list_display = ("order_id", "sku", "user", "quantity", "status", "created_at", "expires_at")
    list_filter = ("status", "sku")
    search_fields = ("order_id", "idempotency_key", "user__username")
    readonly_fields = [f.name for f in Order._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
