import threading
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.models import Max

from inventory import selectors as inventory_selectors
from reconciliation import lease, services
from reconciliation.models import ReconciliationRun, SkuReconciliation


class Command(BaseCommand):
    help = ("Run one reconciliation now and print its summary. Progress goes to stderr: "
            "at most a line a second, and a last one.")

    def handle(self, *args, **_opts):
        sku_ids = inventory_selectors.sku_ids_sweepable()
        progress = _Progress(lambda line: self.stderr.write(line, style_func=str), total=len(sku_ids),
                             after_run=ReconciliationRun.objects.aggregate(pk=Max("pk"))["pk"] or 0)
        started = time.monotonic()
        progress.start()
        try:
            run = services.reconciliation_run(trigger=ReconciliationRun.Trigger.COMMAND, sku_ids=sku_ids)
        except lease.ReconciliationBusy as exc:
            raise CommandError(f"{exc}; try again in a moment") from exc
        finally:
            progress.stop.set()
            progress.join()
        self.stderr.write(f"{run.skus_checked}/{len(sku_ids)} SKUs in {time.monotonic() - started:.1f} s",
                          style_func=str)
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


class _Progress(threading.Thread):
    """Writes "n/N SKUs" once a second while the run goes on, n counted from the
    rows the run has written so far: the service reports nothing as it goes, and
    a SKU takes at least the two looks of its observe gap."""

    def __init__(self, write, *, total: int, after_run: int):
        super().__init__(name="reconcile-progress", daemon=True)
        self.write, self.total, self.after_run = write, total, after_run
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.wait(1):
                done = SkuReconciliation.objects.filter(run_id__gt=self.after_run).count()
                self.write(f"{min(done, self.total)}/{self.total} SKUs")
        except Exception:  # a progress line is never worth failing the command
            pass
        finally:
            connection.close()  # this thread's own connection
