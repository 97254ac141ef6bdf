import logging

from django.core.management.base import BaseCommand, CommandError

from core.redis.shards import shards
from inventory.redis import snapshots as redis_snapshots
from inventory.services.snapshots import snapshots_distrust

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = ("Distrust what Redis holds, as when it is found to be a new instance: every SKU snapshot of every shard "
            "dropped and fenced (and every live SKU MySQL has there), every token's claims fenced. Each SKU is "
            "rebuilt from MySQL by the worker once its fence comes out of the confirm queue, behind every message "
            "a 202 promised. For after MySQL was restored from a backup (bash scripts/restore --rebuild-redis), "
            "when Redis's stock may be ahead of or behind the restored rows.")

    def add_arguments(self, parser):
        parser.add_argument("--all", action="store_true", required=True,
                            help="every SKU of every shard (required: this pauses the whole sale briefly)")

    def handle(self, *args, **_opts):
        failed = []
        for shard in shards():
            try:
                snapshots_distrust(shard)
            except Exception as exc:  # one shard's failure does not stop the others'
                logger.exception("stock_distrust: shard %s not distrusted", shard.name)
                failed.append(f"{shard.name}: {exc!r}")
        standing = redis_snapshots.fences_listed()
        self.stdout.write(f"fenced: {len(standing)} fence(s) listed, sent through the confirm queue once due")
        if failed:
            raise CommandError("not distrusted: " + "; ".join(failed))
