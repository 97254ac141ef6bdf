# The decision about each reservation gets its own record (ReservationDecision);
# until now the sale (DECR) log row stood for it. The back-fill gives every
# reservation MySQL decided before the upgrade the decision the confirm read
# then, so a copy of its message delivered after the upgrade is treated the same:
# - an order exists: it was the confirm's decision. Not FAILED: confirmed;
#   FAILED for stock or a lost Redis snapshot: refused (Redis keeps the unit off
#   sale); FAILED for another reason: failed (its unit back on sale);
# - a sale log row but no order (an undo at the request, or a dead-letter replay
#   refused): released. The confirm read any such row as released, whatever its
#   reason text, so the reason only travels along for people.
# Spelled out here: a migration keeps the rules of its time.

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import Exists, OuterRef

UNIT_KEPT_BY_REDIS = ("insufficient_stock", "snapshot_lost")
CHUNK = 1000


def outcome_of_order(status, failure_reason):
    if status != "FAILED":
        return "confirmed"
    return "refused" if failure_reason in UNIT_KEPT_BY_REDIS else "failed"


def _write(Decision, rows):
    for i in range(0, len(rows), CHUNK):
        Decision.objects.bulk_create(rows[i:i + CHUNK])


def decisions_backfill(apps, schema_editor):
    Decision = apps.get_model("inventory", "ReservationDecision")
    InventoryLog = apps.get_model("inventory", "InventoryLog")
    Order = apps.get_model("orders", "Order")
    # Ids decided already are left alone, so running it again adds nothing twice.
    decided = Exists(Decision.objects.filter(order_id=OuterRef("order_id")))
    orders = Order.objects.exclude(decided).order_by().values_list(
        "order_id", "sku_id", "user_id", "status", "failure_reason", "confirmed_at", "created_at")
    _write(Decision, [Decision(order_id=oid, sku_id=sku_id, outcome=outcome_of_order(status, why), reason=why,
                               actor=f"user:{user_id}", decided_at=confirmed_at or created_at)
                      for oid, sku_id, user_id, status, why, confirmed_at, created_at in orders.iterator()])
    released = (InventoryLog.objects.filter(operation="DECR", order_id__isnull=False)
                .exclude(Exists(Order.objects.filter(order_id=OuterRef("order_id")))).exclude(decided).order_by())
    _write(Decision, [Decision(order_id=oid, sku_id=sku_id, outcome="released", reason=why[:255], actor=actor,
                               decided_at=created_at)
                      for oid, sku_id, why, actor, created_at in released.values_list(
                          "order_id", "sku_id", "reason", "actor", "created_at").iterator()])


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0011_model_names_and_dead_letter_kinds'),
        ('orders', '0007_payment_refund'),
    ]

    operations = [
        migrations.CreateModel(
            name='ReservationDecision',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('order_id', models.CharField(db_collation='utf8mb4_bin', max_length=64, unique=True, verbose_name='order id')),
                ('outcome', models.CharField(choices=[('confirmed', 'Confirmed: an order took its units'), ('refused', 'Refused by MySQL, its unit off sale (stock, or a lost Redis)'), ('failed', 'Refused by MySQL, its unit back on sale (closed, key, limit)'), ('released', 'Released: undone at the request, or a replay refused')], max_length=10, verbose_name='outcome')),
                ('reason', models.CharField(blank=True, default='', max_length=255, verbose_name='reason')),
                ('actor', models.CharField(blank=True, default='', max_length=150, verbose_name='actor')),
                ('decided_at', models.DateTimeField(verbose_name='decided at')),
                ('sku', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='decisions', to='inventory.sku', verbose_name='sku')),
            ],
            options={
                'verbose_name': 'reservation decision',
                'verbose_name_plural': 'reservation decisions',
                'ordering': ['-decided_at', '-id'],
            },
        ),
        # Reversed by dropping the table: the log rows it was read from are untouched.
        migrations.RunPython(decisions_backfill, migrations.RunPython.noop),
    ]
