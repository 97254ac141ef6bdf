from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy

from inventory.admin import ReadOnlyAdmin
from inventory.resources import ViewerExportMixin
from orders.models import Order, PaymentRefund
from orders.resources import OrderResource
from orders.services.payments import refund_resolve


@admin.register(Order)
class OrderAdmin(ViewerExportMixin, admin.ModelAdmin):
    resource_classes = [OrderResource]
    list_display = ("order_id", "sku", "user", "quantity", "amount", "currency", "status", "created_at", "expires_at")
    list_filter = ("status", "sku")
    search_fields = ("order_id", "idempotency_key", "user__username")
    readonly_fields = [f.name for f in Order._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


RESOLVE_REFUND = "orders.resolve_paymentrefund"


class RefundResolveForm(forms.Form):
    note = forms.CharField(
        label=gettext_lazy("Note"), max_length=1000, widget=forms.Textarea(attrs={"rows": 3}),
        help_text=gettext_lazy("The provider's refund reference, or why nothing is sent back (kept for the audit)."))

    def __init__(self, *args, note_required: bool, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["note"].required = note_required


@admin.register(PaymentRefund)
class PaymentRefundAdmin(ReadOnlyAdmin):
    """Captures the webhook could not turn into a payment: money the provider
    took that must go back. Support sees them; ops close them (refunded, or
    dismissed with a note) through orders.services.payments, each closing
    recorded on the refund and in the admin log."""

    list_display = ("created_at", "payment_id", "order_ref", "reason", "order_status", "amount", "currency", "status",
                    "resolved_by", "resolved_at")
    list_filter = ("status", "reason", "created_at")
    search_fields = ("payment_id", "order_ref")
    date_hierarchy = "created_at"
    readonly_fields = [f.name for f in PaymentRefund._meta.fields]
    actions = ("mark_refunded", "dismiss")

    def has_resolve_permission(self, request) -> bool:
        return request.user.has_perm(RESOLVE_REFUND)

    @admin.action(description=gettext_lazy("Mark the selected refunds refunded"), permissions=["resolve"])
    def mark_refunded(self, request, queryset):
        return self._resolve(request, queryset, action="mark_refunded", status=PaymentRefund.Status.REFUNDED,
                             title=gettext_lazy("Mark refunds refunded"), note_required=False)

    @admin.action(description=gettext_lazy("Dismiss the selected refunds (with a note)"), permissions=["resolve"])
    def dismiss(self, request, queryset):
        return self._resolve(request, queryset, action="dismiss", status=PaymentRefund.Status.DISMISSED,
                             title=gettext_lazy("Dismiss refunds"), note_required=True)

    def _resolve(self, request, queryset, *, action: str, status: str, title, note_required: bool):
        """A confirmation page with the note, then each open refund closed once."""
        form = RefundResolveForm(request.POST if "apply" in request.POST else None, note_required=note_required)
        if form.is_bound and form.is_valid():
            actor, note = f"admin:{request.user.get_username()}", form.cleaned_data["note"]
            for refund in queryset.order_by("pk"):
                if not refund_resolve(refund_id=refund.pk, status=status, actor=actor, note=note):
                    messages.warning(request, gettext_lazy("Refund %(payment)s was already closed.") % {
                        "payment": refund.payment_id})
                    continue
                self.log_change(request, refund, f"{status}: {note}" if note else status)
                messages.success(request, gettext_lazy("Refund %(payment)s: %(status)s.") % {
                    "payment": refund.payment_id, "status": PaymentRefund.Status(status).label})
            return None
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "form": form,
                   "refunds": queryset.order_by("pk"), "title": title, "action": action,
                   "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME}
        return TemplateResponse(request, "admin/orders/paymentrefund/resolve.html", context)
