"""What an order costs, recorded on it: unit price, amount and currency.

Orders made before this migration never recorded a price; they get their SKU's
price of today (what the payment webhook used until now) and the shop's
currency, so every row carries an amount."""
from django.conf import settings
from django.db import migrations, models
from django.db.models import F, OuterRef, Subquery


def backfill(apps, schema_editor):
    Order = apps.get_model("orders", "Order")
    Sku = apps.get_model("inventory", "Sku")
    price = Subquery(Sku.objects.filter(pk=OuterRef("sku_id")).values("price")[:1])
    Order.objects.filter(currency="").update(unit_price=price, currency=settings.SECKILL_CURRENCY)
    Order.objects.update(amount=F("unit_price") * F("quantity"))


class Migration(migrations.Migration):

    dependencies = [
        ("orders", "0008_order_model_names"),
        ("inventory", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="order",
            name="unit_price",
            field=models.DecimalField(decimal_places=2, default=0, max_digits=12, verbose_name="unit price"),
        ),
        migrations.AddField(
            model_name="order",
            name="amount",
            field=models.DecimalField(decimal_places=2, default=0, max_digits=14, verbose_name="amount"),
        ),
        migrations.AddField(
            model_name="order",
            name="currency",
            field=models.CharField(default="", max_length=3, verbose_name="currency"),
        ),
        migrations.AddField(
            model_name="paymentrefund",
            name="currency",
            field=models.CharField(blank=True, default="", max_length=3, verbose_name="currency"),
        ),
        migrations.AlterField(
            model_name="paymentrefund",
            name="reason",
            field=models.CharField(choices=[
                ("order_expired", "Order expired"), ("order_cancelled", "Order cancelled"),
                ("order_failed", "Order failed"), ("second_capture", "Order already paid by another payment"),
                ("payment_id_reused", "Payment id already paid another order"), ("unknown_order", "Unknown order"),
                ("amount_mismatch", "Amount or currency differs from the order's")],
                max_length=24, verbose_name="reason"),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
