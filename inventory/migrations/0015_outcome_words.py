"""The decision outcomes in the glossary's words (docs/architecture.md): a
refusal whose unit is dropped (was "refused"), one whose unit is returned
(was "failed"), a reservation its request undid (was "released"). A row an
older process writes meanwhile still reads right (ReservationDecision.LEGACY_OUTCOMES)."""
from django.db import migrations, models

RENAMES = {"refused": "dropped", "failed": "returned", "released": "undone"}


def rename(apps, schema_editor, pairs=RENAMES):
    ReservationDecision = apps.get_model("inventory", "ReservationDecision")
    for old, new in pairs.items():
        ReservationDecision.objects.filter(outcome=old).update(outcome=new)


def rename_back(apps, schema_editor):
    rename(apps, schema_editor, {new: old for old, new in RENAMES.items()})


class Migration(migrations.Migration):

    dependencies = [
        ("inventory", "0014_sku_order_tag"),
    ]

    operations = [
        migrations.AlterField(
            model_name="reservationdecision",
            name="outcome",
            field=models.CharField(choices=[
                ("confirmed", "Confirmed: an order took its units"),
                ("dropped", "Refused, its unit dropped (stock, or a lost Redis)"),
                ("returned", "Refused, its unit returned to sale (closed, key, limit)"),
                ("undone", "Undone by its request, or its replay refused")],
                max_length=10, verbose_name="outcome"),
        ),
        migrations.RunPython(rename, rename_back),
    ]
