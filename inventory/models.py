"""Stock of record (MySQL): one row per SKU with its buckets, the inventory log
that audits every operation, the decision about each reservation, the dead
letters, and the outbox of gives for Redis."""
from __future__ import annotations

from django.db import models
from django.db.models import F, Func, Q, Value
from django.db.models.functions import Lower, LPad
from django.utils.translation import gettext_lazy as _

from inventory.domain import validate_sku_id


class Sku(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", _("Active")
        PAUSED = "paused", _("Paused")
        ENDED = "ended", _("Ended")
    sku_id = models.CharField(verbose_name=_("sku id"), max_length=64, primary_key=True, validators=[validate_sku_id])
    name = models.CharField(verbose_name=_("name"), max_length=200)
    price = models.DecimalField(verbose_name=_("price"), max_digits=12, decimal_places=2, default=0)
    total_stock = models.BigIntegerField(verbose_name=_("total stock"), default=0)
    available_stock = models.BigIntegerField(verbose_name=_("available stock"), default=0)
    frozen_stock = models.BigIntegerField(verbose_name=_("frozen stock"), default=0)
    locked_stock = models.BigIntegerField(verbose_name=_("locked stock"), default=0)
    sold_stock = models.BigIntegerField(verbose_name=_("sold stock"), default=0)
    per_user_limit = models.PositiveIntegerField(verbose_name=_("per user limit"), default=1)
    sale_starts_at = models.DateTimeField(verbose_name=_("sale starts at"), null=True, blank=True)
    sale_ends_at = models.DateTimeField(verbose_name=_("sale ends at"), null=True, blank=True)
    status = models.CharField(verbose_name=_("status"), max_length=16, choices=Status.choices, default=Status.ACTIVE)
    # When ops last changed the status: a reservation the gate accepted after a
    # pause or end (a push to Redis that was late or lost) is refused by the confirm.
    status_changed_at = models.DateTimeField(verbose_name=_("status changed at"), null=True, blank=True)
    # Bumped by every edit of sale data so caches can tell a stale copy.
    version = models.PositiveIntegerField(verbose_name=_("version"), default=1)
    # How many times a Redis snapshot of this SKU was loaded (0: never). A SKU
    # Redis had once and lost is rebuilt behind the broker (a fence), never at
    # once; a reservation of an older load that reaches the confirm after the
    # rebuild was not counted by it and is refused.
    redis_epoch = models.PositiveIntegerField(verbose_name=_("Redis snapshot epoch"), default=0, editable=False)
    # Set when retention dropped the Redis keys of this ended SKU whole, with
    # nothing in flight or pending (inventory.services.retention); cleared by
    # the next snapshot load, which bumps the epoch in the same UPDATE. While
    # set, a missing snapshot is no Redis loss: MySQL holds everything.
    redis_dropped_at = models.DateTimeField(verbose_name=_("Redis keys dropped at"), null=True, blank=True,
                                            editable=False)
    # The head of this SKU's order ids (inventory.domain.order_tag computes the
    # same 8 hex digits of CRC-32): MySQL finds the SKU of an order id that is
    # still in flight in Redis, with no index kept by the purchase path.
    order_tag = models.GeneratedField(
        expression=Lower(LPad(Func(Func(F("sku_id"), function="CRC32"), function="HEX"), 8, Value("0"))),
        output_field=models.CharField(max_length=8), db_persist=True, verbose_name=_("order id tag"), db_index=True)
    created_at = models.DateTimeField(verbose_name=_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(verbose_name=_("updated at"), auto_now=True)

    class Meta:
        ordering = ["sku_id"]
        verbose_name = _("SKU")
        verbose_name_plural = _("SKUs")
        permissions = [("move_stock", _("Can freeze, unfreeze, restock, write off and rebuild stock"))]
        indexes = [models.Index(fields=["status", "status_changed_at"], name="sku_status_time")]
        constraints = [
            models.CheckConstraint(
                condition=Q(total_stock=F("available_stock") + F("frozen_stock") + F("locked_stock") + F("sold_stock")),
                name="sku_buckets_sum_to_total",
            ),
            models.CheckConstraint(
                condition=(Q(available_stock__gte=0) & Q(frozen_stock__gte=0) & Q(locked_stock__gte=0)
                           & Q(sold_stock__gte=0)),
                name="sku_buckets_not_negative",
            ),
            models.CheckConstraint(condition=Q(per_user_limit__gte=1), name="sku_per_user_limit_positive"),
            models.CheckConstraint(
                condition=(Q(sale_ends_at__isnull=True) | Q(sale_starts_at__isnull=True)
                           | Q(sale_ends_at__gt=F("sale_starts_at"))),
                name="sku_sale_window_ordered",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.sku_id} ({self.name})"


class InventoryLog(models.Model):
    """One row per stock operation: the audit anchor of that operation."""

    class Operation(models.TextChoices):
        DECR = "DECR", _("Sale take (order confirmed)")
        INCR = "INCR", _("Give back (cancel / expiry)")
        FREEZE = "FREEZE", _("Freeze")
        UNFREEZE = "UNFREEZE", _("Unfreeze")
        RESTOCK = "RESTOCK", _("Restock")
        WRITE_OFF = "WRITE_OFF", _("Write off frozen")
        REPAIR = "REPAIR", _("Reconciliation repair")
    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        SUCCESS = "success", _("Success")
        FAIL = "fail", _("Fail")
    sku = models.ForeignKey(Sku, verbose_name=_("sku"), on_delete=models.PROTECT, related_name="log")
    operation = models.CharField(verbose_name=_("operation"), max_length=16, choices=Operation.choices)
    quantity = models.PositiveIntegerField(verbose_name=_("quantity"))
    # NULL for operations that belong to no order (ops moves); unique with the
    # operation otherwise, so an order has at most one row per operation.
    order_id = models.CharField(verbose_name=_("order id"), max_length=64, null=True, blank=True, default=None)
    op_id = models.CharField(verbose_name=_("op id"), max_length=64, blank=True, default="")
    status = models.CharField(verbose_name=_("status"), max_length=8, choices=Status.choices, default=Status.PENDING)
    reason = models.CharField(verbose_name=_("reason"), max_length=255, blank=True, default="")
    actor = models.CharField(verbose_name=_("actor"), max_length=150, blank=True, default="")
    created_at = models.DateTimeField(verbose_name=_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(verbose_name=_("updated at"), auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("inventory log entry")
        verbose_name_plural = _("inventory log")
        indexes = [
            models.Index(fields=["sku", "created_at"], name="invlog_sku_time"),
            models.Index(fields=["status", "created_at"], name="invlog_status_time"),
            # A give's log row is found by its operation id; pending gives and
            # freezes of a SKU are read by snapshots and reconciliation.
            models.Index(fields=["op_id"], name="invlog_op"),
            models.Index(fields=["sku", "status", "operation"], name="invlog_sku_pending"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["order_id", "operation"], name="invlog_one_row_per_order_operation"),
        ]

    def __str__(self) -> str:
        return f"{self.operation} {self.quantity} of {self.sku_id} [{self.status}]"


# Operations whose Redis half travels through the outbox (gives: MySQL first).
GIVE_OPERATIONS = (InventoryLog.Operation.INCR, InventoryLog.Operation.UNFREEZE,
                   InventoryLog.Operation.RESTOCK, InventoryLog.Operation.WRITE_OFF)


class ReservationDecision(models.Model):
    """What became of one reservation the gate accepted, decided once and never
    rewritten: the record exactly-once rests on. Its order id is unique, so of
    the confirm (which makes the order, or refuses it), an undo at the request
    and a refused dead-letter replay exactly one decides; the others read the
    decision and follow it. One writer: inventory.services.decisions. The
    inventory log stays the audit of stock; nothing is decided from it."""

    class Outcome(models.TextChoices):
        # The settle of each in Redis follows from it (orders.services.confirm);
        # the words are the glossary's (docs/architecture.md).
        CONFIRMED = "confirmed", _("Confirmed: an order took its units")
        DROPPED = "dropped", _("Refused, its unit dropped (stock, or a lost Redis)")
        RETURNED = "returned", _("Refused, its unit returned to sale (closed, key, limit)")
        UNDONE = "undone", _("Undone by its request, or its replay refused")

    # The words of an older release: a process of that release still writes them
    # during an upgrade (migration 0015 renamed the stored ones), and such a row
    # reads as its outcome.
    LEGACY_OUTCOMES = {"refused": "dropped", "failed": "returned", "released": "undone"}

    # Binary collation, as the order ids everywhere: an exact, opaque string.
    order_id = models.CharField(verbose_name=_("order id"), max_length=64, unique=True, db_collation="utf8mb4_bin")
    sku = models.ForeignKey(Sku, verbose_name=_("sku"), on_delete=models.PROTECT, related_name="decisions")
    outcome = models.CharField(verbose_name=_("outcome"), max_length=10, choices=Outcome.choices)
    # For people (the refusal's code, or why it was undone); never read as state.
    reason = models.CharField(verbose_name=_("reason"), max_length=255, blank=True, default="")
    actor = models.CharField(verbose_name=_("actor"), max_length=150, blank=True, default="")
    decided_at = models.DateTimeField(verbose_name=_("decided at"))

    class Meta:
        ordering = ["-decided_at", "-id"]
        verbose_name = _("reservation decision")
        verbose_name_plural = _("reservation decisions")

    def __str__(self) -> str:
        return f"{self.order_id} {self.outcome}"


class DeadLetter(models.Model):
    """A message that was refused or kept failing: kept for ops, never retried by
    itself. Ops replay it or discard it with a reason (inventory.services.dead_letters);
    either closes it for good, and who, when and why stay on the row."""

    class Status(models.TextChoices):
        OPEN = "open", _("Open")
        REPLAYED = "replayed", _("Replayed")
        DISCARDED = "discarded", _("Discarded")

    task_name = models.CharField(_("task"), max_length=200)
    payload = models.JSONField(_("payload"))
    reason = models.CharField(_("reason"), max_length=255)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    status = models.CharField(_("status"), max_length=16, choices=Status.choices, default=Status.OPEN)
    resolved_by = models.CharField(_("resolved by"), max_length=150, blank=True, default="")
    resolved_at = models.DateTimeField(_("resolved at"), null=True, blank=True)
    resolution_note = models.TextField(_("resolution note"), blank=True, default="")

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("dead letter")
        verbose_name_plural = _("dead letters")
        indexes = [models.Index(fields=["status", "created_at"], name="deadletter_status_time")]

    def __str__(self) -> str:
        return f"{self.task_name}: {self.reason}"


class OutboxMessage(models.Model):
    """A message that must exist if and only if its MySQL transaction committed.

    Written in the same transaction as the stock move it announces; the relay
    publishes unsent rows (right after commit, and again from a beat sweep).
    """

    class Topic(models.TextChoices):
        STOCK_GIVE = "stock_give", _("Give stock back to Redis")
    topic = models.CharField(verbose_name=_("topic"), max_length=32, choices=Topic.choices)
    sku = models.ForeignKey(Sku, verbose_name=_("sku"), on_delete=models.PROTECT, related_name="outbox")
    op_id = models.CharField(verbose_name=_("op id"), max_length=96, unique=True)
    payload = models.JSONField(verbose_name=_("payload"))
    created_at = models.DateTimeField(verbose_name=_("created at"), auto_now_add=True)
    sent_at = models.DateTimeField(verbose_name=_("sent at"), null=True, blank=True)
    attempts = models.PositiveIntegerField(verbose_name=_("attempts"), default=0)
    # A give whose log row stays pending (it met no snapshot, or its message was
    # lost) is sent again no sooner than this (backing off, capped).
    next_attempt_at = models.DateTimeField(verbose_name=_("next attempt at"), null=True, blank=True)

    class Meta:
        ordering = ["id"]
        verbose_name = _("outbox message")
        verbose_name_plural = _("outbox messages")
        indexes = [models.Index(fields=["sent_at", "created_at"], name="outbox_unsent")]

    def __str__(self) -> str:
        return f"{self.topic} {self.op_id} ({'sent' if self.sent_at else 'unsent'})"
