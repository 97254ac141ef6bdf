"""The token cache's scripts against the real Redis: key claims across SKUs, fills
that never override what is newer, the refresh of a record in use."""
from __future__ import annotations

import uuid

import pytest

from accounts import token_cache as tc

pytestmark = pytest.mark.redis_both


def claim(token, key, oid, sku="S", qty=1):
    return tc.key_claim_result(tc.key_claim_call(token=token, idempotency_key=key, quantity=qty, order_id=oid,
                                                 sku_id=sku).run())


def test_a_key_has_one_claim_across_skus_case_sensitive_and_forgotten_only_by_its_order():
    token = uuid.uuid4().hex
    tc.token_store(token=token, user_blob="1|1|0|someone")  # claims are read for a known token
    assert claim(token, "K", "a" * 32, sku="S1") is None
    other = claim(token, "K", "b" * 32, sku="S2")
    assert other == tc.KeyClaim("a" * 32, "S1", 1, other.claimed_ms)
    assert tc.authorize(token=token, idempotency_key="K").prior.order_id == "a" * 32
    assert tc.authorize(token=token, idempotency_key="k").prior is None  # case-sensitive
    tc.key_forget(token=token, idempotency_key="K", order_id="b" * 32)  # not its claim: kept
    assert tc.authorize(token=token, idempotency_key="K").prior is not None
    tc.key_forget(token=token, idempotency_key="K", order_id="a" * 32)
    assert tc.authorize(token=token, idempotency_key="K").prior is None
    assert [c.order_id for c in tc.user_claims(token=token)] == []


def test_an_unknown_token_is_answered_without_writing_anything():
    token = uuid.uuid4().hex
    found = tc.authorize(token=token, idempotency_key="K", bucket=10, every_ms=100)
    assert found.user_blob is None and found.prior is None and found.wait_ms == 0
    keys = tc.token_keys(token)
    assert not tc.redis().exists(keys.record, keys.claims, keys.rate)


def _blob(token):
    return tc.redis().hget(tc.token_keys(token).record, "u")


def _since():
    """The Redis time a request's first lookup returns, before it reads MySQL."""
    return tc.authorize(token=uuid.uuid4().hex, idempotency_key=None).now_ms


def test_a_fill_that_read_mysql_before_a_deletion_committed_cannot_bring_the_token_back():
    token = uuid.uuid4().hex
    since = _since()  # the fill's read of MySQL starts here...
    tc.token_revoking(token=token)  # ...the deletion runs, commits
    tc.token_forget(token=token)
    assert tc.token_fill(token=token, user_blob="1|1|0|someone", since_ms=since) is False
    assert _blob(token) == b"-"
    ttl = tc.redis().pttl(tc.token_keys(token).record)
    assert tc.FILL_BUDGET_MS < ttl <= tc.TOMBSTONE_MS  # the tombstone outlives any fill still allowed
    assert tc.authorize(token=token, idempotency_key=None).user_blob == "-"


def test_a_fill_never_overrides_an_authoritative_write_made_after_its_read_began():
    token = uuid.uuid4().hex
    since = _since()
    tc.token_store(token=token, user_blob="1|0|0|someone")  # deactivated, via the signals
    assert tc.token_fill(token=token, user_blob="1|1|0|someone", since_ms=since) is False
    assert _blob(token) == b"1|0|0|someone"
    # A read that began after that write may replace it (a refresh).
    assert tc.token_fill(token=token, user_blob="1|1|0|someone", since_ms=_since() + 1) is True
    assert _blob(token) == b"1|1|0|someone"


def test_a_fill_slower_than_its_budget_is_discarded():
    token = uuid.uuid4().hex
    assert tc.token_fill(token=token, user_blob="1|1|0|someone", since_ms=_since() - tc.FILL_BUDGET_MS - 10) is False
    assert _blob(token) is None


def test_a_store_does_not_undo_a_deletion_under_way():
    token = uuid.uuid4().hex
    tc.token_revoking(token=token)
    tc.token_store(token=token, user_blob="1|1|0|someone")  # e.g. the user saved meanwhile
    assert _blob(token) == b"-"


def test_a_record_close_to_its_expiry_is_handed_to_one_request_to_refresh(settings):
    settings.SECKILL_TOKEN_CACHE_SECONDS = 300
    token = uuid.uuid4().hex
    tc.token_store(token=token, user_blob="1|1|0|someone")
    assert tc.authorize(token=token, idempotency_key=None).refresh is False
    tc.redis().pexpire(tc.token_keys(token).record, 30_000)  # under a fifth of its lifetime left
    assert [tc.authorize(token=token, idempotency_key=None).refresh for _ in range(3)] == [True, False, False]
    lock = tc.redis().pttl(tc.token_keys(token).fill)
    assert 0 < lock <= tc.FILL_BUDGET_MS


def test_the_claims_fence_is_lifted_only_once_a_copy_passed_in_every_partition():
    """The lost claims named reservations of any SKU, in any partition of the
    confirm stream: the fence stands until each partition's copy has passed,
    and a new loss starts the count again."""
    from core.redis.shards import shards

    shard = shards()[0]
    fence = tc.claims_fence_key(shard.tag)
    P = tc.ClaimsFencePass

    def passes(token: str, partition: int, partitions: int = 3) -> tc.ClaimsFencePass:
        return tc.claims_fence_pass(shard_tag=shard.tag, token=token, partition=partition, partitions=partitions)

    first = tc.tokens_distrust(shard=shard, delay_ms=0)
    assert shard.client.get(fence).decode() == first  # the fence raised on the shard is the one returned
    assert [passes(first, 0), passes(first, 2), passes(first, 2)] == [P.WAITING] * 3  # a copy again: no more
    assert shard.client.get(fence) is not None
    second = tc.tokens_distrust(shard=shard, delay_ms=0)  # lost again: every partition must pass again
    assert passes(first, 1) is P.NOT_THIS  # a copy of the earlier loss's fence
    assert [passes(second, 1), passes(second, 2)] == [P.WAITING] * 2
    assert shard.client.get(fence) is not None
    assert passes(second, 0) is P.PASSED
    assert shard.client.get(fence) is None and not shard.client.exists(tc.claims_fence_passed_key(fence))
    assert passes(second, 0) is P.NOT_THIS

    one = tc.tokens_distrust(shard=shard, delay_ms=0)  # one partition: its copy lifts it, as before
    assert passes(one, 0, partitions=1) is P.PASSED and shard.client.get(fence) is None
