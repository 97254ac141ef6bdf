from __future__ import annotations

from celery import shared_task

from inventory import redis_store
from reconciliation import alerts, retention, services
from reconciliation.models import ReconciliationRun


@shared_task(name="reconciliation.tasks.orphans_recover_task", acks_late=True, reject_on_worker_lost=True,
             expires=60)
def orphans_recover_task() -> dict:
    sweep = services.orphans_recover()
    redis_store.sweep_ran(task="reconciliation.tasks.orphans_recover_task")
    return {"republished": len(sweep.republished), "settled": len(sweep.settled)}


@shared_task(name="reconciliation.tasks.reconcile_task", expires=240)
def reconcile_task() -> dict:
    try:
        run = services.reconciliation_run(trigger=ReconciliationRun.Trigger.BEAT)
    except services.ReconciliationBusy:
        return {"skipped": "another run is going on"}
    finally:
        redis_store.sweep_ran(task="reconciliation.tasks.reconcile_task")
    return {"run": run.pk, "repairs": run.repairs, "alerts": run.alerts}


@shared_task(name="reconciliation.tasks.alerts_send_task", expires=120)
def alerts_send_task() -> dict:
    """New dead letters (and any alert finding a run could not send) to ops,
    each at most once."""
    sent = alerts.alerts_send()
    redis_store.sweep_ran(task="reconciliation.tasks.alerts_send_task")
    return sent


@shared_task(name="reconciliation.tasks.retention_sweep_task", expires=1800)
def retention_sweep_task() -> dict:
    """Beat: delete rows past their retention that nothing depends on, drop the
    Redis keys of ended SKUs past their grace (reconciliation.retention)."""
    done = retention.retention_sweep()
    # Recorded only once it completed: a sweep that keeps failing shows as late in health.
    redis_store.sweep_ran(task="reconciliation.tasks.retention_sweep_task")
    return done
