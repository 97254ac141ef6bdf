"""Make InnoDB serve the order -> SKU foreign key from (sku_id, created_at).

InnoDB checks a foreign key again whenever an entry of the index it uses for
that key is rewritten, taking a shared lock on the parent row. It had picked
(sku_id, status), the first index starting with sku_id, so every pay, cancel or
expiry (a status change) waited for the SKU row's lock: the hot row again.
Dropping the two indexes that carry `status` moves the key onto the next one,
(sku_id, created_at), whose columns never change; then they come back.
"""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("orders", "0004_order_bucket"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="order", name="order_sku_status"),
        migrations.RemoveIndex(model_name="order", name="order_sku_user"),
        migrations.AddIndex(model_name="order",
                            index=models.Index(fields=["sku", "status"], name="order_sku_status")),
        migrations.AddIndex(model_name="order",
                            index=models.Index(fields=["sku", "user", "status"], name="order_sku_user")),
    ]
