"""The store set of a run: its own MySQL database (and a MySQL user for the web
tier, whose statements the server counts), Redis database or key prefix, and
queue; made fresh at the start. Buyers and SKUs, placed on the masters of a
cluster. Call `configure` before anything imports Django."""
from __future__ import annotations

import contextlib
import os
import sys
import uuid

from benchmarks.harness import HOST, ROOT

DB_NAME = ""
WEB_DB_USER = ""
DB_PORT = 3306  # the MariaDB of the run: the machine's, or one of its own (the fault matrix's mariadb-restore)
DB_HOST = HOST  # the MariaDB the run's database lives on (the test bed's db1 with --hosts)


def configure(*, db_name: str, redis_db: int, queue: str, web_db_user: str | None = None,
              extra_env: dict[str, str] | None = None, redis_url: str | None = None,
              redis_prefix: str | None = None, db_port: int = 3306, db_host: str | None = None) -> None:
    """Point this process (and the servers it starts) at a store set of its own:
    Redis database `redis_db` of the single Redis, or `redis_url` (a Redis
    Cluster, redis+cluster://..., which has database 0 only: give it a
    `redis_prefix` of its own, SECKILL_REDIS_PREFIX)."""
    global DB_NAME, WEB_DB_USER, DB_PORT, DB_HOST
    DB_NAME, WEB_DB_USER = db_name, web_db_user or f"{db_name}_web"
    DB_PORT, DB_HOST = db_port, db_host or HOST
    os.environ.update(
        DJANGO_SETTINGS_MODULE="seckill_site.settings.local",
        DATABASE_URL=f"mysql://root:@{DB_HOST}:{DB_PORT}/{db_name}",
        REDIS_URL=redis_url or f"redis://127.0.0.1:6379/{redis_db}",
        SECKILL_QUEUE=queue,
        SECKILL_BENCH_ENDPOINTS="1",
        DJANGO_LOG_LEVEL="WARNING",
        **({"SECKILL_REDIS_PREFIX": redis_prefix} if redis_prefix else {}),
        **(extra_env or {}),
    )
    sys.path.insert(0, str(ROOT))


def cluster_base() -> int:
    """The local cluster's first port: SECKILL_REDIS_CLUSTER_BASE, as bash
    scripts/cluster reads it (7000 by default, the standard cluster)."""
    return int(os.environ.get("SECKILL_REDIS_CLUSTER_BASE") or 7000)


def cluster_url(base: int | None = None) -> str:
    """REDIS_URL of the local cluster on `base`, with its password (made on first use)."""
    from benchmarks.clusters import RedisCluster

    return RedisCluster(cluster_base() if base is None else base).url()


