from django.contrib import admin

from inventory import redis_store
from inventory.models import ConsumerDedup, DeadLetter, InventoryLog, OutboxMessage, Sku


@admin.register(Sku)
class SkuAdmin(admin.ModelAdmin):
    list_display = ("sku_id", "name", "status", "total_stock", "available_stock", "frozen_stock",
                    "locked_stock", "sold_stock", "redis_available", "per_user_limit", "sale_starts_at")
    search_fields = ("sku_id", "name")
    readonly_fields = ("total_stock", "available_stock", "frozen_stock", "locked_stock", "sold_stock",
                       "redis_available", "version", "created_at", "updated_at")

    @admin.display(description="Redis available")
    def redis_available(self, obj: Sku):
        live = redis_store.live_stock(sku_id=obj.sku_id)
        return "not warm" if live is None else live.available


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(InventoryLog)
class InventoryLogAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "sku", "operation", "quantity", "order_id", "status", "actor", "reason")
    list_filter = ("operation", "status", "sku")
    search_fields = ("order_id", "op_id")
    date_hierarchy = "created_at"


@admin.register(ConsumerDedup)
class ConsumerDedupAdmin(ReadOnlyAdmin):
    list_display = ("business_id", "operation", "created_at")
    search_fields = ("business_id",)


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "task_name", "reason")
    search_fields = ("reason",)


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyAdmin):
    list_display = ("id", "topic", "sku", "op_id", "created_at", "sent_at", "attempts")
    list_filter = ("topic", ("sent_at", admin.EmptyFieldListFilter))
    search_fields = ("op_id",)
