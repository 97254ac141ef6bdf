import logging
import time

from django.core.management.base import BaseCommand, CommandError

from inventory import selectors
from inventory.redis import live as redis_live, snapshots as redis_snapshots
from inventory.services.snapshots import Warm, stock_warm

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = ("Load SKU snapshots into Redis where absent (all SKUs when none is named). A SKU Redis held "
            "and lost is rebuilt behind the confirm queue (the worker does it once every confirm accepted "
            "before the loss is in MySQL); the command waits for that up to --wait seconds. "
            "Progress goes to stderr: at most a line a second, and a last one.")

    def add_arguments(self, parser):
        parser.add_argument("sku_ids", nargs="*")
        parser.add_argument("--wait", type=float, default=30.0,
                            help="seconds to wait for fenced rebuilds (0: do not wait)")

    def handle(self, *args, sku_ids: list[str], wait: float, **_opts):
        ids = sku_ids or [s.sku_id for s in selectors.sku_list()]
        missing, fenced, failed = [], [], []
        shown = time.monotonic()
        for done, sku_id in enumerate(ids):
            if time.monotonic() - shown >= 1:
                shown = time.monotonic()
                self.stderr.write(f"{done}/{len(ids)} SKUs", style_func=str)
            try:  # one SKU's failure (its shard down, an id Redis refuses) does not stop the others
                self._warm(sku_id, missing, fenced)
            except Exception as exc:
                logger.exception("warm_stock: %s not warmed", sku_id)
                self.stdout.write(f"{sku_id}: not warmed: {exc!r}")
                failed.append(sku_id)
        self.stderr.write(f"{len(ids)}/{len(ids)} SKUs", style_func=str)
        deadline = time.monotonic() + wait
        while fenced:
            ready = [s for s in fenced if redis_snapshots.snapshot_exists(sku_id=s)]
            for sku_id in ready:
                self._say(sku_id, "rebuilt behind the confirm queue")
            fenced = [s for s in fenced if s not in ready]
            if not fenced or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        for sku_id in fenced:
            self.stdout.write(f"{sku_id}: fenced, the rebuild waits for the confirm consumer (is a worker running?)")
        problems = ([f"unknown SKU(s): {', '.join(missing)}"] if missing else []) + (
            [f"not warmed: {', '.join(failed)}"] if failed else [])
        if problems:
            raise CommandError("; ".join(problems))

    def _warm(self, sku_id: str, missing: list[str], fenced: list[str]) -> None:
        was_there = redis_snapshots.snapshot_exists(sku_id=sku_id)
        warm = stock_warm(sku_id=sku_id)
        if warm is Warm.UNKNOWN:
            missing.append(sku_id)
        elif warm is Warm.FENCED:
            fenced.append(sku_id)
        elif warm is Warm.RETIRED:
            self.stdout.write(f"{sku_id}: ended, its Redis keys dropped by retention (MySQL holds it; "
                              f"it loads when sold again)")
        else:
            self._say(sku_id, "already warm" if was_there else "loaded")

    def _say(self, sku_id: str, state: str) -> None:
        live = redis_live.live_stock(sku_id=sku_id)
        self.stdout.write(f"{sku_id}: {state}, available={live.available if live else '?'}")
