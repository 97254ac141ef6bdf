"""The purchase requests of a sale, and what their answers accepted."""
from __future__ import annotations

import json
import random


def order_bodies(sku_ids: str | list[str]) -> list[bytes]:
    """The purchase body of each SKU (one unit)."""
    return [json.dumps({"sku_id": s, "quantity": 1}).encode()
            for s in ([sku_ids] if isinstance(sku_ids, str) else sku_ids)]


def order_requests(path: str, tokens: list[str], sku_id: str | list[str], used: dict[int, str] | None = None,
                   seed: int = 7, key_prefix: str | None = None):
    """Purchases of one SKU, or of several in turn (request i buys sku_id[i % n])."""
    bodies = order_bodies(sku_id)
    rnd = random.Random(seed)
    prefix = key_prefix or (sku_id if isinstance(sku_id, str) else sku_id[0])

    def make(i: int):
        token = rnd.choice(tokens)
        if used is not None:
            used[i] = token
        return ("POST", path, {"Authorization": f"Token {token}", "Content-Type": "application/json",
                               "Idempotency-Key": f"{prefix}-{i}"}, bodies[i % len(bodies)])

    return make


def accepted_ids(results) -> set[str]:
    out = set()
    for r in results:
        if r.status == 202:
            out.add(json.loads(r.body)["order_id"])
    return out


def accepted_skus(results, sku_ids: list[str] | None = None) -> dict[str, str]:
    """order id -> SKU id of every 202: the SKU the body names, else the one
    request i bought (sku_ids[i % n], as order_requests sends them)."""
    out = {}
    for r in results:
        if r.status == 202:
            body = json.loads(r.body)
            out[body["order_id"]] = body.get("sku_id") or sku_ids[r.index % len(sku_ids)]
    return out
