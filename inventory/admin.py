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
from django.utils.translation import gettext, gettext_lazy
from import_export.admin import ImportMixin

from core.errors import DomainError
from inventory.domain import validate_sku_id
from inventory.models import DeadLetter, InventoryLog, OutboxMessage, ReservationDecision, Sku
from inventory.redis import live as redis_live
from inventory.resources import InventoryLogResource, SkuExportResource, SkuImportResource, ViewerExportMixin
from inventory.services import skus, snapshots, stock

MOVE_STOCK = "inventory.move_stock"
BUCKETS = ("total_stock", "available_stock", "frozen_stock", "locked_stock", "sold_stock")


class SkuForm(forms.ModelForm):
    initial_stock = forms.IntegerField(
        min_value=0, required=False,
        help_text=gettext_lazy("Units on sale when the SKU is created. Later, use Restock."))

    class Meta:
        model = Sku
        fields = ("sku_id", "name", "price", "per_user_limit", "sale_starts_at", "sale_ends_at", "status")

    def clean_sku_id(self):
        # Only on the add form: the id is read-only once the SKU exists, so one
        # made before the SKU-id alphabet can still be edited (and ended).
        value = self.cleaned_data["sku_id"]
        validate_sku_id(value)
        return value

    def clean_per_user_limit(self):
        value = self.cleaned_data["per_user_limit"]
        if value is None or value < 1:
            raise forms.ValidationError(gettext_lazy("The per-user limit must be 1 or more."))
        return value

    def clean_price(self):
        value = self.cleaned_data["price"]
        if value is not None and value < 0:
            raise forms.ValidationError(gettext_lazy("The price cannot be negative."))
        return value

    def clean(self):
        data = super().clean()
        starts, ends = data.get("sale_starts_at"), data.get("sale_ends_at")
        if starts and ends and ends <= starts:
            self.add_error("sale_ends_at", gettext_lazy("The sale must end after it starts."))
        if not self.instance._state.adding:
            return data
        if data.get("initial_stock") is None:
            self.add_error("initial_stock", gettext_lazy("Give the initial stock (0 or more)."))
        return data


class StockActionForm(forms.Form):
    quantity = forms.IntegerField(min_value=1, max_value=10_000_000)
    reason = forms.CharField(max_length=200)


STOCK_ACTIONS = {
    # action: (title, service, needs quantity, button label)
    "freeze": (gettext_lazy("Freeze units (take them out of sale)"), stock.stock_freeze, True, gettext_lazy("Freeze")),
    "unfreeze": (gettext_lazy("Unfreeze units (back on sale)"), stock.stock_unfreeze, True, gettext_lazy("Unfreeze")),
    "restock": (gettext_lazy("Restock (new units on sale)"), stock.stock_restock, True, gettext_lazy("Restock")),
    "write_off": (gettext_lazy("Write off frozen units"), stock.stock_write_off, True, gettext_lazy("Write off")),
    "warm": (gettext_lazy("Warm the Redis snapshot (load it where absent)"), None, False, gettext_lazy("Warm")),
    "rebuild": (gettext_lazy("Rebuild the Redis snapshot from MySQL"), None, False, gettext_lazy("Rebuild")),
}


@admin.register(Sku)
class SkuAdmin(ImportMixin, ViewerExportMixin, admin.ModelAdmin):
    form = SkuForm
    change_form_template = "admin/inventory/sku/change_form.html"
    change_list_template = "admin/inventory/sku/change_list.html"
    # Import and Export beside the stock dashboard link, for whoever may use them.
    import_export_change_list_template = "admin/inventory/sku/change_list_import_export.html"
    import_template_name = "admin/inventory/sku/import.html"
    import_error_display = ("message", "row")
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
            self._live_cache = (obj, redis_live.live_stock(sku_id=obj.sku_id))
        return self._live_cache[1]

    @admin.display(description=gettext_lazy("Redis available"))
    def redis_available(self, obj: Sku):
        live = self._live(obj)
        return "not warm" if live is None else live.available

    @admin.display(description=gettext_lazy("In flight"))
    def in_flight(self, obj: Sku):
        live = self._live(obj)
        return "-" if live is None else live.inflight

    def has_delete_permission(self, request, obj=None):
        return False  # a SKU with history is ended (status), never deleted

    # --- import (new SKUs, through skus.skus_import) and export ---------------------
    def get_import_resource_classes(self, request):
        return [SkuImportResource]

    def get_export_resource_classes(self, request):
        return [SkuExportResource]

    def has_import_permission(self, request):
        # Creating SKUs from a file is the add form, many times.
        return self.has_add_permission(request)

    def process_result(self, result, request):
        """The confirmed run: when the service refused a row after the preview
        (nothing was written), show the rows again instead of "finished"."""
        if not (result.has_errors() or result.has_validation_errors()):
            return super().process_result(result, request)
        messages.error(request, gettext_lazy("Nothing was imported: fix the rows below and upload the file again."))
        resource_classes = self.get_import_resource_classes(request)
        form = self.get_import_form_class(request)(self.get_import_formats(), resource_classes)
        context = {**self.get_import_context_data(), **self.admin_site.each_context(request),
                   "title": gettext_lazy("Import"), "form": form, "opts": self.model._meta, "result": result,
                   "media": self.media + form.media, "import_error_display": self.import_error_display,
                   "fields_list": [(r.get_display_name(), [f.column_name for f in r().get_user_visible_fields()])
                                   for r in resource_classes]}
        return TemplateResponse(request, [self.import_template_name], context)

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
            messages.error(request, gettext_lazy("You do not have permission to move stock."))
            raise PermissionDenied(gettext_lazy("You do not have permission to move stock."))
        sku = get_object_or_404(Sku, pk=object_id)
        title, service, needs_quantity, label = STOCK_ACTIONS[action]
        form = StockActionForm(request.POST or None) if needs_quantity else None
        back = reverse("admin:inventory_sku_change", args=[sku.pk])
        if request.method == "POST" and (form is None or form.is_valid()):
            actor = f"admin:{request.user.get_username()}"
            try:
                if action == "warm":
                    if snapshots.stock_warm(sku_id=sku.sku_id, load_retired=True) is snapshots.Warm.FENCED:
                        done = gettext_lazy("Redis lost this SKU: its rebuild waits for the confirm queue "
                                            "and happens by itself within seconds.")
                    else:
                        done = gettext_lazy("Snapshot warm.")
                elif action == "rebuild":
                    snapshots.snapshot_rebuild(sku_id=sku.sku_id, actor=actor)
                    done = gettext_lazy("Snapshot rebuilt from MySQL.")
                else:
                    q, why = form.cleaned_data["quantity"], form.cleaned_data["reason"]
                    service(sku_id=sku.sku_id, quantity=q, reason=why, actor=actor)
                    # The button's label names the action in every language; the
                    # title's wording (and its parentheses) is the translator's.
                    done = gettext("%(action)s: %(quantity)s unit(s) of %(sku)s done.") % {
                        "action": label, "quantity": q, "sku": sku.sku_id}
                self.log_change(request, sku, f"stock action {action}: " + (
                    f"{form.cleaned_data['quantity']} ({form.cleaned_data['reason']})" if form else "done"))
                messages.success(request, done)
                return redirect(back)
            except DomainError as exc:
                messages.error(request, gettext("Refused: %(detail)s") % {"detail": exc.detail})
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "original": sku,
                   "title": f"{title}: {sku.sku_id}", "form": form, "action": action, "back": back,
                   "live": redis_live.live_stock(sku_id=sku.sku_id)}
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
class InventoryLogAdmin(ViewerExportMixin, ReadOnlyAdmin):
    resource_classes = [InventoryLogResource]
    list_display = ("created_at", "sku", "operation", "quantity", "order_id", "status", "actor", "reason")
    list_filter = ("operation", "status", "sku", "created_at")
    search_fields = ("order_id", "op_id")
    date_hierarchy = "created_at"