def fresh_stores() -> None:
    """Drop and create the database (and the web's MySQL user, whose statements
    the server counts), migrate, empty the Redis db and the queues."""
    import MySQLdb

    conn = MySQLdb.connect(host=DB_HOST, user="root", passwd="", port=DB_PORT)
    cur = conn.cursor()
    cur.execute(f"DROP DATABASE IF EXISTS {DB_NAME}")
    cur.execute(f"CREATE DATABASE {DB_NAME} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    for host in ("%", "localhost"):
        cur.execute(f"CREATE USER IF NOT EXISTS '{WEB_DB_USER}'@'{host}' IDENTIFIED BY ''")
        cur.execute(f"GRANT ALL PRIVILEGES ON {DB_NAME}.* TO '{WEB_DB_USER}'@'{host}'")
    cur.execute("SET GLOBAL userstat = 1")
    conn.close()

    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    redis_fresh()
    from inventory.messages.queues import confirm_queue_names_all
    from seckill_site.celery import app

    with app.connection_for_write() as c:
        for q in (settings.CELERY_QUEUE, *confirm_queue_names_all(), settings.CELERY_DEAD_LETTER_QUEUE):
            with contextlib.suppress(Exception):
                c.channel().queue_delete(q)


def redis_fresh() -> None:
    """Empty this run's Redis: its database of the single Redis (FLUSHDB), or
    on a cluster (shared, database 0 only) the keys of its own prefix, never a
    FLUSH. Then check every shard as new, as a process meeting it would, and
    lift the claims fence that check raises: nothing was in flight, and left
    standing it would answer the first purchases 503 until its message came
    out of the confirm queue."""
    from accounts import token_cache
    from core.redis.connection import clustered, redis
    from core.redis.instance import instance_check
    from core.redis.shards import forget_everything, shards
    from inventory.domain import ClaimsFence
    from inventory.redis import snapshots

    if clustered():
        forget_everything()
    else:
        redis().flushdb()
    for shard in shards():
        instance_check(shard, recorded_only=True)
        shard.client.delete(token_cache.claims_fence_key(shard.tag))
        snapshots.fence_forget(fence=ClaimsFence(shard.tag))


def make_buyers(n: int) -> list[str]:
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from rest_framework.authtoken.models import Token

    User = get_user_model()
    tag = uuid.uuid4().hex[:6]
    with transaction.atomic():
        User.objects.bulk_create([User(username=f"bench-{tag}-{i}", password="!") for i in range(n)])
    users = list(User.objects.filter(username__startswith=f"bench-{tag}-"))
    with transaction.atomic():
        return [Token.objects.create(user=u).key for u in users]


def new_sku(stock: int, limit: int = 10, prefix: str = "BENCH", sku_id: str | None = None) -> str:
    from inventory.services.skus import sku_create

    sku_id = sku_id or f"{prefix}-{uuid.uuid4().hex[:8]}"
    sku_create(sku_id=sku_id, stock=stock, per_user_limit=limit, actor="bench")
    return sku_id


def redis_masters() -> list[str]:
    """The nodes that serve the gate's slots now: the one Redis, or each
    master of the cluster (host:port), sorted."""
    from core.redis.shards import shards

    return sorted({shard.name for shard in shards()})


def master_of(sku_id: str) -> str:
    """The node serving the SKU's keys now (its hash tag's slot)."""
    from core.redis.connection import redis
    from core.redis.shards import shard_of
    from inventory.redis.keys import sku_keys

    return shard_of(redis(), sku_keys(sku_id).stock).name


def split_stock(total: int, parts: int) -> list[int]:
    """`total` units in `parts` shares as even as they go (the first ones a unit more)."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def new_skus(stock: int | list[int], limit: int = 10, prefix: str = "BENCH") -> list[str]:
    """New SKUs, one on each master (one SKU on the single Redis), in the
    order of redis_masters(), each with `stock` (or the stock of its place in
    the list): the ids are drawn until each master holds one (a SKU's keys
    share the hash tag {<sku id>}, whose slot says the master)."""
    masters = redis_masters()
    stocks = stock if isinstance(stock, list) else [stock] * len(masters)
    if len(stocks) != len(masters):
        raise ValueError(f"{len(stocks)} stocks for {len(masters)} masters")
    if len(masters) == 1:
        return [new_sku(stocks[0], limit, prefix)]
    chosen: dict[str, str] = {}
    while len(chosen) < len(masters):
        sku_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
        chosen.setdefault(master_of(sku_id), sku_id)
    return [new_sku(n, limit, sku_id=chosen[m]) for m, n in zip(masters, stocks)]


def evalsha_calls() -> dict[str, int]:
    """EVALSHA calls each master served so far (INFO commandstats): every
    script, the token's authorize and key claim as well as reserve, and every
    other client of that Redis."""
    from core.redis.shards import shards

    out = {}
    for shard in shards():
        stats = shard.client.info("commandstats")
        out[shard.name] = int(stats.get("cmdstat_evalsha", {}).get("calls", 0))
    return out


def web_statements() -> int:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT COALESCE(SUM(SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS), 0) "
                    "FROM information_schema.USER_STATISTICS WHERE USER = %s", [WEB_DB_USER])
        return int(cur.fetchone()[0])
