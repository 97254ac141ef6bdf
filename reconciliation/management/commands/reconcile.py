from django.core.management.base import BaseCommand, CommandError

from reconciliation import services
from reconciliation.models import ReconciliationRun


class Command(BaseCommand):
    help = "Run one reconciliation now and print its summary."

    def handle(self, *args, **_opts):
        try:
            run = services.reconciliation_run(trigger=ReconciliationRun.Trigger.COMMAND)
        except services.ReconciliationBusy as exc:
            raise CommandError(f"{exc}; try again in a moment") from exc
        self.stdout.write(
            f"run {run.pk}: {run.skus_checked} SKU(s) checked, {run.skus_drifting} drifting, "
            f"{run.repairs} repair(s), {run.orphans} orphan(s), {run.alerts} alert(s)"
            + (f", error: {run.error}" if run.error else ""))
        for row in run.rows.select_related("sku"):
            self.stdout.write(
                f"  {row.sku_id}: redis={row.redis_available} mysql_available={row.mysql_available} "
                f"in_flight={row.in_flight} gives_unapplied={row.gives_unapplied} expected={row.expected_redis} "
                f"drift={row.drift} state={row.state}")
        for f in run.findings.all():
            self.stdout.write(f"  finding {f.kind} {f.sku_id or ''}: {f.detail}")
