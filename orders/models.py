"""Orders of record. An order row is written by the confirm (never by the
request path, which touches only Redis); until then the order lives in Redis as
an in-flight reservation and in RabbitMQ as a confirm message."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class Order(models.Model):
    class Status(models.TextChoices):
        PROCESSING = "PROCESSING", _("Processing")
        PENDING_PAYMENT = "PENDING_PAYMENT", _("Pending payment")
        PAID = "PAID", _("Paid")
        CANCELLED = "CANCELLED", _("Cancelled")
        EXPIRED = "EXPIRED", _("Expired")
        FAILED = "FAILED", _("Failed")
    FINAL_STATUSES = (Status.PAID, Status.CANCELLED, Status.EXPIRED, Status.FAILED)

    class Bucket(models.TextChoices):
        """Where the SKU row counts this order's units. Pay, cancel and expiry
        decide on the order row at once; the mover (orders.movers) applies the
        move to the SKU row later, in batches, and sets this."""

        NONE = "none", _("None (refused)")
        LOCKED = "locked", _("Locked")
        SOLD = "sold", _("Sold")
        AVAILABLE = "available", _("Given back")
    # Orders whose units still sit in `locked` although their status says
    # otherwise: the moves not yet applied to the SKU row.
    MOVING_STATUSES = (Status.PAID, Status.CANCELLED, Status.EXPIRED)

    order_id = models.CharField(verbose_name=_("order id"), max_length=64, primary_key=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, verbose_name=_("user"), on_delete=models.PROTECT,
                             related_name="seckill_orders")
    sku = models.ForeignKey("inventory.Sku", verbose_name=_("sku"), on_delete=models.PROTECT, related_name="orders")
    quantity = models.PositiveIntegerField(verbose_name=_("quantity"))
    # What the order costs, recorded at the reservation: the SKU's price as the
    # gate's snapshot had it at the click (a later price change moves nothing
    # here). A capture must match amount and currency to pay the order.
    unit_price = models.DecimalField(verbose_name=_("unit price"), max_digits=12, decimal_places=2, default=0)
    amount = models.DecimalField(verbose_name=_("amount"), max_digits=14, decimal_places=2, default=0)
    currency = models.CharField(verbose_name=_("currency"), max_length=3, default="")
    status = models.CharField(verbose_name=_("status"), max_length=16, choices=Status.choices,
                              default=Status.PROCESSING)
    # NULL only for an order refused because the same key already made another
    # order (possible only after Redis lost its idempotency records).
    # Binary collation: a key is an opaque, case-sensitive string (the contract), and
    # MySQL must compare it exactly as Redis does.
    idempotency_key = models.CharField(verbose_name=_("idempotency key"), max_length=64, null=True, blank=True,
                                       db_collation="utf8mb4_bin")
    failure_reason = models.CharField(verbose_name=_("failure reason"), max_length=64, blank=True, default="")
    bucket = models.CharField(verbose_name=_("bucket"), max_length=10, choices=Bucket.choices, default=Bucket.LOCKED)
    # The payment provider's id (unique): a webhook delivered twice pays once.
    payment_id = models.CharField(verbose_name=_("payment id"), max_length=128, null=True, blank=True, unique=True,
                                  db_collation="utf8mb4_bin")
    created_at = models.DateTimeField(verbose_name=_("created at"), help_text="When Redis accepted the reservation.")
    confirmed_at = models.DateTimeField(verbose_name=_("confirmed at"), null=True, blank=True)
    expires_at = models.DateTimeField(verbose_name=_("expires at"), null=True, blank=True)
    paid_at = models.DateTimeField(verbose_name=_("paid at"), null=True, blank=True)
    closed_at = models.DateTimeField(verbose_name=_("closed at"), null=True, blank=True)
    updated_at = models.DateTimeField(verbose_name=_("updated at"), auto_now=True)

    class Meta:
        ordering = ["-created_at", "-order_id"]
        verbose_name = _("order")
        verbose_name_plural = _("orders")
        indexes = [
            models.Index(fields=["user", "created_at"], name="order_user_time"),
            models.Index(fields=["status", "expires_at"], name="order_status_expiry"),
            models.Index(fields=["sku", "status"], name="order_sku_status"),
            # The confirm reads the units each buyer holds of a SKU; snapshots
            # read a SKU's recent orders (its idempotency records).
            models.Index(fields=["sku", "user", "status"], name="order_sku_user"),
            models.Index(fields=["sku", "created_at"], name="order_sku_time"),
            # The mover finds the moves not yet applied: bucket locked, status final.
            models.Index(fields=["bucket", "status", "sku"], name="order_moves"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["user", "idempotency_key"], name="order_one_per_user_key"),
        ]

    def __str__(self) -> str:
        return f"{self.order_id} {self.sku_id} x{self.quantity} {self.status}"


class PaymentRefund(models.Model):
    """A capture the provider made that no order may keep: money to send back.

    Written by the payment webhook (orders.services.payments), once per provider
    payment id, when the capture arrives for an order that can no longer be paid
    (expired, cancelled, failed), for an order another payment already paid, with
    a payment id another order holds, or for an order MySQL does not know. It is
    a record only: no bucket moves, so no unit is ever sold twice. Ops close it
    in the admin once the provider's refund is made (or dismiss it, with a note).
    """

    class Reason(models.TextChoices):
        # The payment window had passed when the capture came (swept or not yet).
        ORDER_EXPIRED = "order_expired", _("Order expired")
        ORDER_CANCELLED = "order_cancelled", _("Order cancelled")
        ORDER_FAILED = "order_failed", _("Order failed")
        SECOND_CAPTURE = "second_capture", _("Order already paid by another payment")
        PAYMENT_ID_REUSED = "payment_id_reused", _("Payment id already paid another order")
        UNKNOWN_ORDER = "unknown_order", _("Unknown order")
        # The capture's amount or currency is not what the order costs.
        AMOUNT_MISMATCH = "amount_mismatch", _("Amount or currency differs from the order's")

    class Status(models.TextChoices):
        TO_REFUND = "to_refund", _("To refund")
        REFUNDED = "refunded", _("Refunded")
        DISMISSED = "dismissed", _("Dismissed")

    # Binary collation, as Order.payment_id: the provider's id is an exact string.
    payment_id = models.CharField(verbose_name=_("payment id"), max_length=128, unique=True, db_collation="utf8mb4_bin")
    order = models.ForeignKey(Order, verbose_name=_("order"), on_delete=models.PROTECT, null=True, blank=True,
                              related_name="refunds")
    # The order id the provider named (kept even when no such order exists).
    order_ref = models.CharField(verbose_name=_("order id sent"), max_length=64)
    reason = models.CharField(verbose_name=_("reason"), max_length=24, choices=Reason.choices)
    order_status = models.CharField(verbose_name=_("order status then"), max_length=16, blank=True, default="")
    # What the provider captured: the money to send back (null on rows recorded
    # before captures carried an amount: their order's price times quantity).
    amount = models.DecimalField(verbose_name=_("amount"), max_digits=14, decimal_places=2, null=True, blank=True)
    currency = models.CharField(verbose_name=_("currency"), max_length=3, blank=True, default="")
    status = models.CharField(verbose_name=_("status"), max_length=10, choices=Status.choices,
                              default=Status.TO_REFUND)
    created_at = models.DateTimeField(verbose_name=_("created at"), auto_now_add=True)
    resolved_by = models.CharField(verbose_name=_("resolved by"), max_length=200, blank=True, default="")
    resolved_at = models.DateTimeField(verbose_name=_("resolved at"), null=True, blank=True)
    resolution_note = models.TextField(verbose_name=_("note"), blank=True, default="")

    class Meta:
        verbose_name = _("payment refund")
        verbose_name_plural = _("payment refunds")
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "created_at"], name="refund_status_time")]
        permissions = [("resolve_paymentrefund", _("Can mark a payment refund made or dismissed"))]

    def __str__(self) -> str:
        return f"{self.payment_id} ({self.order_ref}) {self.reason} {self.status}"
