"""On a Redis Cluster, one SKU made before the SKU-id alphabet cannot break
the others (issue 26). Its id starts with "}": an empty hash tag, so each of
its keys has a slot of its own and any script on them is CROSSSLOT. Such a SKU
was made on one Redis, where it works; the row is put in MySQL directly, as
that old database holds it. The first process to meet a new instance of its
shard fences the live SKUs MySQL has there: that check used to fail on it, and
with it create_sku of any other SKU (ClusterCrossSlotError) and every sale on
the shard. Now it is skipped, and the others fence, rebuild, warm and sell.

Runs only in scripts/test's cluster leg (REDIS_URL names a cluster)."""
from __future__ import annotations

import pytest
from django.utils import timezone

from core.redis.connection import clustered, redis
from core.redis.shards import shard_of
from inventory.domain import SkuFence
from inventory.models import Sku
from inventory.redis import keys as redis_keys, snapshots as redis_snapshots
from inventory.services.skus import sku_create
from inventory.services.snapshots import Warm, stock_warm
from testsupport import wait_until
from testsupport.factories import unique
from testsupport.http import post_order
from testsupport.stores import confirmed

pytestmark = [
    pytest.mark.redis_cluster, pytest.mark.worker,
    pytest.mark.skipif(not clustered(), reason="REDIS_URL names one Redis, not a Redis Cluster"),
]


def stock_shard(sku_id: str):
    return shard_of(redis(), redis_keys.sku_keys(sku_id).stock)


def on_shard(name: str) -> str:
    """A new SKU id (of the alphabet) whose keys live on that shard."""
    while True:
        sku_id = unique("T")
        if stock_shard(sku_id).name == name:
            return sku_id


@pytest.fixture
def legacy(live_db):
    """A live SKU whose id starts with "}", Redis held once (epoch 1); removed after."""
    sku = Sku.objects.create(sku_id="}" + unique("ACC"), name="legacy", total_stock=5, available_stock=5,
                             sale_starts_at=timezone.now(), status=Sku.Status.ACTIVE,
                             status_changed_at=timezone.now(), redis_epoch=1)
    yield sku
    Sku.objects.filter(pk=sku.pk).delete()


def test_a_sku_outside_the_alphabet_does_not_stop_a_new_instance_check(live_db, legacy, worker, api, make_buyers):
    keys = redis_keys.sku_keys(legacy.sku_id)
    assert len({redis().keyslot(k) for k in (keys.stock, keys.fence)}) == 2  # what the empty tag does
    shard = stock_shard(legacy.sku_id)
    sold = sku_create(sku_id=on_shard(shard.name), stock=5)  # on sale on the same shard before the move
    assert redis_snapshots.snapshot_exists(sku_id=sold.sku_id)

    # The shard is a new instance, as after a move to a new cluster: its script
    # cache is empty and it has no instance key, so the next script call there
    # (from any process) checks it and runs the new-instance fencing.
    shard.client.delete(shard.key("instance"))
    shard.client.script_flush()

    made = sku_create(sku_id=on_shard(shard.name), stock=3)  # raised ClusterCrossSlotError before
    assert stock_warm(sku_id=made.sku_id) is Warm.READY
    assert shard.client.get(shard.key("instance")) is not None  # the check completed and was recorded
    assert redis_snapshots.fence_token(sku_id=legacy.sku_id) is None  # never sent to Redis
    assert SkuFence(legacy.sku_id) not in redis_snapshots.fences_listed()

    # The SKU on sale before was fenced by the check; its fence passes the
    # worker's confirm queue and it is rebuilt exactly, then it sells again.
    wait_until(lambda: redis_snapshots.snapshot_exists(sku_id=sold.sku_id), timeout=30,
               what=f"{sold.sku_id} rebuilt behind its fence")
    (_, token), = make_buyers(1)
    client = api(token)

    def bought(sku_id: str) -> str | None:
        r = post_order(client, sku_id)
        assert r.status_code in (202, 503), r.content  # 503 while a fence of the check stands: nothing taken
        return r.json()["order_id"] if r.status_code == 202 else None

    for sku in (sold, made):
        confirmed(wait_until(lambda sku_id=sku.sku_id: bought(sku_id), timeout=30, interval=0.5,
                             what=f"{sku.sku_id} sold"))
    # And the legacy SKU is refused at the door, not answered 503 as a store outage.
    r = post_order(client, legacy.sku_id)
    assert r.status_code == 400 and r.json()["code"] == "invalid", r.content
