# SKU ids get one alphabet: 1 to 64 characters of A-Z a-z 0-9 . _ -
# (inventory.domain.SKU_ID_PATTERN). Every SKU key in Redis carries the id as
# its Cluster hash tag, so an id with a brace spreads its keys over slots, and
# one starting with "@" takes the name of a claims fence. Ids made before the
# rule are REPORTED here, never changed: an id is the primary key the orders,
# the inventory log and the buyers' idempotency records refer to, and renaming
# it would be a data migration of its own that only ops can decide. The field
# change below touches no column (a validator is not in the schema).
# Spelled out here: a migration keeps the rules of its time.

import logging
import re
import sys

from django.db import migrations, models

import inventory.domain

ALPHABET = re.compile(r"[A-Za-z0-9._-]{1,64}")
SHOWN = 50

logger = logging.getLogger("inventory.migrations")


def report_ids_outside_the_alphabet(apps, schema_editor):
    Sku = apps.get_model("inventory", "Sku")
    outside = [(sku_id, status) for sku_id, status in Sku.objects.order_by("sku_id").values_list("sku_id", "status")
               .iterator(chunk_size=2000) if ALPHABET.fullmatch(sku_id) is None]
    if not outside:
        return
    live = [sku_id for sku_id, status in outside if status != "ended"]
    lines = [
        f"{len(outside)} SKU id(s) are outside the SKU-id alphabet (1 to 64 characters of A-Z a-z 0-9 . _ -), "
        f"{len(live)} of them not ended: "
        + ", ".join(repr(sku_id) + ("" if status != "ended" else " (ended)") for sku_id, status in outside[:SHOWN])
        + (" ..." if len(outside) > SHOWN else ""),
        ("They are left as they are. The API refuses them (400 invalid), the fencing of a new Redis instance skips "
         "them, and on a Redis Cluster they cannot be sold. For each one not ended: let its orders finish, end it "
         "(status ended in the admin) and create its stock again under an id of the alphabet. "
         "`manage.py check` lists the ones not ended until then."),
    ]
    for line in lines:
        logger.warning(line)
        sys.stdout.write(f"\n  {line}")
    sys.stdout.write("\n")


class Migration(migrations.Migration):

    dependencies = [
        ("inventory", "0012_reservation_decision"),
    ]

    operations = [
        migrations.AlterField(
            model_name="sku",
            name="sku_id",
            field=models.CharField(max_length=64, primary_key=True, serialize=False,
                                   validators=[inventory.domain.validate_sku_id], verbose_name="sku id"),
        ),
        migrations.RunPython(report_ids_outside_the_alphabet, migrations.RunPython.noop, elidable=True),
    ]
