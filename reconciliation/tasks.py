from __future__ import annotations

from inventory.sweeps import sweep_task
from reconciliation import alerts, lease, retention, services
from reconciliation.models import ReconciliationRun

# Names of the sweeps beat sends (reconciliation.schedule stores them in its rows).
ORPHANS_RECOVER_TASK = "reconciliation.tasks.orphans_recover_task"
RECONCILE_TASK = "reconciliation.tasks.reconcile_task"
ALERTS_SEND_TASK = "reconciliation.tasks.alerts_send_task"
RETENTION_SWEEP_TASK = "reconciliation.tasks.retention_sweep_task"


@sweep_task(ORPHANS_RECOVER_TASK, acks_late=True, reject_on_worker_lost=True, expires=60)
def orphans_recover_task() -> dict:
    sweep = services.orphans_recover()
    return {"republished": len(sweep.republished), "settled": len(sweep.settled)}


# Recorded even when the run raises: it raises only when MySQL fails it (the
# run lock, the run's row), which health reports by itself; a busy run, which
# another one is doing, counts as run.
@sweep_task(RECONCILE_TASK, record_raised=True, expires=240)
def reconcile_task() -> dict:
    try:
        run = services.reconciliation_run(trigger=ReconciliationRun.Trigger.BEAT)
    except lease.ReconciliationBusy:
        return {"skipped": "another run is going on"}
    return {"run": run.pk, "repairs": run.repairs, "alerts": run.alerts}


@sweep_task(ALERTS_SEND_TASK, expires=120)
def alerts_send_task() -> dict:
    """New dead letters (and any alert finding a run could not send) to ops,
    each at most once."""
    return alerts.alerts_send()


@sweep_task(RETENTION_SWEEP_TASK, expires=1800)
def retention_sweep_task() -> dict:
    """Beat: delete rows past their retention that nothing depends on, drop the
    Redis keys of ended SKUs past their grace (reconciliation.retention)."""
    return retention.retention_sweep()
