import os
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from rest_framework.authtoken.models import Token

from inventory import selectors
from inventory.services.skus import sku_create, stock_warm

DEMO_SKUS = (
    # sku_id, name, stock, per-user limit, price, starts in (hours)
    ("DEMO-PHONE", "Demo phone, launch edition", 100, 1, "999.00", 0),
    ("DEMO-EARBUDS", "Demo earbuds", 500, 2, "59.00", 0),
    ("DEMO-WATCH", "Demo watch, next week's drop", 50, 1, "299.00", 24 * 7),
)
WEAK_PASSWORDS = {"admin", "password", "ops", "support", "changeme", "seckill"}


class Command(BaseCommand):
    help = ("Demo SKUs and an admin user, with warmed stock; under local settings also the demo users "
            "(ops/ops, support/support, a demo buyer). Safe to run twice.")

    def handle(self, *args, **_opts):
        User = get_user_model()
        demo = settings.SECKILL_DEMO_USERS
        username = os.environ.get("SECKILL_ADMIN_USER", "admin")
        password = os.environ.get("SECKILL_ADMIN_PASSWORD", "admin" if demo else "")
        admin = User.objects.filter(username=username).first()
        if admin is None:
            if not demo and (len(password) < 12 or password.lower() in WEAK_PASSWORDS):
                raise CommandError("outside local settings, SECKILL_ADMIN_PASSWORD must be set to a password of "
                                   "12 or more characters (no default password here)")
            User.objects.create_superuser(username=username, email="", password=password)
            self.stdout.write(f"admin user: {username}" + (f" / {password}" if demo else ""))
        else:
            self.stdout.write(f"admin user {username} exists (password unchanged)")

        if demo:
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
