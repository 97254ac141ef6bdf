"""/api/schema/ describes the API exactly: schemathesis, with every check it
has, runs every phase against a real gunicorn (real MySQL, Redis, RabbitMQ)
and finds nothing; and the declarations the schema comes from are the ones
the handlers enforce."""
from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest

from testsupport import ROOT, VENV_BIN
from testsupport.processes import start_web

SEED = 17
# What the run may answer beside 2xx, and why each is right for a valid request:
# 404 a drawn id that names nothing; 409 a sale's state (sold out, limit, not
# payable); 422 a drawn Idempotency-Key drawn again with another body; 429 a
# rate; 503 the only 5xx the contract has (health answers it with no beat running).
CONFIG = """
[checks]
not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "503"]
positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422", "429", "503"]
"""


WEBHOOK_SECRET = "schema-test-secret"
# A fuzzer cannot forge an HMAC: this hook signs the webhook's positive cases
# as the provider would (the bytes sent, now), so they must be accepted; the
# negative ones keep the header drawn (or its absence) and must be refused.
HOOKS = f"SECRET = {WEBHOOK_SECRET!r}\n" + """
import hashlib, hmac, json, time

import schemathesis


@schemathesis.hook
def before_call(context, case, kwargs):
    if not case.path.endswith("/payments/webhook") or case.meta is None \\
            or not case.meta.generation.mode.is_positive or not isinstance(case.body, dict):
        return
    # The bytes requests sends for json= (json.dumps, default separators).
    body = json.dumps(case.body).encode()
    stamp = str(int(time.time()))
    digest = hmac.new(SECRET.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    case.headers = {**(case.headers or {}), "Seckill-Signature": f"t={stamp},v1={digest}"}
"""


@pytest.fixture(scope="module", params=["webhook on", "webhook off"])
def schema_web(request, process_env):
    """A server with the payment webhook on, and one without it (where the
    endpoint does not exist and the schema must not show it)."""
    secret = WEBHOOK_SECRET if request.param == "webhook on" else ""
    # Failed-token probes (ignored_auth) come from one address: no limit on them here.
    proc = start_web(process_env, name="web-schema", SECKILL_AUTH_FAILURES_PER_MINUTE="0",
                     SECKILL_PAYMENT_WEBHOOK_SECRET=secret)
    proc.webhook_secret = secret
    yield proc
    proc.stop()


@pytest.fixture
def demo_sku(live_db):
    """The SKU the schema's examples name, with stock for the whole run."""
    from inventory.models import Sku
    from inventory.services.skus import sku_create

    if not Sku.objects.filter(pk="DEMO-PHONE").exists():
        sku_create(sku_id="DEMO-PHONE", stock=10**6, per_user_limit=10**6)


def test_schemathesis_with_every_check_finds_nothing(schema_web, demo_sku, make_buyers, process_env, tmp_path):
    token = make_buyers(1)[0][1]
    (tmp_path / "schemathesis.toml").write_text(CONFIG)
    (tmp_path / "seckill_schema_hooks.py").write_text(HOOKS)
    env = dict(process_env, SCHEMATHESIS_HOOKS="seckill_schema_hooks",
               PYTHONPATH=f"{tmp_path}:{ROOT}", SECKILL_PAYMENT_WEBHOOK_SECRET=schema_web.webhook_secret)
    base = f"http://127.0.0.1:{schema_web.port}"
    paths = json.loads(urllib.request.urlopen(f"{base}/api/schema/", timeout=10).read())["paths"]
    assert ("/api/v1/payments/webhook" in paths) is bool(schema_web.webhook_secret)
    run = subprocess.run(
        [str(VENV_BIN / "st"), "--config-file", str(tmp_path / "schemathesis.toml"), "run", f"{base}/api/schema/",
         "--url", base, "--checks", "all", "--phases", "examples,coverage,fuzzing,stateful",
         "--max-examples", "25", "--seed", str(SEED), "--generation-deterministic", "--workers", "1",
         "-H", f"Authorization: Token {token}", "--no-color", "--report-dir", str(tmp_path / "report")],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    log = ROOT / "var" / "test-logs" / f"schemathesis-{'on' if schema_web.webhook_secret else 'off'}.txt"
    log.write_text(run.stdout + run.stderr)
    assert run.returncode == 0, f"schemathesis found something (all of it in {log}):\n" + run.stdout[-8000:]
