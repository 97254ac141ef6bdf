"""Health records kept in Redis: the ping, the confirm consumers' beats, when
each sweep last ran, and since when celery beat holds each task (the health
check reads them all, inventory.health)."""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from core.adapters.redis_py import layout_read
from core.redis.connection import clustered, redis
from core.redis.errors import RedisError
from core.redis.keys import text
from core.redis.shards import shards
from inventory.redis.keys import (
    BEAT_HELD_KEY,
    BEAT_STARTED_KEY,
    CONSUMERS_KEY,
    REGISTERED_KEY,
    REGISTERED_SEQ_KEY,
    SWEEPS_KEY,
)


def ping() -> bool | str:
    """True when Redis answers; on a cluster, when every shard's primary does
    (else which do not: their SKUs pause while the others sell)."""
    if not clustered():
        return bool(redis().ping())
    down = _shards_silent()
    if down:  # the layout may be old (a replica promoted since): read it again, once
        layout_read(redis())
        down = _shards_silent()
    return True if not down else f"error: no answer from the primary of {len(down)} shard(s): {', '.join(down)}"


def _shards_silent() -> list[str]:
    down = []
    for shard in shards():
        try:
            shard.client.ping()
        except RedisError:
            down.append(shard.name)
    return down


# --- Liveness of the confirm consumers ---------------------------------------------------

# A consumer of partition k > 0 beats as "<identity>#<k>"; partition 0's beat is
# the identity alone, as a single queue's consumer beats.
PARTITION_MARK = "#"


def consumer_member(identity: str, partition: int = 0) -> str:
    return identity if partition == 0 else f"{identity}{PARTITION_MARK}{partition}"


def member_partition(member: str) -> int:
    head, mark, tail = member.rpartition(PARTITION_MARK)
    return int(tail) if mark and head and tail.isdigit() else 0


def consumer_beat(*, identity: str, consuming: bool, partition: int = 0) -> None:
    now = int(time.time() * 1000)
    member = consumer_member(identity, partition)
    pipe = redis().pipeline(transaction=False)
    if consuming:
        pipe.zadd(CONSUMERS_KEY, {member: now})
    else:
        pipe.zrem(CONSUMERS_KEY, member)
    pipe.zremrangebyscore(CONSUMERS_KEY, "-inf", now - 3_600_000)
    pipe.execute()


def consumers_alive(*, within_s: float) -> list[str]:
    """The consumers (of any partition) that beat consuming within the last `within_s`."""
    now = int(time.time() * 1000)
    return [text(m) for m in redis().zrangebyscore(CONSUMERS_KEY, now - int(within_s * 1000), "+inf")]


def partitions_consumed(*, within_s: float) -> dict[int, int]:
    """Partition -> how many consumers of it beat consuming within the last
    `within_s` (one is the active one, the others stand by)."""
    out: dict[int, int] = {}
    for member in consumers_alive(within_s=within_s):
        p = member_partition(member)
        out[p] = out.get(p, 0) + 1
    return out


# --- The order in which the consumers of a partition registered ------------------------
# On a broker that makes the first registered consumer of a single-active-consumer
# queue the active one (RabbitMQ 3.x), a consumer of a partition its worker does
# not prefer gives the partition back to the worker that does: it takes a number
# before its basic.consume and one after it; a live preferred consumer of the
# partition whose after-number is higher than this one's before-number may have
# registered later (it stands by behind this one), so this one leaves between
# batches and registers again, behind it (orders.consumers).

@dataclass(frozen=True)
class Registration:
    identity: str
    partition: int
    before: int
    after: int
    preferred: bool


def registration_number() -> int:
    return int(redis().incr(REGISTERED_SEQ_KEY))


def registration_record(*, identity: str, partition: int, before: int, preferred: bool) -> Registration:
    """Record a registration (its before-number taken ahead of basic.consume,
    its after-number now)."""
    after = registration_number()
    redis().hset(REGISTERED_KEY, consumer_member(identity, partition), f"{before}:{after}:{int(preferred)}")
    return Registration(identity, partition, before, after, preferred)


def registration_drop(*, identity: str, partition: int) -> None:
    redis().hdel(REGISTERED_KEY, consumer_member(identity, partition))


def registrations(*, partition: int, within_s: float) -> list[Registration]:
    """The registrations of the partition's consumers that beat consuming within `within_s`."""
    alive = set(consumers_alive(within_s=within_s))
    out = []
    for member, raw in redis().hgetall(REGISTERED_KEY).items():
        member = text(member)
        if member not in alive or member_partition(member) != partition:
            continue
        before, after, preferred = text(raw).split(":")
        identity = member if partition == 0 else member[:-len(f"{PARTITION_MARK}{partition}")]
        out.append(Registration(identity, partition, int(before), int(after), preferred == "1"))
    return out


# --- When each sweep last ran (the health check's "beat") -------------------------------

def sweep_ran(*, task: str) -> None:
    redis().hset(SWEEPS_KEY, task, int(time.time() * 1000))


def sweeps_last_run() -> dict[str, int]:
    return {text(k): int(v) for k, v in redis().hgetall(SWEEPS_KEY).items()}


def beat_schedule_held(*, tasks: Sequence[str], started: bool) -> None:
    r = redis()
    now = int(time.time() * 1000)
    gone = {text(k) for k in r.hkeys(BEAT_HELD_KEY)} - set(tasks)
    pipe = r.pipeline(transaction=False)
    if started:
        pipe.set(BEAT_STARTED_KEY, now)
    for task in tasks:
        pipe.hsetnx(BEAT_HELD_KEY, task, now)
    if gone:
        pipe.hdel(BEAT_HELD_KEY, *gone)
    pipe.execute()


def beat_schedule_read() -> tuple[int | None, dict[str, int]]:
    """(when the running beat started, since when it holds each task), in ms."""
    pipe = redis().pipeline(transaction=False)
    pipe.get(BEAT_STARTED_KEY)
    pipe.hgetall(BEAT_HELD_KEY)
    started, held = pipe.execute()
    return (None if started is None else int(started)), {text(k): int(v) for k, v in held.items()}
