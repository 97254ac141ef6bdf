"""The health figures of GET /api/v1/health, for container probes."""
import json

from django.core.management.base import BaseCommand, CommandError

from inventory.health import HEALTH_PARTS, system_health


class Command(BaseCommand):
    help = "Print the health figures (as GET /api/v1/health) and fail when a part named by --part fails."

    def add_arguments(self, parser):
        parser.add_argument("--part", action="append", choices=HEALTH_PARTS,
                            help="the part(s) that must be ok (default: all)")

    def handle(self, *args, part: list[str] | None, **_opts):
        body = system_health()
        self.stdout.write(json.dumps(body))
        failing = [p for p in (part or HEALTH_PARTS) if body.get(p) != "ok"]
        if failing:
            raise CommandError(f"failing: {', '.join(failing)}")
