"""Reconciliation runs, one row per SKU per run, and the findings with their repairs."""
from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class ReconciliationRun(models.Model):
    class Trigger(models.TextChoices):
        BEAT = "beat", _("Scheduled")
        COMMAND = "command", _("manage.py reconcile")
        ADMIN = "admin", _("Admin button")
    started_at = models.DateTimeField(verbose_name=_("started at"), auto_now_add=True)
    finished_at = models.DateTimeField(verbose_name=_("finished at"), null=True, blank=True)
    trigger = models.CharField(verbose_name=_("trigger"), max_length=16, choices=Trigger.choices)
    skus_checked = models.PositiveIntegerField(verbose_name=_("skus checked"), default=0)
    skus_drifting = models.PositiveIntegerField(verbose_name=_("skus drifting"), default=0)
    repairs = models.PositiveIntegerField(verbose_name=_("repairs"), default=0)
    orphans = models.PositiveIntegerField(verbose_name=_("orphans"), default=0)
    alerts = models.PositiveIntegerField(verbose_name=_("alerts"), default=0)
    error = models.TextField(verbose_name=_("error"), blank=True, default="")

    class Meta:
        ordering = ["-started_at", "-id"]
        verbose_name = _("reconciliation run")
        verbose_name_plural = _("reconciliation runs")
        indexes = [models.Index(fields=["started_at"], name="recon_run_time")]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.trigger}) {self.started_at:%Y-%m-%d %H:%M:%S}"


class SkuReconciliation(models.Model):
    """Both stores' figures for one SKU in one run.

    Expected relation: redis_available = mysql_available - in_flight - gives_unapplied,
    where in_flight counts reservations Redis holds that MySQL has not confirmed,
    and gives_unapplied the units MySQL gave back that Redis has not received yet.
    """

    class State(models.TextChoices):
        OK = "ok", _("In agreement")
        DRIFT = "drift", _("Drift seen once (waiting for a second look)")
        REPAIRED = "repaired", _("Repaired")
        ALERT = "alert", _("Alert for ops")
        REBUILT = "rebuilt", _("Snapshot rebuilt")
    run = models.ForeignKey(ReconciliationRun, verbose_name=_("run"), on_delete=models.CASCADE, related_name="rows")
    sku = models.ForeignKey("inventory.Sku", verbose_name=_("sku"), on_delete=models.PROTECT,
                            related_name="reconciliations")
    redis_available = models.BigIntegerField(verbose_name=_("redis available"), null=True)
    mysql_available = models.BigIntegerField(verbose_name=_("mysql available"))
    mysql_total = models.BigIntegerField(verbose_name=_("mysql total"))
    mysql_frozen = models.BigIntegerField(verbose_name=_("mysql frozen"))
    mysql_locked = models.BigIntegerField(verbose_name=_("mysql locked"))
    mysql_sold = models.BigIntegerField(verbose_name=_("mysql sold"))
    in_flight = models.BigIntegerField(verbose_name=_("in flight"), default=0)
    gives_unapplied = models.BigIntegerField(verbose_name=_("gives unapplied"), default=0)
    expected_redis = models.BigIntegerField(verbose_name=_("expected redis"))
    drift = models.BigIntegerField(verbose_name=_("drift"), default=0)
    state = models.CharField(verbose_name=_("state"), max_length=16, choices=State.choices, default=State.OK)

    class Meta:
        ordering = ["sku_id"]
        verbose_name = _("SKU reconciliation")
        verbose_name_plural = _("SKU reconciliations")
        indexes = [models.Index(fields=["sku", "run"], name="recon_sku_run")]


class Finding(models.Model):
    class Kind(models.TextChoices):
        ORPHAN_REPUBLISHED = "orphan_republished", _("Orphan reservation: confirm published again")
        INFLIGHT_SETTLED = "inflight_settled", _("Confirmed order still in flight: settled")
        OUTBOX_RESENT = "outbox_resent", _("Stale outbox message: sent again")
        FREEZES_CANCELLED = "freezes_cancelled", _("Unfinished freeze: cancelled")
        DRIFT_LOWERED = "drift_lowered", _("Redis above MySQL: lowered")
        DRIFT_RAISED = "drift_raised", _("Redis below MySQL, stable: raised")
        DRIFT_ALERT = "drift_alert", _("Drift that cannot be repaired safely")
        SNAPSHOT_REBUILT = "snapshot_rebuilt", _("Redis had lost the SKU: snapshot rebuilt")
        DEAD_LETTERS = "dead_letters", _("Dead letters waiting for ops")
    run = models.ForeignKey(ReconciliationRun, verbose_name=_("run"), on_delete=models.CASCADE, related_name="findings")
    sku = models.ForeignKey("inventory.Sku", verbose_name=_("sku"), on_delete=models.PROTECT, null=True, blank=True)
    kind = models.CharField(verbose_name=_("kind"), max_length=32, choices=Kind.choices)
    redis_value = models.BigIntegerField(verbose_name=_("redis value"), null=True, blank=True)
    mysql_value = models.BigIntegerField(verbose_name=_("mysql value"), null=True, blank=True)
    ids = models.TextField(verbose_name=_("ids"), blank=True, default="")
    detail = models.CharField(verbose_name=_("detail"), max_length=255, blank=True, default="")
    repaired = models.BooleanField(verbose_name=_("repaired"), default=False)

    class Meta:
        ordering = ["id"]
        verbose_name = _("finding")
        verbose_name_plural = _("findings")


class Alert(models.Model):
    """One alert per finding or dead letter: the row says who sends it. Inserted
    before anything is sent (its unique key refuses a second sender), so an
    alert goes out at most once, even with two runs at the same time."""

    finding = models.OneToOneField(Finding, verbose_name=_("finding"), on_delete=models.CASCADE, null=True, blank=True,
                                   related_name="alert")
    dead_letter = models.OneToOneField("inventory.DeadLetter", verbose_name=_("dead letter"), on_delete=models.CASCADE,
                                       null=True, blank=True, related_name="alert")
    created_at = models.DateTimeField(verbose_name=_("created at"), auto_now_add=True)
    # What the channels answered; a failure is recorded, never retried.
    outcome = models.CharField(verbose_name=_("outcome"), max_length=255, blank=True, default="")

    class Meta:
        ordering = ["-id"]
        verbose_name = _("alert")
        verbose_name_plural = _("alerts")
        constraints = [models.CheckConstraint(
            condition=models.Q(finding__isnull=False) | models.Q(dead_letter__isnull=False),
            name="alert_has_subject")]

    def __str__(self) -> str:
        return f"alert {self.pk}: " + (f"finding {self.finding_id}" if self.finding_id else
                                       f"dead letter {self.dead_letter_id}")


class RunLease(models.Model):
    """Who may run reconciliation now, and until when (reconciliation.lease).

    A row, not a MariaDB named lock: on a Galera cluster such a lock holds on the
    one node that took it, so after the front moves to another node a second
    run could start beside the first. A row's update is replicated and
    certified like any other write, whichever node takes it."""
    name = models.CharField(verbose_name=_("name"), max_length=64, primary_key=True)
    holder = models.CharField(verbose_name=_("holder"), max_length=64, blank=True, default="")
    expires_at = models.DateTimeField(verbose_name=_("expires at"), null=True, blank=True)

    class Meta:
        verbose_name = _("run lease")
        verbose_name_plural = _("run leases")

    def __str__(self) -> str:
        return f"{self.name}: {self.holder or 'free'}"