@admin.register(ReservationDecision)
class ReservationDecisionAdmin(ReadOnlyAdmin):
    """What became of each reservation the gate accepted, decided once
    (inventory.services.decisions): look an order id up here first."""

    list_display = ("decided_at", "order_id", "sku", "outcome", "reason", "actor")
    list_filter = ("outcome", "decided_at")
    search_fields = ("=order_id",)
    date_hierarchy = "decided_at"


class DeadLetterDiscardForm(forms.Form):
    reason = forms.CharField(
        label=gettext_lazy("Reason"), max_length=1000, widget=forms.Textarea(attrs={"rows": 3}),
        help_text=gettext_lazy("Why this dead letter is closed without a replay (kept for the audit)."))


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyAdmin):
    """Replay or discard, through inventory.services.dead_letters; both are
    recorded on the letter and in the admin log."""

    list_display = ("created_at", "task_name", "reason", "status", "resolved_by", "resolved_at")
    list_filter = ("status", "task_name")
    search_fields = ("reason", "resolution_note")
    actions = ("replay", "discard")

    def has_resolve_permission(self, request) -> bool:
        # Replaying moves stock: the same permission as the stock actions (ops).
        return request.user.has_perm(MOVE_STOCK)

    @admin.action(description=gettext_lazy("Replay the selected dead letters"), permissions=["resolve"])
    def replay(self, request, queryset):
        from inventory.services.dead_letters import dead_letter_replay

        actor = f"admin:{request.user.get_username()}"
        for letter in queryset.order_by("pk"):
            try:
                outcome = dead_letter_replay(dead_letter_id=letter.pk, actor=actor)
            except DomainError as exc:
                messages.warning(request, gettext_lazy("Dead letter %(id)s: %(detail)s") % {"id": letter.pk,
                                                                                   "detail": exc.detail})
                continue
            self.log_change(request, letter, f"replayed: {outcome.note()}")
            messages.success(request, gettext_lazy("Dead letter %(id)s replayed: %(note)s") % {"id": letter.pk,
                                                                                      "note": outcome.note()})

    @admin.action(description=gettext_lazy("Discard the selected dead letters (with a reason)"),
                  permissions=["resolve"])
    def discard(self, request, queryset):
        from django.contrib.admin import helpers

        from inventory.services.dead_letters import dead_letter_discard

        form = DeadLetterDiscardForm(request.POST if "apply" in request.POST else None)
        if form.is_bound and form.is_valid():
            actor = f"admin:{request.user.get_username()}"
            reason = form.cleaned_data["reason"]
            for letter in queryset.order_by("pk"):
                try:
                    dead_letter_discard(dead_letter_id=letter.pk, actor=actor, reason=reason)
                except DomainError as exc:
                    messages.warning(request, gettext_lazy("Dead letter %(id)s: %(detail)s") % {"id": letter.pk,
                                                                                       "detail": exc.detail})
                    continue
                self.log_change(request, letter, f"discarded: {reason}")
                messages.success(request, gettext_lazy("Dead letter %(id)s discarded.") % {"id": letter.pk})
            return None
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "form": form,
                   "letters": queryset.order_by("pk"), "title": gettext_lazy("Discard dead letters"),
                   "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME}
        return TemplateResponse(request, "admin/inventory/deadletter/discard.html", context)


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
