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
    user = models.ForeignKey(settings.AUTH_USER_MODEL, verbose_name=_("user"), on_delete=models.PROTECT, related_name="seckill_orders")
    sku = models.ForeignKey("inventory.Sku", verbose_name=_("sku"), on_delete=models.PROTECT, related_name="orders")
    quantity = models.PositiveIntegerField(verbose_name=_("quantity"))
    status = models.CharField(verbose_name=_("status"), max_length=16, choices=Status.choices, default=Status.PROCESSING)
    # NULL only for an order refused because the same key already made another
    # order (possible only after Redis lost its idempotency records).
    # Binary collation: a key is an opaque, case-sensitive string (API.md), and
    # MySQL must compare it exactly as Redis does.
    idempotency_key = models.CharField(verbose_name=_("idempotency key"), max_length=64, null=True, blank=True, db_collation="utf8mb4_bin")
    failure_reason = models.CharField(verbose_name=_("failure reason"), max_length=64, blank=True, default="")
    bucket = models.CharField(verbose_name=_("bucket"), max_length=10, choices=Bucket.choices, default=Bucket.LOCKED)
    # The payment provider's id (unique): a webhook delivered twice pays once.
    payment_id = models.CharField(verbose_name=_("payment id"), max_length=128, null=True, blank=True, unique=True, db_collation="utf8mb4_bin")
    created_at = models.DateTimeField(verbose_name=_("created at"), help_text="When Redis accepted the reservation.")
    confirmed_at = models.DateTimeField(verbose_name=_("confirmed at"), null=True, blank=True)
    expires_at = models.DateTimeField(verbose_name=_("expires at"), null=True, blank=True)
    paid_at = models.DateTimeField(verbose_name=_("paid at"), null=True, blank=True)
    closed_at = models.DateTimeField(verbose_name=_("closed at"), null=True, blank=True)
    updated_at = models.DateTimeField(verbose_name=_("updated at"), auto_now=True)

    class Meta:
        ordering = ["-created_at", "-order_id"]
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
