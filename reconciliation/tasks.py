from __future__ import annotations

from celery import shared_task

from reconciliation import services


@shared_task(name="reconciliation.tasks.orphans_recover_task", acks_late=True, reject_on_worker_lost=True,
             expires=60)
def orphans_recover_task() -> dict:
    sweep = services.orphans_recover()
    return {"republished": len(sweep.republished), "settled": len(sweep.settled)}
