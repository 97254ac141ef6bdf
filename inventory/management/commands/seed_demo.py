import os
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from rest_framework.authtoken.models import Token

from accounts.services import AdminNotSuperuser, admin_ensure
from inventory import selectors
from inventory.services.skus import sku_create
from inventory.services.snapshots import stock_warm

DEMO_SKUS = (
    # sku_id, name, stock, per-user limit, price, starts in (hours)
    ("DEMO-PHONE", "Demo phone, launch edition", 100, 1, "999.00", 0),
    ("DEMO-EARBUDS", "Demo earbuds", 500, 2, "59.00", 0),
    ("DEMO-WATCH", "Demo watch, next week's drop", 50, 1, "299.00", 24 * 7),
)


class Command(BaseCommand):
    help = ("Local demo only: demo SKUs, an admin user (admin/admin unless SECKILL_ADMIN_USER / "
            "SECKILL_ADMIN_PASSWORD say otherwise), the demo users (ops/ops, support/support, a demo buyer), "
            "warmed stock. Safe to run twice. Refused outside local settings: a deployment creates its admin "
            "with ensure_admin and its SKUs itself.")

    def handle(self, *args, **_opts):
        if not settings.SECKILL_DEMO_USERS:
            # Demo SKUs go on sale at once: in a deployment they would be sold to real buyers.
            raise CommandError("seed_demo puts demo SKUs on sale and runs under local settings only; "
                               "a deployment creates its admin user with `manage.py ensure_admin`")
        User = get_user_model()
        username = os.environ.get("SECKILL_ADMIN_USER", "").strip() or "admin"
        password = os.environ.get("SECKILL_ADMIN_PASSWORD", "admin")
        try:
            created = admin_ensure(username=username, password=password, defaults_allowed=True)
        except AdminNotSuperuser as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"admin user: {username} / {password}" if created
                          else f"admin user {username} exists (password unchanged)")

        for name in ("ops", "support"):
            if not User.objects.filter(username=name).exists():
                user = User.objects.create_user(username=name, password=name, is_staff=True)
                user.groups.add(Group.objects.get(name=name))
                self.stdout.write(f"{name} user: {name} / {name} (group {name})")
        buyer, _ = User.objects.get_or_create(username="demo-buyer")
        token, _ = Token.objects.get_or_create(user=buyer)
        self.stdout.write(f"demo buyer token: {token.key}")

        now = timezone.now()
        for sku_id, name, stock, limit, price, hours in DEMO_SKUS:
            if selectors.sku_get(sku_id=sku_id) is None:
                sku_create(sku_id=sku_id, stock=stock, name=name, per_user_limit=limit, price=price,
                           starts_at=now + timedelta(hours=hours), actor="seed_demo")
                self.stdout.write(f"created {sku_id} ({stock} units)")
            else:
                warm = stock_warm(sku_id=sku_id)
                self.stdout.write(f"{sku_id} exists, snapshot {warm.value}")
