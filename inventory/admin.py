"""The ops console. Every stock change goes through inventory's services, the same
code as the API; nothing here edits a bucket, a log row or an order by hand."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import LogEntry
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from inventory import redis_store, selectors
from inventory.services import skus, stock
from core.errors import DomainError
from inventory.models import DeadLetter, InventoryLog, OutboxMessage, Sku

MOVE_STOCK = "inventory.move_stock"
BUCKETS = ("total_stock", "available_stock", "frozen_stock", "locked_stock", "sold_stock")


class SkuForm(forms.ModelForm):
    initial_stock = forms.IntegerField(min_value=0, required=False,
                                       help_text="Units on sale when the SKU is created. Later, use Restock.")

    class Meta:
        model = Sku
        fields = ("sku_id", "name", "price", "per_user_limit", "sale_starts_at", "sale_ends_at", "status")

    def clean_per_user_limit(self):
        value = self.cleaned_data["per_user_limit"]
        if value is None or value < 1:
            raise forms.ValidationError("The per-user limit must be 1 or more.")
        return value

    def clean_price(self):
        value = self.cleaned_data["price"]
        if value is not None and value < 0:
            raise forms.ValidationError("The price cannot be negative.")
        return value

    def clean(self):
        data = super().clean()
        starts, ends = data.get("sale_starts_at"), data.get("sale_ends_at")
        if starts and ends and ends <= starts:
            self.add_error("sale_ends_at", "The sale must end after it starts.")
        if not self.instance._state.adding:
            return data
        if data.get("initial_stock") is None:
            self.add_error("initial_stock", "Give the initial stock (0 or more).")
        sku_id = data.get("sku_id") or ""
        if sku_id != sku_id.strip() or not sku_id.isprintable():
            self.add_error("sku_id", "Use printable characters without surrounding spaces.")
        return data


class StockActionForm(forms.Form):
    quantity = forms.IntegerField(min_value=1, max_value=10_000_000)
    reason = forms.CharField(max_length=200)


STOCK_ACTIONS = {
    # action: (title, service, needs quantity, button label)
    "freeze": ("Freeze units (take them out of sale)", stock.stock_freeze, True, "Freeze"),
    "unfreeze": ("Unfreeze units (back on sale)", stock.stock_unfreeze, True, "Unfreeze"),
    "restock": ("Restock (new units on sale)", stock.stock_restock, True, "Restock"),
    "write_off": ("Write off frozen units", stock.stock_write_off, True, "Write off"),
    "warm": ("Warm the Redis snapshot (load it where absent)", None, False, "Warm"),
    "rebuild": ("Rebuild the Redis snapshot from MySQL", None, False, "Rebuild"),
}


@admin.register(Sku)
class SkuAdmin(admin.ModelAdmin):
    form = SkuForm
    change_form_template = "admin/inventory/sku/change_form.html"
    change_list_template = "admin/inventory/sku/change_list.html"
    list_display = ("sku_id", "name", "status", "total_stock", "available_stock", "frozen_stock",
                    "locked_stock", "sold_stock", "redis_available", "in_flight", "per_user_limit",
                    "sale_starts_at", "sale_ends_at")
    list_filter = ("status",)
    search_fields = ("sku_id", "name")
    readonly_fields = BUCKETS + ("redis_available", "in_flight", "version", "created_at", "updated_at")

    def get_fieldsets(self, request, obj=None):
        sale = ("sku_id", "name", "price", "per_user_limit", "sale_starts_at", "sale_ends_at", "status")
        if obj is None:
            return [(None, {"fields": sale + ("initial_stock",)})]
        return [(None, {"fields": sale}),
                ("Stock (read-only: use the stock actions)", {"fields": BUCKETS + ("redis_available", "in_flight")}),
                ("Record", {"fields": ("version", "created_at", "updated_at")})]

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields + (("sku_id",) if obj is not None else ())

    def _live(self, obj: Sku):
        cache = getattr(self, "_live_cache", None)
        if cache is None or cache[0] is not obj:
            self._live_cache = (obj, redis_store.live_stock(sku_id=obj.sku_id))
        return self._live_cache[1]

    @admin.display(description="Redis available")
    def redis_available(self, obj: Sku):
        live = self._live(obj)
        return "not warm" if live is None else live.available

    @admin.display(description="In flight")
    def in_flight(self, obj: Sku):
        live = self._live(obj)
        return "-" if live is None else live.inflight

    def has_delete_permission(self, request, obj=None):
        return False  # a SKU with history is ended (status), never deleted

    def save_model(self, request, obj, form, change):
        actor = f"admin:{request.user.get_username()}"
        if not change:
            created = skus.sku_create(
                sku_id=obj.sku_id, stock=form.cleaned_data["initial_stock"], name=obj.name,
                per_user_limit=obj.per_user_limit, price=obj.price, starts_at=obj.sale_starts_at or timezone.now(),
                ends_at=obj.sale_ends_at, status=obj.status or Sku.Status.ACTIVE, actor=actor)
            # The admin goes on with `obj` (log entry, redirect): make it the saved row.
            obj.pk = created.pk
            obj._state.adding = False
            obj.refresh_from_db()
            return
        skus.sku_update(sku_id=obj.sku_id, actor=actor, **{f: getattr(obj, f) for f in skus.SALE_FIELDS})
        obj.refresh_from_db()

    # --- stock actions and dashboard -------------------------------------------
    def get_urls(self):
        own = [
            path("<path:object_id>/stock/<str:action>/", self.admin_site.admin_view(self.stock_action_view),
                 name="inventory_sku_stock_action"),
        ]
        return own + super().get_urls()

    def stock_action_view(self, request, object_id: str, action: str):
        if action not in STOCK_ACTIONS:
            raise PermissionDenied
        if not request.user.has_perm(MOVE_STOCK):
            messages.error(request, "You do not have permission to move stock.")
            raise PermissionDenied("You do not have permission to move stock.")
        sku = get_object_or_404(Sku, pk=object_id)
        title, service, needs_quantity, _label = STOCK_ACTIONS[action]
        form = StockActionForm(request.POST or None) if needs_quantity else None
        back = reverse("admin:inventory_sku_change", args=[sku.pk])
        if request.method == "POST" and (form is None or form.is_valid()):
            actor = f"admin:{request.user.get_username()}"
            try:
                if action == "warm":
                    skus.stock_warm(sku_id=sku.sku_id)
                    done = "Snapshot warm."
                elif action == "rebuild":
                    skus.snapshot_rebuild(sku_id=sku.sku_id, actor=actor)
                    done = "Snapshot rebuilt from MySQL."
                else:
                    q, why = form.cleaned_data["quantity"], form.cleaned_data["reason"]
                    service(sku_id=sku.sku_id, quantity=q, reason=why, actor=actor)
                    done = f"{title.split(' (')[0]}: {q} unit(s) of {sku.sku_id} done."
                self.log_change(request, sku, f"stock action {action}: " + (
                    f"{form.cleaned_data['quantity']} ({form.cleaned_data['reason']})" if form else "done"))
                messages.success(request, done)
                return redirect(back)
            except DomainError as exc:
                messages.error(request, f"Refused: {exc.detail}")
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "original": sku,
                   "title": f"{title}: {sku.sku_id}", "form": form, "action": action, "back": back,
                   "live": redis_store.live_stock(sku_id=sku.sku_id)}
        return TemplateResponse(request, "admin/inventory/sku/stock_action.html", context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = {**(extra_context or {}), "stock_actions": STOCK_ACTIONS,
                         "can_move_stock": request.user.has_perm(MOVE_STOCK)}
        return super().change_view(request, object_id, form_url, extra_context)


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
    list_filter = ("operation", "status", "sku", "created_at")
    search_fields = ("order_id", "op_id")
    date_hierarchy = "created_at"


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "task_name", "reason")
    search_fields = ("reason",)


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyAdmin):
    list_display = ("id", "topic", "sku", "op_id", "created_at", "sent_at", "attempts")
    list_filter = ("topic", ("sent_at", admin.EmptyFieldListFilter))
    search_fields = ("op_id",)


@admin.register(LogEntry)
class AdminAuditAdmin(ReadOnlyAdmin):
    """Who changed what in the admin, and when (Django's own admin log)."""

    list_display = ("action_time", "user", "content_type", "object_repr", "action_flag", "change_message")
    list_filter = ("action_flag", "content_type", "user")
    search_fields = ("object_repr", "change_message")
    date_hierarchy = "action_time"
