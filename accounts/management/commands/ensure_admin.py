import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from accounts.services import AdminNotSuperuser, AdminPasswordRefused, admin_ensure


class Command(BaseCommand):
    help = ("The admin user from SECKILL_ADMIN_USER (default admin) and SECKILL_ADMIN_PASSWORD, created once; "
            "an existing one keeps its password. Outside local settings a short or default password is "
            "refused. The production migrate step runs it (docker-compose.yml); it creates no demo data.")

    def handle(self, *args, **_opts):
        username = os.environ.get("SECKILL_ADMIN_USER", "").strip() or "admin"
        demo = settings.SECKILL_DEMO_USERS
        password = os.environ.get("SECKILL_ADMIN_PASSWORD", "admin" if demo else "")
        try:
            created = admin_ensure(username=username, password=password, defaults_allowed=demo)
        except (AdminPasswordRefused, AdminNotSuperuser) as exc:
            raise CommandError(str(exc)) from exc
        # Never the password: this runs in deployment logs.
        self.stdout.write(f"admin user {username} created" if created
                          else f"admin user {username} exists (password unchanged)")
