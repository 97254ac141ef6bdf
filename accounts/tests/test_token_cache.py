"""The token cache's scripts against the real Redis: key claims across SKUs."""
from __future__ import annotations

import uuid

from accounts import token_cache as tc


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
