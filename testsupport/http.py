"""Clients of the API: DRF's test client in-process (`api`, `post_order`, `place`), and
keep-alive connections to a real gunicorn from many threads (`Http`, `run_parallel`, `sell`)."""
from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def api():
    from rest_framework.test import APIClient

    def client(token: str | None = None) -> APIClient:
        c = APIClient()
        if token:
            c.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        return c

    return client


def post_order(client, sku_id: str, key: str | None = None, qty: int = 1, **extra):
    """POST /api/v1/orders through a DRF test client; the response."""
    return client.post("/api/v1/orders", {"sku_id": sku_id, "quantity": qty}, format="json",
                       HTTP_IDEMPOTENCY_KEY=key or uuid.uuid4().hex, **extra)


def place(client, sku_id: str, key: str | None = None, qty: int = 1) -> str:
    """A purchase that must be accepted; its order id."""
    r = post_order(client, sku_id, key, qty)
    assert r.status_code == 202, r.content
    return r.json()["order_id"]


class Http:
    """One keep-alive HTTP connection (per thread) to the test gunicorn."""

    def __init__(self, port: int):
        self.port = port
        self.conn = None

    def post_order(self, token: str, sku_id: str, qty: int, key: str) -> tuple[int, dict]:
        import http.client
        import json

        body = json.dumps({"sku_id": sku_id, "quantity": qty})
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json", "Idempotency-Key": key}
        for _ in range(3):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                self.conn.request("POST", "/api/v1/orders", body, headers)
                resp = self.conn.getresponse()
                return resp.status, json.loads(resp.read() or b"{}")
            except (ConnectionError, http.client.HTTPException):
                self.conn = None
        raise AssertionError("server kept dropping the connection")


def run_parallel(port: int, jobs: list[tuple[str, str, int, str]], threads: int = 32) -> list[tuple[int, dict]]:
    """POST orders (token, sku, quantity, key) over real HTTP from `threads` clients."""
    from concurrent.futures import ThreadPoolExecutor

    chunks = [jobs[i::threads] for i in range(threads)]

    def work(chunk):
        client = Http(port)
        return [client.post_order(*job) for job in chunk]

    with ThreadPoolExecutor(threads) as pool:
        return [r for part in pool.map(work, chunks) for r in part]


def sell(web_port: int, tokens: list[str], sku_id: str, n_threads: int = 24) -> list[tuple[int, dict]]:
    """Every token clicks once (quantity 1, a fresh key each)."""
    jobs = [(t, sku_id, 1, uuid.uuid4().hex) for t in tokens]
    return run_parallel(web_port, jobs, threads=n_threads)


def accepted_ids(results) -> set[str]:
    return {b["order_id"] for s, b in results if s == 202}
