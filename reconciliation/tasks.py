from __future__ import annotations

from celery import shared_task

from inventory.redis import liveness
from reconciliation import alerts, retention, services
from reconciliation.models import ReconciliationRun

# Names of the sweeps beat sends (reconciliation.schedule stores them in its rows).
ORPHANS_RECOVER_TASK = "reconciliation.tasks.orphans_recover_task"
RECONCILE_TASK = "reconciliation.tasks.reconcile_task"
ALERTS_SEND_TASK = "reconciliation.tasks.alerts_send_task"
RETENTION_SWEEP_TASK = "reconciliation.tasks.retention_sweep_task"


@shared_task(name=ORPHANS_RECOVER_TASK, acks_late=True, reject_on_worker_lost=True,
             expires=60)
def orphans_recover_task() -> dict:
    sweep = services.orphans_recover()
    liveness.sweep_ran(task=ORPHANS_RECOVER_TASK)
    return {"republished": len(sweep.republished), "settled": len(sweep.settled)}


@shared_task(name=RECONCILE_TASK, expires=240)
def reconcile_task() -> dict:
    try:
        run = services.reconciliation_run(trigger=ReconciliationRun.Trigger.BEAT)
    except services.ReconciliationBusy:
        return {"skipped": "another run is going on"}
    finally:
        liveness.sweep_ran(task=RECONCILE_TASK)
    return {"run": run.pk, "repairs": run.repairs, "alerts": run.alerts}


@shared_task(name=ALERTS_SEND_TASK, expires=120)
def alerts_send_task() -> dict:
    """New dead letters (and any alert finding a run could not send) to ops,
    each at most once."""
    sent = alerts.alerts_send()
    liveness.sweep_ran(task=ALERTS_SEND_TASK)
    return sent


@shared_task(name=RETENTION_SWEEP_TASK, expires=1800)
def retention_sweep_task() -> dict:
    """Beat: delete rows past their retention that nothing depends on, drop the
    Redis keys of ended SKUs past their grace (reconciliation.retention)."""
    done = retention.retention_sweep()
    # Recorded only once it completed: a sweep that keeps failing shows as late in health.
    liveness.sweep_ran(task=RETENTION_SWEEP_TASK)
    return done
