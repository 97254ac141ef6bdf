import secrets
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = ("Create N buyer users and print one API token per line. Progress goes to "
            "stderr (at most a line a second, and a last one), so stdout stays the tokens.")

    def add_arguments(self, parser):
        parser.add_argument("--count", type=int, required=True)
        parser.add_argument("--prefix", default="buyer")

    def handle(self, *args, count: int, prefix: str, **_opts):
        if count < 1 or count > 1_000_000:
            raise CommandError("--count must be between 1 and 1000000.")
        User = get_user_model()
        batch = secrets.token_hex(4)
        tokens: list[str] = []
        shown = time.monotonic()
        for start in range(0, count, 1000):
            n = min(1000, count - start)
            with transaction.atomic():
                users = User.objects.bulk_create(
                    [User(username=f"{prefix}-{batch}-{start + i}", password="!") for i in range(n)]
                )
                if not all(u.pk for u in users):  # MariaDB returns no ids from bulk inserts
                    users = list(User.objects.filter(username__startswith=f"{prefix}-{batch}-")
                                 .exclude(auth_token__isnull=False).order_by("pk"))
                # One save per token so the Redis token record is written too.
                tokens.extend(Token.objects.create(user=user).key for user in users)
            if len(tokens) == count or time.monotonic() - shown >= 1:
                shown = time.monotonic()
                self.stderr.write(f"{len(tokens)}/{count} buyers", style_func=str)
        self.stdout.write("\n".join(tokens))
