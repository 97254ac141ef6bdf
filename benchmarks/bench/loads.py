"""The requests of the phases that are not purchases: the floor's bare view,
and the pays and cancels of a sale's orders (with their owners' tokens)."""
from __future__ import annotations

import json
import random

from benchmarks.bench.generators import Load


def floor_requests(tokens: list[str], key_prefix: str = "floor") -> Load:
    """A purchase's request to the bare view: the same bytes, nothing behind them."""
    body = json.dumps({"sku_id": "FLOOR", "quantity": 1}).encode()
    rnd = random.Random(3)

    def make(i: int):
        return ("POST", "/floor", {"Authorization": f"Token {rnd.choice(tokens)}",
                                   "Content-Type": "application/json", "Idempotency-Key": f"{key_prefix}-{i}"}, body)

    return Load(make, {"path": "/floor", "tokens": tokens, "body": body, "key_prefix": key_prefix})


def pay_load(owned: list[tuple[str, str]], seed: int) -> Load:
    """Pay 80 %, cancel 20 % of the orders (order id, owner's token)."""
    rnd = random.Random(seed)
    jobs = [("POST", f"/api/v1/orders/{oid}/{'pay' if rnd.random() < 0.8 else 'cancel'}", tok) for oid, tok in owned]

    def make(i: int):
        method, path, token = jobs[i]
        return (method, path, {"Authorization": f"Token {token}"}, b"")

    return Load(make, jobs=jobs)


def tokens_by_user(tokens: list[str]) -> dict[int, str]:
    from rest_framework.authtoken.models import Token

    return dict(Token.objects.filter(key__in=tokens).values_list("user_id", "key"))


def owners_from_mysql(sku_ids: str | list[str], accepted, token_of: dict[int, str]) -> list[tuple[str, str]]:
    """(order id, owner's token) of the accepted orders MySQL holds (all of
    them once every acceptance is confirmed; one missing is a lost order, which
    the consistency check reports)."""
    from orders.models import Order

    sku_ids = [sku_ids] if isinstance(sku_ids, str) else sku_ids
    rows = Order.objects.filter(sku_id__in=sku_ids).values_list("order_id", "user_id").order_by("order_id")
    return [(oid, token_of[uid]) for oid, uid in rows if oid in accepted]
