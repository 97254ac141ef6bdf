import time

from django.core.management.base import BaseCommand, CommandError

from inventory import redis_store, selectors
from inventory.services.skus import stock_warm


class Command(BaseCommand):
    help = ("Load SKU snapshots into Redis where absent (all SKUs when none is named). "
            "Progress goes to stderr: at most a line a second, and a last one.")

    def add_arguments(self, parser):
        parser.add_argument("sku_ids", nargs="*")

    def handle(self, *args, sku_ids: list[str], **_opts):
        ids = sku_ids or [s.sku_id for s in selectors.sku_list()]
        missing = []
        shown = time.monotonic()
        for done, sku_id in enumerate(ids):
            if time.monotonic() - shown >= 1:
                shown = time.monotonic()
                self.stderr.write(f"{done}/{len(ids)} SKUs", style_func=str)
            was_there = redis_store.snapshot_exists(sku_id=sku_id)
            if not stock_warm(sku_id=sku_id):
                missing.append(sku_id)
                continue
            live = redis_store.live_stock(sku_id=sku_id)
            state = "already warm" if was_there else "loaded"
            self.stdout.write(f"{sku_id}: {state}, available={live.available if live else '?'}")
        self.stderr.write(f"{len(ids)}/{len(ids)} SKUs", style_func=str)
        if missing:
            raise CommandError(f"unknown SKU(s): {', '.join(missing)}")
