"""The admin's two groups, kept after every `migrate`.

ops: everything support sees, plus SKU create/edit, the stock actions, the
beat schedule and closing payment refunds. support: read-only. Only staff users in one of them (or
superusers) reach the admin.
"""
from __future__ import annotations

ROLES = ("ops", "support")  # the groups below, by name (the admin's roles)
VIEW_MODELS = [
    ("inventory", "sku"), ("inventory", "inventorylog"), ("inventory", "reservationdecision"),
    ("inventory", "deadletter"), ("inventory", "outboxmessage"), ("orders", "order"), ("orders", "paymentrefund"),
    ("django_celery_beat", "periodictask"), ("django_celery_beat", "intervalschedule"),
    ("django_celery_beat", "crontabschedule"), ("admin", "logentry"),
    ("reconciliation", "reconciliationrun"), ("reconciliation", "skureconciliation"),
    ("reconciliation", "finding"),
]
OPS_EXTRA = [
    ("inventory", "add_sku"), ("inventory", "change_sku"), ("inventory", "move_stock"),
    ("django_celery_beat", "change_periodictask"), ("django_celery_beat", "add_intervalschedule"),
    ("django_celery_beat", "change_intervalschedule"), ("orders", "resolve_paymentrefund"),
]


def ensure_groups(**_kwargs) -> None:
    from django.contrib.auth.models import Group, Permission

    def perms(pairs):
        out = []
        for app, codename in pairs:
            p = Permission.objects.filter(content_type__app_label=app, codename=codename).first()
            if p is not None:
                out.append(p)
        return out

    view = perms([(app, f"view_{model}") for app, model in VIEW_MODELS])
    support, _ = Group.objects.get_or_create(name="support")
    support.permissions.set(view)
    ops, _ = Group.objects.get_or_create(name="ops")
    ops.permissions.set(view + perms(OPS_EXTRA))
