"""A deployment that is safe by default: production settings need every secret
and server URL from the environment, pass `check --deploy`, and the compose
file takes every secret from the environment."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "seckill_site.settings.production",
    "DJANGO_SECRET_KEY": "k3y-" + "x9Qv" * 14,
    "SECKILL_TASK_SIGNING_KEY": "s1gn-" + "Zp7w" * 10,
    "DATABASE_URL": "mysql://seckill:pw@db.internal:3306/seckill",
    "REDIS_URL": "redis://:pw@cache.internal:6379/0",
    "CELERY_BROKER_URL": "amqp://seckill:pw@mq.internal:5672//",
    "SECKILL_PAYMENT_WEBHOOK_SECRET": "whsec-" + "Rt8m" * 10,
}


def manage(*args, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in PRODUCTION_ENV and not k.startswith("SECKILL_")}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**clean, **env},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("missing", ["DJANGO_SECRET_KEY", "SECKILL_TASK_SIGNING_KEY", "DATABASE_URL", "REDIS_URL",
                                     "CELERY_BROKER_URL"])
def test_production_refuses_to_start_without_each_required_variable(missing):
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != missing}
    out = manage("check", env=env)
    assert out.returncode != 0 and missing in out.stderr, out.stderr[-800:]


@pytest.mark.parametrize(("change", "word"), [
    ({"SECKILL_TASK_SIGNING_KEY": PRODUCTION_ENV["DJANGO_SECRET_KEY"]}, "SECKILL_TASK_SIGNING_KEY"),
    ({"DJANGO_SECRET_KEY": "short"}, "DJANGO_SECRET_KEY"),
    ({"CELERY_BROKER_URL": "amqp://guest:guest@mq.internal:5672//"}, "guest"),
    ({"DJANGO_DEBUG": "1"}, "DJANGO_DEBUG"),
])
def test_production_refuses_weak_or_shared_secrets(change, word):
    out = manage("check", env={**PRODUCTION_ENV, **change})
    assert out.returncode != 0 and word in out.stderr, out.stderr[-800:]


def test_production_refuses_to_start_when_nothing_could_pay_an_order():
    """Buyer pay is off by default in production; without the webhook's secret
    no order could ever be paid, so the settings refuse to load."""
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "SECKILL_PAYMENT_WEBHOOK_SECRET"}
    for extra in ({}, {"SECKILL_BUYER_PAY": "0"}):
        out = manage("check", env={**env, **extra})
        assert out.returncode != 0, out.stdout
        assert "SECKILL_PAYMENT_WEBHOOK_SECRET" in out.stderr and "SECKILL_BUYER_PAY" in out.stderr, out.stderr[-800:]


def test_production_buyer_pay_is_an_opt_in_that_warns_at_every_start():
    from django.conf import settings

    out = manage("shell", "-c", "from django.conf import settings; print('buyer pay', settings.SECKILL_BUYER_PAY)",
                 env=PRODUCTION_ENV)
    assert out.returncode == 0 and "buyer pay False" in out.stdout, out.stderr[-800:]
    assert "SECKILL_BUYER_PAY" not in out.stderr
    # the opt-in starts even without a webhook, and says loudly what it allows
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "SECKILL_PAYMENT_WEBHOOK_SECRET"}
    out = manage("shell", "-c", "from django.conf import settings; print('buyer pay', settings.SECKILL_BUYER_PAY)",
                 env={**env, "SECKILL_BUYER_PAY": "1"})
    assert out.returncode == 0 and "buyer pay True" in out.stdout, out.stderr[-800:]
    [warning] = [line for line in out.stderr.splitlines() if "SECKILL_BUYER_PAY=1" in line]
    assert "WARNING" in warning and "any buyer can mark an order PAID" in warning, warning
    assert settings.SECKILL_BUYER_PAY  # the local and test settings keep the demo path


def test_a_buyer_pay_under_the_production_default_is_409_payment_by_provider(process_env, worker, api, make_sku,
                                                                              make_buyers):
    """A real web tier under the production settings, with nothing about
    payments set but the webhook's secret: the buyer's POST pay is refused, with
    or without a payment id, and the order stays unpaid."""
    import http.client
    import json

    from orders.models import Order
    from testsupport.http import place
    from testsupport.processes import start_web
    from testsupport.stores import confirmed

    sku = make_sku(stock=2)
    [(_, token)] = make_buyers(1)
    order_id = place(api(token), sku.sku_id)
    confirmed(order_id)
    env = {k: v for k, v in process_env.items() if not k.startswith("SECKILL_") or k in (
        "SECKILL_REDIS_PREFIX", "SECKILL_QUEUE")}
    web = start_web(env, name="web-production-pay", workers=1, **{
        **{k: v for k, v in PRODUCTION_ENV.items() if k not in ("DATABASE_URL", "REDIS_URL")},
        "DJANGO_SECURE_SSL_REDIRECT": "false"})
    try:
        answers = []
        for body in ("", json.dumps({"payment_id": "pay-" + order_id})):
            conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
            conn.request("POST", f"/api/v1/orders/{order_id}/pay", body,
                         {"Authorization": f"Token {token}", "Content-Type": "application/json"})
            resp = conn.getresponse()
            answers.append((resp.status, json.loads(resp.read())["code"]))
            conn.close()
    finally:
        web.stop()
    assert answers == [(409, "payment_by_provider")] * 2, web.log_text()[-2000:]
    assert Order.objects.get(pk=order_id).status == Order.Status.PENDING_PAYMENT


@pytest.mark.parametrize(("days", "refused"), [("0", True), ("-7", True), ("0.5", True), ("nan", True), ("soon", True),
                                               ("1", False), ("1.5", False), ("", False)])
def test_a_retention_below_one_day_is_refused_at_start(days, refused):
    """0 or less would have the retention sweep delete every finished order at
    its next run; the settings refuse it, under every settings module."""
    for env in (PRODUCTION_ENV, {"DJANGO_SETTINGS_MODULE": "seckill_site.settings.local"}):
        out = manage("shell", "-c", "from django.conf import settings; print(settings.SECKILL_RETENTION_DAYS)",
                     env={**env, "SECKILL_RETENTION_DAYS": days})
        if refused:
            assert out.returncode != 0 and "SECKILL_RETENTION_DAYS" in out.stderr, out.stdout + out.stderr[-800:]
        else:
            assert out.returncode == 0 and float(out.stdout.split()[-1]) == float(days or 30), out.stderr[-800:]


@pytest.mark.parametrize(("seconds", "refused"), [("-1", True), ("61", True), ("nan", True), ("six", True),
                                                  ("0", False), ("2.5", False), ("", False)])
def test_the_database_retry_budget_is_bounded_at_start(seconds, refused):
    """A wait past a minute holds a web thread longer than any client waits."""
    out = manage("shell", "-c", "from django.conf import settings; print(settings.SECKILL_DB_RETRY_SECONDS)",
                 env={"DJANGO_SETTINGS_MODULE": "seckill_site.settings.local", "SECKILL_DB_RETRY_SECONDS": seconds})
    if refused:
        assert out.returncode != 0 and "SECKILL_DB_RETRY_SECONDS" in out.stderr, out.stdout + out.stderr[-800:]
    else:
        assert out.returncode == 0 and float(out.stdout.split()[-1]) == float(seconds or 10), out.stderr[-800:]


ROUTES_AND_SCHEMA = """
from django.urls import get_resolver
from seckill_site.urls import api_document

def walk(patterns, prefix=""):
    for p in patterns:
        if hasattr(p, "url_patterns"):
            yield from walk(p.url_patterns, prefix + str(p.pattern))
        else:
            yield prefix + str(p.pattern)

print("routes", *walk(get_resolver().url_patterns))
print("schema", *api_document()["paths"])
"""


def _routes_and_schema(env: dict[str, str]) -> tuple[list[str], list[str]]:
    out = manage("shell", "-c", ROUTES_AND_SCHEMA, env=env)
    assert out.returncode == 0, out.stderr[-800:]
    lines = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines() if line.strip()}
    return lines["routes"], lines["schema"]


def test_production_serves_no_benchmark_endpoint():
    """The baseline and the MySQL-only purchase are the benchmark's hooks: not
    routed, not in the schema under the production settings, which refuse the
    flag that would add them; the benchmark's settings (local + the flag) have them."""
    routes, schema = _routes_and_schema(PRODUCTION_ENV)
    assert "api/v1/orders" in routes and "/api/v1/orders" in schema  # the walk sees the API
    assert not [r for r in routes if "baseline" in r or "bench" in r], routes
    assert not [p for p in schema if "baseline" in p or "bench" in p], schema
    refused = manage("check", env={**PRODUCTION_ENV, "SECKILL_BENCH_ENDPOINTS": "1"})
    assert refused.returncode != 0 and "SECKILL_BENCH_ENDPOINTS" in refused.stderr, refused.stderr[-800:]
    local = {"DJANGO_SETTINGS_MODULE": "seckill_site.settings.local"}
    routes, schema = _routes_and_schema(local)
    assert not [r for r in routes if "baseline" in r or "bench" in r], routes  # off unless asked for
    from benchmarks.bench import options

    bench_env = {}
    with pytest.MonkeyPatch.context() as mp:  # what the benchmark's processes run with
        mp.setattr(os, "environ", dict(os.environ))
        mp.setattr(sys, "path", list(sys.path))
        options.configure(None)
        bench_env = {k: os.environ[k] for k in ("DJANGO_SETTINGS_MODULE", "SECKILL_BENCH_ENDPOINTS")}
    routes, schema = _routes_and_schema(bench_env)
    assert "api/v1/baseline" in routes and "/api/v1/baseline" in schema, routes
    assert "api/v1/bench/mysql-orders" in routes, routes


def test_check_deploy_is_clean_under_production_settings():
    out = manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no issues" in out.stdout


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_takes_every_secret_from_the_environment():
    text = (ROOT / "docker-compose.yml").read_text()
    compose = _compose()
    app_env = compose["x-app"]["environment"]
    for name in ("DJANGO_SECRET_KEY", "SECKILL_TASK_SIGNING_KEY"):
        assert app_env[name].startswith(f"${{{name}:?"), app_env[name]
    for url in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"):
        assert ":?" in app_env[url] and "guest" not in app_env[url], app_env[url]
    assert compose["services"]["mysql"]["environment"]["MARIADB_ROOT_PASSWORD"].startswith("${MARIADB_ROOT_PASSWORD:?")
    assert compose["services"]["rabbitmq"]["environment"]["RABBITMQ_DEFAULT_PASS"].startswith("${RABBITMQ_PASSWORD:?")
    assert compose["services"]["migrate"]["environment"]["SECKILL_ADMIN_PASSWORD"].startswith(
        "${SECKILL_ADMIN_PASSWORD:?")
    assert "change-me" not in text and "seckill@mysql" not in text  # no password written in the file


def test_both_compose_files_pay_through_the_provider_by_default():
    """The webhook's secret is required like the other secrets, buyer pay is
    passed and off unless asked for, and the cluster file's app services (its
    own and the ones extending the base file's) keep both."""
    app_env = _compose()["x-app"]["environment"]
    assert app_env["SECKILL_PAYMENT_WEBHOOK_SECRET"].startswith("${SECKILL_PAYMENT_WEBHOOK_SECRET:?"), app_env
    assert app_env["SECKILL_BUYER_PAY"] == "${SECKILL_BUYER_PAY:-0}"
    base = _compose()["services"]
    for name, service in _cluster_compose()["services"].items():
        origin = service.get("extends", {}).get("service", name)
        if origin in APP_SERVICES and origin in base:
            assert base[origin]["environment"]["SECKILL_BUYER_PAY"] == "${SECKILL_BUYER_PAY:-0}", name
            assert not {"SECKILL_BUYER_PAY", "SECKILL_PAYMENT_WEBHOOK_SECRET"} & set(service.get("environment", {}))


def test_compose_publishes_the_web_on_loopback_and_keeps_redis_on_disk():
    compose = _compose()
    [port] = compose["services"]["web"]["ports"]
    assert port.startswith("${SECKILL_WEB_BIND:-127.0.0.1}:")
    assert not any("ports" in compose["services"][s] for s in ("mysql", "redis", "rabbitmq", "worker", "beat"))
    redis_cmd = compose["services"]["redis"]["command"]
    assert redis_cmd[redis_cmd.index("--appendonly") + 1] == "yes"
    for name in ("web", "worker", "beat"):
        assert "healthcheck" in compose["services"][name], name


def _entrypoint_sandbox(tmp_path: Path, script: str, paths: dict[str, str]) -> tuple[str, Path]:
    """A compose entrypoint's `sh -c` script as the container would run it
    (Compose's `$$` is `$`), its files moved under tmp_path, with stand-ins for
    chown and the image's docker-entrypoint.sh (which prints what it is given)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "chown").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "docker-entrypoint.sh").write_text('#!/bin/sh\necho "image entrypoint: $*"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    script = script.replace("$$", "$")
    for old, new in paths.items():
        script = script.replace(old, new)
    return script, bin_dir


def test_compose_keeps_the_redis_password_off_the_command_line(tmp_path):
    """The single Redis and every cluster node read requirepass (and masterauth)
    from a file their entrypoint writes, mode 0600, from REDISCLI_AUTH: a real
    redis-server started with that file refuses a client without the password."""
    import redis as redis_py

    redis = _compose()["services"]["redis"]
    assert redis["command"][:2] == ["redis-server", REDIS_AUTH_CONF], redis["command"]
    assert "REDIS_PASSWORD" not in " ".join(redis["command"]) and "--requirepass" not in redis["command"]
    assert redis["environment"] == {"REDISCLI_AUTH": REDIS_PASSWORD_REF}
    sh, dash_c, script, zero = redis["entrypoint"]
    assert (sh, dash_c, zero) == ("sh", "-c", "redis")
    conf = tmp_path / "auth.conf"
    script, bin_dir = _entrypoint_sandbox(tmp_path, script, {REDIS_AUTH_CONF: str(conf)})
    password = "a1b2c3" * 6
    out = subprocess.run(["sh", "-c", script, "redis", *redis["command"]], capture_output=True, text=True,
                         env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "REDISCLI_AUTH": password}, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "image entrypoint: " + " ".join(redis["command"])  # the command as it was
    assert conf.stat().st_mode & 0o777 == 0o600
    assert password not in out.stdout + " ".join(redis["command"])
    from testsupport.processes import free_port

    port = free_port()
    server = subprocess.Popen(["redis-server", str(conf), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        from testsupport import wait_until

        def answers(**auth) -> object:
            try:
                return redis_py.Redis(port=port, socket_timeout=2, **auth).ping()
            except redis_py.AuthenticationError as exc:
                return exc
            except redis_py.ConnectionError:  # not listening yet
                return None

        wait_until(lambda: answers(password=password) is True, timeout=15, what="redis-server with the file")
        assert isinstance(answers(), redis_py.AuthenticationError)  # refused without the password
        assert isinstance(answers(password="wrong"), redis_py.AuthenticationError)
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_compose_gives_the_rabbitmq_app_user_no_administrator_tag():
    conf = (ROOT / "deploy/rabbitmq-app-user.conf").read_text()
    settings = dict(line.split(" = ", 1) for line in conf.splitlines() if line and not line.startswith("#"))
    # RabbitMQ tags its default user with what default_user_tags.<tag> = true names, administrator unless told
    assert settings == {"default_user_tags.administrator": "false", "default_permissions.configure": ".*",
                        "default_permissions.read": ".*", "default_permissions.write": ".*"}
    mount = "./deploy/rabbitmq-app-user.conf:/etc/rabbitmq/conf.d/10-seckill-app-user.conf:ro"
    assert mount in _compose()["services"]["rabbitmq"]["volumes"]
    for name in RABBITMQ_NODES:
        assert mount in _cluster_compose()["services"][name]["volumes"], name


@pytest.mark.parametrize(("cookie", "ok"), [("A" * 19, False), ("abc-" * 8, False), ("a b" * 10, False),
                                            ("0123456789abcdefABCD", True), ("f3" * 32, True)])
def test_the_cluster_nodes_refuse_a_short_or_odd_erlang_cookie(tmp_path, cookie, ok):
    """The entrypoint of the RabbitMQ nodes, run with the cookie given: one
    under 20 letters and digits stops the node before the image starts it."""
    [sh, dash_c, script] = _cluster_compose()["services"]["rabbitmq-1"]["entrypoint"]
    data = tmp_path / "rabbitmq"
    data.mkdir()
    script, bin_dir = _entrypoint_sandbox(tmp_path, script, {"/var/lib/rabbitmq": str(data)})
    out = subprocess.run([sh, dash_c, script], capture_output=True, text=True, timeout=30,
                         env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "SECKILL_RABBITMQ_COOKIE": cookie})
    cookie_file = data / ".erlang.cookie"
    if ok:
        assert out.returncode == 0 and out.stdout.strip() == "image entrypoint: rabbitmq-server", out.stderr
        assert cookie_file.read_text() == cookie and cookie_file.stat().st_mode & 0o777 == 0o600
    else:
        assert out.returncode != 0 and "SECKILL_RABBITMQ_COOKIE must be 20 or more letters and digits" in out.stderr
        assert "image entrypoint" not in out.stdout and not cookie_file.exists()


def test_compose_sets_the_web_processes_so_their_connections_fit_mariadb():
    from seckill_site import webserver

    web = _compose()["services"]["web"]["environment"]
    assert web["WEB_CONCURRENCY"] == "${WEB_CONCURRENCY:-2}"
    # two processes x the slots, and the worker, within MariaDB's default of 151
    assert 2 * webserver.SLOTS + 4 <= 151


def test_the_image_and_compose_run_the_default_server_with_time_to_stop_gracefully():
    from seckill_site import webserver

    compose = _compose()
    web = compose["services"]["web"]
    assert web["command"] == ["python", "-m", "seckill_site.serve"]
    assert web["environment"]["SECKILL_WEB_LISTEN"] == "0.0.0.0:8000"
    grace = int(web["stop_grace_period"].rstrip("s"))
    assert grace > webserver.GRACEFUL_S  # compose's SIGKILL comes after the server's own deadline
    cmd = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("CMD ")]
    assert cmd == ['CMD ["python", "-m", "seckill_site.serve"]']


def _requirements(name: str) -> dict[str, str]:
    import re

    pins = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            package, version = line.split("==")
            pins[re.sub(r"\[.*\]", "", package).lower()] = version
    return pins


DEV_ONLY = ("pytest", "pytest-django", "hypothesis", "selenium", "schemathesis", "openapi-python-client", "ruff",
            "py-spy", "pyuwsgi")


def test_the_runtime_requirements_hold_no_test_lint_or_benchmark_tool():
    runtime, dev = _requirements("requirements.txt"), _requirements("requirements-dev.txt")
    assert not set(runtime) & set(dev), set(runtime) & set(dev)  # each pin once
    assert set(DEV_ONLY) <= set(dev) and not set(DEV_ONLY) & set(runtime)
    assert {"django", "mysqlclient", "celery", "granian", "gunicorn", "redis"} <= set(runtime)
    # and the app itself (what the image runs) imports none of them
    import ast

    dev_modules = {"pytest", "pytest_django", "hypothesis", "selenium", "schemathesis", "openapi_python_client"}
    offenders = []
    for app in ("accounts", "core", "inventory", "orders", "reconciliation", "seckill_site"):
        for path in (ROOT / app).rglob("*.py"):
            if "tests" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in dev_modules]
    assert not offenders, offenders


def _dockerfile_stages() -> list[list[str]]:
    """The Dockerfile's instructions (continuation lines joined), per stage; the
    ARGs before the first FROM are stage 0."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    stages: list[list[str]] = [[]]
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            stages.append([])
        stages[-1].append(line)
    return stages


def test_the_image_builds_in_two_stages_from_a_pinned_base_and_runs_read_only_code():
    import re

    preamble, build, runtime = _dockerfile_stages()
    [arg] = preamble
    found = re.fullmatch(r"ARG PYTHON_IMAGE=python:3\.11-slim-bookworm@sha256:([0-9a-f]{64})", arg)
    assert found, arg  # the tag for the reader, the digest for the bytes
    assert build[0] == "FROM ${PYTHON_IMAGE} AS build" and runtime[0] == "FROM ${PYTHON_IMAGE}"
    build_text, runtime_text = "\n".join(build), "\n".join(runtime)
    # the compiler and headers only where the wheels are built; no test tool anywhere
    assert "gcc" in build_text and "libmariadb-dev" in build_text
    for word in ("gcc", "-dev", "pkg-config", "build-essential", "requirements"):
        assert word not in runtime_text, word
    assert "requirements-dev" not in build_text  # the tests, lint and benchmark tools never enter the image
    assert "pip install -r /tmp/requirements.txt" in build_text
    assert "COPY --from=build /opt/venv /opt/venv" in runtime
    # the code is root's and read-only, var/ the app user's own, and the app runs as that user
    [user] = [line for line in runtime if line.startswith("USER ")]
    assert user == "USER seckill"
    [setup] = [line for line in runtime if "useradd" in line]
    assert "chown -R root:root /app" in setup and "chmod -R a-w,a+rX /app" in setup
    assert "mkdir -p /app/var && chown seckill /app/var" in setup
    assert setup.index("chmod -R a-w") < setup.index("chown seckill /app/var")
    assert runtime.index(setup) < runtime.index(user)
    assert not [line for line in runtime if line.startswith("COPY") and "--chown" in line]


def test_gunicorn_reads_the_same_settings_as_the_default_server(monkeypatch, tmp_path):
    from seckill_site import webserver

    # the file picks the metrics directory by setting the variable: keep it off this process
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    conf: dict = {}
    exec(compile((ROOT / "gunicorn.conf.py").read_text(), "gunicorn.conf.py", "exec"), conf)
    assert (conf["bind"], conf["workers"], conf["threads"]) == (webserver.BIND, webserver.WORKERS,
                                                                 webserver.THREADS)
    assert conf["worker_connections"] == webserver.WORKER_CONNECTIONS
    assert (conf["keepalive"], conf["graceful_timeout"]) == (webserver.KEEPALIVE_S, webserver.GRACEFUL_S)
    assert webserver.THREADS > webserver.SLOTS + webserver.QUEUE  # a refusal always finds a thread


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_compose_refuses_to_start_without_secrets_and_is_valid_with_them():
    refused = subprocess.run(["docker-compose", "config", "-q"], cwd=ROOT, capture_output=True, text=True,
                             env={"PATH": os.environ["PATH"]})
    assert refused.returncode != 0 and "set " in refused.stderr
    secrets = dict.fromkeys(("DJANGO_SECRET_KEY", "SECKILL_TASK_SIGNING_KEY", "MARIADB_PASSWORD", "REDIS_PASSWORD",
                             "RABBITMQ_PASSWORD", "MARIADB_ROOT_PASSWORD", "SECKILL_ADMIN_PASSWORD",
                             "SECKILL_PAYMENT_WEBHOOK_SECRET"), "x")
    valid = subprocess.run(["docker-compose", "config"], cwd=ROOT, capture_output=True, text=True,
                           env={"PATH": os.environ["PATH"], **secrets})
    assert valid.returncode == 0, valid.stderr
    assert "127.0.0.1:8000:8000" in valid.stdout


# --- The same stack on a Redis Cluster: docker-compose.cluster.yml ---------------------

APP_SERVICES = ("migrate", "web", "web-2", "worker", "worker-2", "beat")
CLUSTER_NET_DEFAULT = "${SECKILL_REDIS_CLUSTER_NET:-10.253.53}"
REDIS_PASSWORD_REF = "${REDIS_PASSWORD:?set REDIS_PASSWORD}"
REDIS_AUTH_CONF = "/tmp/seckill-auth.conf"


class _Override(dict):
    """A mapping tagged !override: Compose replaces the base file's value with it."""


class _Reset(list):
    """A sequence tagged !reset: Compose drops the base file's value (`[]`: none)."""


def _cluster_compose() -> dict:
    loader = type("ComposeLoader", (yaml.SafeLoader,), {})
    loader.add_constructor("!override", lambda ld, node: _Override(ld.construct_mapping(node, deep=True)))
    loader.add_constructor("!reset", lambda ld, node: _Reset(ld.construct_sequence(node, deep=True)))
    return yaml.load((ROOT / "docker-compose.cluster.yml").read_text(), Loader=loader)


def _redis_nodes(compose: dict) -> dict[str, dict]:
    import re

    return {name: s for name, s in compose["services"].items() if re.fullmatch(r"redis-\d+", name)}


def _node_address(node: dict) -> str:
    address = node["networks"]["redis-cluster"]["ipv4_address"]
    assert address.startswith(CLUSTER_NET_DEFAULT + "."), address
    return address.replace(CLUSTER_NET_DEFAULT, "10.253.53")


def _local_cluster(name: str) -> str:
    """A setting of the local Redis Cluster as benchmarks/clusters runs it."""
    from benchmarks.clusters import redis_cluster

    return str(getattr(redis_cluster, name))


def test_cluster_override_runs_nine_durable_nodes_that_stop_writing_when_cut_off():
    """Each node as scripts/cluster runs them (one source of the trade-offs of
    issue 20): append-only, a master refuses writes without a replica that acked
    within 2 s, a dead master's slots fail alone; each with its own volume and a
    fixed address, announcing its service name to clients."""
    import ipaddress

    compose = _cluster_compose()
    nodes = _redis_nodes(compose)
    assert len(nodes) == 9, sorted(nodes)
    volumes, addresses = set(), set()
    ipam = compose["networks"]["redis-cluster"]["ipam"]["config"][0]
    subnet = ipaddress.ip_network(ipam["subnet"].replace(CLUSTER_NET_DEFAULT, "10.253.53"))
    dynamic = ipaddress.ip_network(ipam["ip_range"].replace(CLUSTER_NET_DEFAULT, "10.253.53"))
    for name, node in nodes.items():
        assert node["image"] == _compose()["services"]["redis"]["image"], name
        cmd = node["command"]
        # the node's password from the config file its entrypoint writes, as the base file's redis
        assert cmd[:2] == ["redis-server", REDIS_AUTH_CONF] and len(cmd) % 2 == 0, cmd
        assert node["entrypoint"] == _compose()["services"]["redis"]["entrypoint"], name
        assert node["environment"]["REDISCLI_AUTH"] == REDIS_PASSWORD_REF, name
        opts = dict(zip(cmd[2::2], cmd[3::2]))
        assert len(opts) == len(cmd) // 2 - 1, f"{name}: an option given twice"
        assert opts["--cluster-enabled"] == "yes" and opts["--cluster-config-file"] == "nodes.conf"
        assert opts["--appendonly"] == "yes" and opts["--appendfsync"] == "everysec", name
        assert opts["--min-replicas-to-write"] == _local_cluster("MIN_REPLICAS") != "0", name
        assert opts["--min-replicas-max-lag"] == _local_cluster("MAX_LAG"), name
        assert opts["--cluster-node-timeout"] == _local_cluster("NODE_TIMEOUT_MS"), name
        assert opts["--cluster-require-full-coverage"] == "no", name
        assert opts["--repl-diskless-sync-delay"] == "0", name
        # clients (and MOVED) get a name Docker's DNS resolves, not an address
        assert opts["--cluster-announce-hostname"] == name, name
        assert opts["--cluster-preferred-endpoint-type"] == "hostname", name
        assert not {"--requirepass", "--masterauth"} & set(opts) and "REDIS_PASSWORD" not in " ".join(cmd), name
        assert "ports" not in node, name
        [volume] = node["volumes"]
        source, target = volume.split(":")
        assert target == "/data" and source in compose["volumes"] and source != "redis-data", volume
        volumes.add(source)
        address = ipaddress.ip_address(_node_address(node))
        # fixed, and outside the range Docker hands out to the app containers
        assert address in subnet and address not in dynamic, address
        addresses.add(address)
    assert len(volumes) == len(addresses) == 9  # none shared


def test_cluster_override_points_the_app_at_the_cluster_and_needs_no_single_redis():
    from seckill_site.settings.env import parse_cluster_credentials, parse_cluster_url

    compose, base = _cluster_compose(), _compose()
    nodes = _redis_nodes(compose)
    for name in APP_SERVICES:
        service = compose["services"][name]
        url = service["environment"]["REDIS_URL"]
        assert url.startswith("redis+cluster://") and REDIS_PASSWORD_REF in url, url
        url = url.replace(REDIS_PASSWORD_REF, "pw")
        seeds = parse_cluster_url(url)
        assert len(seeds) >= 3 and all(host in nodes and port == 6379 for host, port in seeds), seeds
        assert parse_cluster_credentials(url) == (None, "pw")
        # Compose merges depends_on maps: only a replaced one can leave `redis` out
        needs = service["depends_on"]
        assert isinstance(needs, _Override) and "redis" not in needs, needs
        assert needs["redis-cluster"] == {"condition": "service_completed_successfully"}, name
        # what the base file's service needs, but the single Redis, RabbitMQ and
        # MariaDB (the second web and worker are the base file's web and worker again)
        kept = {k: v for k, v in base["services"][name.removesuffix("-2")].get(
                "depends_on", base["x-app"]["depends_on"]).items() if k not in ("redis", "rabbitmq", "mysql")}
        assert all(needs.get(k) == v for k, v in kept.items()), (name, needs)
        # the database is the Galera cluster's front, healthy before any app service starts
        assert needs["mariadb-front"] == {"condition": "service_healthy"}, (name, needs)
        assert "mysql" not in needs, (name, needs)
        assert set(service["networks"]) == {"default", "redis-cluster"}, name  # MySQL, RabbitMQ and the nodes
    assert compose["services"]["redis"] == {"profiles": ["single-redis"]}  # not started by `up`
    assert not any("redis" in s.get("depends_on", {}) for s in compose["services"].values())
    assert "REDIS_URL" in base["x-app"]["environment"] and "profiles" not in base["services"]["redis"]


def test_cluster_override_forms_three_masters_with_two_replicas_each_once():
    compose = _cluster_compose()
    nodes = _redis_nodes(compose)
    job = compose["services"]["redis-cluster"]
    assert job["restart"] == "no" and job["image"] == _compose()["services"]["redis"]["image"]
    [mount] = job["volumes"]
    script, path, mode = mount.split(":")
    assert (ROOT / script).is_file() and mode == "ro", mount
    cmd = job["command"]
    assert cmd[:4] == ["sh", path, "--cluster-replicas", "2"], cmd
    # every node, by its fixed address; with 2 replicas each, nine nodes make 3 masters
    assert [a.replace(CLUSTER_NET_DEFAULT, "10.253.53") for a in cmd[4:]] == [
        f"{_node_address(n)}:6379" for n in nodes.values()]
    assert len(cmd[4:]) == 3 * (1 + int(_local_cluster("REPLICAS")))
    assert job["depends_on"] == {n: {"condition": "service_healthy"} for n in nodes}
    assert job["environment"]["REDISCLI_AUTH"] == REDIS_PASSWORD_REF  # the password stays out of argv


FAKE_REDIS_CLI = r"""#!/bin/sh
# redis-cli stand-in: each node's state (fresh, formed, partial, unready) in $FAKE/<host:port>
echo "$*" >> "$FAKE/calls"
host= port=
while [ $# -gt 0 ]; do
  case "$1" in
    --no-auth-warning) shift ;;
    -h) host="$2"; shift 2 ;;
    -p) port="$2"; shift 2 ;;
    *) break ;;
  esac
done
state="$(cat "$FAKE/$host:$port" 2>/dev/null || echo fresh)"
case "$1 ${2:-}" in
  "--cluster create") shift 2; for a; do case "$a" in *:*) echo formed > "$FAKE/$a" ;; esac; done ;;
  "--cluster add-node") echo formed > "$FAKE/$3" ;;
  "ping ") echo PONG ;;
  "cluster info")
    case "$state" in
      fresh) printf 'cluster_state:fail\r\ncluster_slots_assigned:0\r\ncluster_known_nodes:1\r\n' ;;
      partial) printf 'cluster_state:fail\r\ncluster_slots_assigned:0\r\ncluster_known_nodes:2\r\n' ;;
      *) printf 'cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_slots_ok:16384\r\ncluster_size:3\r\n' ;;
    esac ;;
  "info replication")
    if [ "$state" = unready ]; then good=0; else good=1; fi
    printf 'role:master\r\nmin_slaves_good_slaves:%s\r\n' "$good" ;;
  "config get") printf 'min-replicas-to-write\n1\n' ;;
esac
"""


@pytest.mark.parametrize(("states", "created", "added", "ok"), [
    ({}, True, [], True),                                   # nine empty nodes: created
    (dict.fromkeys(range(9), "formed"), False, [], True),     # formed: left alone
    ({**dict.fromkeys(range(9), "formed"), 4: "fresh"}, False, [4], True),  # a lost volume: rejoins
    ({0: "partial", 1: "partial"}, False, [], False),       # a create that died halfway: refused
    (dict.fromkeys(range(9), "unready"), False, [], False),   # formed, never writable: not "completed"
])
def test_the_cluster_forming_job_creates_once_and_waits_until_the_cluster_serves(tmp_path, states, created,
                                                                               added, ok):
    """scripts/compose-redis-cluster against a redis-cli that plays the nodes."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "redis-cli").write_text(FAKE_REDIS_CLI)
    (fake / "redis-cli").chmod(0o755)
    addresses = [f"10.0.0.{11 + i}:6379" for i in range(9)]
    for i, state in states.items():
        (tmp_path / addresses[i]).write_text(state)
    out = subprocess.run(["sh", "scripts/compose-redis-cluster", "--cluster-replicas", "2", *addresses],
                         cwd=ROOT, capture_output=True, text=True, timeout=30,
                         env={"PATH": f"{fake}:{os.environ['PATH']}", "FAKE": str(tmp_path),
                              "SECKILL_REDIS_FORM_WAIT_S": "1"})
    calls = (tmp_path / "calls").read_text().splitlines()
    creates = [c for c in calls if "--cluster create" in c]
    assert creates == ([(f"--no-auth-warning --cluster create {' '.join(addresses)} --cluster-replicas 2 "
                         "--cluster-yes")] if created else []), calls
    assert [c.split()[3] for c in calls if "--cluster add-node" in c] == [addresses[i] for i in added], calls
    assert all(c.endswith(f"{addresses[0]} --cluster-slave") for c in calls if "add-node" in c), calls
    assert (out.returncode == 0) == ok, out.stdout + out.stderr


RABBITMQ_NODES = ("rabbitmq-1", "rabbitmq-2", "rabbitmq-3")
RABBITMQ_PASSWORD_REF = "${RABBITMQ_PASSWORD:?set RABBITMQ_PASSWORD}"


def test_cluster_override_runs_a_three_node_rabbitmq_cluster_that_the_app_fails_over_across():
    """Three nodes of the base file's image, each with its own volume and a fixed
    name, one shared cookie from the environment, joined by classic peer
    discovery; the app waits for all three and is given all three URLs."""
    import re

    compose, base = _cluster_compose(), _compose()
    services = compose["services"]
    assert services["rabbitmq"] == {"profiles": ["single-rabbitmq"]}  # the single broker is not started
    conf = (ROOT / "deploy/rabbitmq-cluster.conf").read_text()
    listed = re.findall(r"^cluster_formation\.classic_config\.nodes\.\d+ = (\S+)$", conf, re.M)
    assert re.search(r"^cluster_formation\.peer_discovery_backend = classic_config$", conf, re.M)
    assert listed == [f"rabbit@{name}" for name in RABBITMQ_NODES]
    # one partition handling in every layout: compose, the local cluster, the test bed of hosts
    from benchmarks.clusters.rabbitmq_cluster import CONFIG as LOCAL_CONFIG
    from benchmarks.hosts.bed import RABBIT_CONFIG as BED_CONFIG

    for text in (conf, LOCAL_CONFIG, BED_CONFIG):
        assert re.findall(r"^cluster_partition_handling = (\S+)$", text, re.M) == ["pause_minority"]
    volumes = set()
    for name in RABBITMQ_NODES:
        node = services[name]
        assert node["image"] == base["services"]["rabbitmq"]["image"], name
        assert node["hostname"] == name  # the node is rabbit@<hostname>: the name the others list
        data, mounted, user = node["volumes"]
        assert user == "./deploy/rabbitmq-app-user.conf:/etc/rabbitmq/conf.d/10-seckill-app-user.conf:ro", name
        assert data == f"{name}-data:/var/lib/rabbitmq" and data.split(":")[0] in compose["volumes"], name
        assert mounted == "./deploy/rabbitmq-cluster.conf:/etc/rabbitmq/conf.d/20-seckill-cluster.conf:ro", name
        volumes.add(data)
        env = node["environment"]
        # the image refuses RABBITMQ_ERLANG_COOKIE (docker-library/rabbitmq#502): a variable of our own,
        # written to the cookie file before the image's entrypoint runs
        assert "RABBITMQ_ERLANG_COOKIE" not in env
        assert env["SECKILL_RABBITMQ_COOKIE"].startswith("${SECKILL_RABBITMQ_COOKIE:?"), name
        assert env["RABBITMQ_DEFAULT_PASS"] == RABBITMQ_PASSWORD_REF, name
        script = node["entrypoint"][-1]
        assert node["entrypoint"][:2] == ["sh", "-c"] and "; umask 077 && " in script, script
        assert '"$$SECKILL_RABBITMQ_COOKIE" > /var/lib/rabbitmq/.erlang.cookie' in script
        assert script.endswith("exec docker-entrypoint.sh rabbitmq-server"), script
        assert "rabbit@rabbitmq-1" in " ".join(node["healthcheck"]["test"]), name  # healthy = joined
    assert len(volumes) == 3
    for name in RABBITMQ_NODES[1:]:  # the first forms the cluster, the others join it
        assert services[name]["depends_on"] == {"rabbitmq-1": {"condition": "service_healthy"}}, name
    for name in APP_SERVICES:
        service = services[name]
        urls = service["environment"]["CELERY_BROKER_URL"].split(";")
        assert urls == [f"amqp://seckill:{RABBITMQ_PASSWORD_REF}@{n}:5672//" for n in RABBITMQ_NODES], name
        assert all(service["depends_on"][n] == {"condition": "service_healthy"} for n in RABBITMQ_NODES), name
        assert "rabbitmq" not in service["depends_on"], name
    assert not any("rabbitmq" in s.get("depends_on", {}) for s in services.values())


def test_cluster_override_runs_two_web_instances_behind_haproxy_with_the_config_scripts_up_runs():
    import ipaddress
    import re

    compose, base = _cluster_compose(), _compose()
    services = compose["services"]
    proxy = services["haproxy"]
    # the same template and generator as scripts/up --cluster and the proxy tests
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in proxy["volumes"])
    assert mounts == {"./scripts/haproxy-config": "/usr/local/bin/haproxy-config",
                      "./deploy": "/usr/local/etc/seckill"}
    run = proxy["command"][-1]
    assert proxy["command"][:2] == ["sh", "-c"]
    assert run.startswith("sh /usr/local/bin/haproxy-config /usr/local/etc/seckill/haproxy.cfg.in "
                          "/tmp/haproxy.cfg"), run
    assert "haproxy -q -c -f /tmp/haproxy.cfg && exec haproxy -W -db -f /tmp/haproxy.cfg" in run
    name, _, tag = proxy["image"].partition(":")
    assert name == "haproxy" and re.fullmatch(r"\d+\.\d+\.\d+", tag), proxy["image"]
    # in front of both instances, on the port the base file's web listens on and published
    # where the base file published the web; the instances themselves are no longer published
    port = base["services"]["web"]["environment"]["SECKILL_WEB_LISTEN"].rsplit(":", 1)[1]
    assert proxy["environment"]["SECKILL_PROXY_WEBS"].split() == [f"web:{port}", f"web-2:{port}"]
    assert proxy["ports"] == base["services"]["web"]["ports"]
    for web in ("web", "web-2"):
        assert isinstance(services[web]["ports"], _Reset) and services[web]["ports"] == [], web
    assert services["web-2"]["extends"] == {"file": "docker-compose.yml", "service": "web"}
    assert services["worker-2"]["extends"] == {"file": "docker-compose.yml", "service": "worker"}
    # the instances believe X-Forwarded-For from the proxy's fixed address only
    address = proxy["networks"]["redis-cluster"]["ipv4_address"]
    assert address == f"{CLUSTER_NET_DEFAULT}.10"
    for web in ("web", "web-2"):
        # and the proxies in front of HAProxy, as the base file trusts them (a TLS proxy)
        assert services[web]["environment"]["SECKILL_TRUSTED_PROXIES"] == (
            f"{address},{base['services']['web']['environment']['SECKILL_TRUSTED_PROXIES']}"), web
    # HAProxy keeps the X-Forwarded-Proto of those proxies only
    assert proxy["environment"]["SECKILL_PROXY_TLS_EDGE"] == "${SECKILL_TRUSTED_PROXIES:-}"
    ipam = compose["networks"]["redis-cluster"]["ipam"]["config"][0]
    net = lambda text: text.replace(CLUSTER_NET_DEFAULT, "10.253.53")  # noqa: E731
    fixed = ipaddress.ip_address(net(address))
    assert fixed in ipaddress.ip_network(net(ipam["subnet"]))
    assert fixed not in ipaddress.ip_network(net(ipam["ip_range"]))  # Docker never hands it to another
    assert fixed not in {ipaddress.ip_address(net(_node_address(n))) for n in _redis_nodes(compose).values()}
    # two workers, both with the confirm consumer (one active, one standing by), and beat once
    for worker in ("worker", "worker-2"):
        assert services[worker]["environment"].get("SECKILL_CONFIRM_CONSUMER", "1") not in ("0", "false"), worker
    def command(name: str) -> list[str]:  # its own, else the base file's, else the one it extends
        own = services.get(name, {})
        origin = own.get("extends", {}).get("service", name)
        return own.get("command") or base["services"].get(name, {}).get("command") or \
            base["services"].get(origin, {}).get("command") or []

    celery = {n: command(n)[3] for n in {*base["services"], *services} if command(n)[:3] == ["celery", "-A",
                                                                                               "seckill_site"]}
    assert sorted(celery.items()) == [("beat", "beat"), ("worker", "worker"), ("worker-2", "worker")], celery
    # what scripts/up --cluster runs: as many web instances, two workers, beat once
    up = (ROOT / "scripts/up").read_text()
    ports = re.search(r'SECKILL_UP_WEB_PORTS:-([\d ]+)}', up)[1].split()
    assert len(ports) == len(proxy["environment"]["SECKILL_PROXY_WEBS"].split())
    assert 'for n in 1 2; do' in up and up.count("celery\" -A seckill_site beat") == 2  # once per mode


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy not installed (scripts/test installs it)")
def test_the_compose_proxy_config_is_one_haproxy_accepts(tmp_path):
    """scripts/haproxy-config with the haproxy service's environment: the config
    it would run (its instances' names unresolved here, which HAProxy allows:
    init-addr none, resolved again at run time)."""
    import re

    proxy = _cluster_compose()["services"]["haproxy"]
    for edge in ("", "192.0.2.10, 198.51.100.0/24"):  # SECKILL_TRUSTED_PROXIES unset, then a TLS proxy named
        # Compose's interpolation of ${NAME:-default}, with this environment
        given = {"SECKILL_TRUSTED_PROXIES": edge}
        env = {k: re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m, given=given: given.get(m[1], m[2]), v)
               for k, v in proxy["environment"].items()}
        out = tmp_path / "haproxy.cfg"
        subprocess.run(["sh", "scripts/haproxy-config", "deploy/haproxy.cfg.in", str(out)], cwd=ROOT, check=True,
                       env={"PATH": os.environ["PATH"], **env})
        text = out.read_text()
        assert "server web1 web:8000" in text and "server web2 web-2:8000" in text and "bind 0.0.0.0:8000" in text
        acl = "acl from_tls_edge src 192.0.2.10 198.51.100.0/24" if edge else "acl from_tls_edge always_false"
        assert acl in text
        assert subprocess.run(["haproxy", "-q", "-c", "-f", str(out)], capture_output=True).returncode == 0


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_cluster_override_is_valid_with_the_base_file():
    import json

    files = ["-f", "docker-compose.yml", "-f", "docker-compose.cluster.yml"]
    secrets = dict.fromkeys(("DJANGO_SECRET_KEY", "SECKILL_TASK_SIGNING_KEY", "MARIADB_PASSWORD", "REDIS_PASSWORD",
                             "RABBITMQ_PASSWORD", "MARIADB_ROOT_PASSWORD", "SECKILL_ADMIN_PASSWORD",
                             "SECKILL_RABBITMQ_COOKIE", "SECKILL_PAYMENT_WEBHOOK_SECRET"), "x")
    out = subprocess.run(["docker-compose", *files, "config", "--format", "json"], cwd=ROOT, capture_output=True,
                         text=True, env={"PATH": os.environ["PATH"], **secrets})
    assert out.returncode == 0, out.stderr
    services = json.loads(out.stdout)["services"]
    assert "redis" not in services  # its profile is not active
    for name in APP_SERVICES:
        assert "redis" not in services[name]["depends_on"] and "redis-cluster" in services[name]["depends_on"]
        assert services[name]["environment"]["REDIS_URL"] == (
            "redis+cluster://:x@redis-1:6379,redis-2:6379,redis-3:6379")
    assert services["redis-1"]["networks"]["redis-cluster"]["ipv4_address"] == "10.253.53.11"
    assert "rabbitmq" not in services and {"rabbitmq-1", "rabbitmq-2", "rabbitmq-3", "haproxy"} <= set(services)
    assert not services["web"].get("ports") and not services["web-2"].get("ports")  # only HAProxy publishes
    assert services["web-2"]["environment"]["SECKILL_TRUSTED_PROXIES"] == "10.253.53.10,"


def test_production_migrate_step_makes_the_admin_and_refuses_demo_data(live_db):
    """The compose migrate step's commands under the production settings
    themselves (against the test database): seed_demo is refused, ensure_admin
    refuses a default password, then creates the admin once."""
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from inventory.models import Sku
    from testsupport.factories import unique

    db = settings.DATABASES["default"]
    name = unique("root")
    env = {**PRODUCTION_ENV, "DJANGO_SECURE_SSL_REDIRECT": "false",
           "DATABASE_URL": f"mysql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
           "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/9"), "SECKILL_ADMIN_USER": name}
    skus = Sku.objects.count()
    refused = manage("seed_demo", env={**env, "SECKILL_ADMIN_PASSWORD": "a-long-and-real-one-42"})
    assert refused.returncode != 0 and "ensure_admin" in refused.stderr, refused.stderr[-800:]
    for weak in ("", "admin", "short-1", "PASSWORD"):
        out = manage("ensure_admin", env={**env, "SECKILL_ADMIN_PASSWORD": weak})
        assert out.returncode != 0 and "SECKILL_ADMIN_PASSWORD" in out.stderr, (weak, out.stderr[-800:])
    assert not get_user_model().objects.filter(username=name).exists()
    created = manage("ensure_admin", env={**env, "SECKILL_ADMIN_PASSWORD": "a-long-and-real-one-42"})
    assert created.returncode == 0 and f"admin user {name} created" in created.stdout, created.stderr[-800:]
    again = manage("ensure_admin", env={**env, "SECKILL_ADMIN_PASSWORD": "another-long-one-0042"})
    assert again.returncode == 0 and "exists (password unchanged)" in again.stdout, again.stderr[-800:]
    admin = get_user_model().objects.get(username=name)
    # hashed by the production hasher, which the test settings do not load
    from django.contrib.auth.hashers import PBKDF2PasswordHasher
    assert admin.is_superuser and PBKDF2PasswordHasher().verify("a-long-and-real-one-42", admin.password)
    assert "a-long-and-real-one-42" not in created.stdout + created.stderr  # no password in deployment logs
    assert Sku.objects.count() == skus  # no demo SKU on sale


# --- What the image leaves out, and which server images it runs next to ----------------

def _docker_ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule, enough for these patterns: a pattern matches the path or
    one of its parent folders; `**` is any number of folders, `*` stays in one."""
    import re

    def regex(pattern: str) -> re.Pattern:
        out = ""
        for part in re.split(r"(\*\*/|\*\*|\*|\?)", pattern.strip("/")):
            out += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part))
        return re.compile(out + r"\Z")

    ignored = False
    parts = path.split("/")
    for pattern in patterns:
        negate = pattern.startswith("!")
        rx = regex(pattern.removeprefix("!"))
        if any(rx.match("/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            ignored = not negate
    return ignored


def test_the_build_context_leaves_out_secrets_and_local_state():
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    for path in (".env", ".env.production", "deploy/.env", ".venv/bin/python", "var/test-logs/web.log", ".git/HEAD",
                 "inventory/__pycache__/models.cpython-311.pyc", "core/stray.pyc", "bench/out/run.json",
                 "staticfiles/admin/css/base.css"):
        assert _docker_ignored(path, patterns), path
    for path in ("manage.py", "requirements.txt", "inventory/lua/reserve.lua", "templates/admin/dashboard.html",
                 "locale/zh_Hans/LC_MESSAGES/django.po", "scripts/healthcheck.py"):
        assert not _docker_ignored(path, patterns), path  # what the image needs stays


# Oldest acceptable release of each series. Redis: 7.2.11 / 7.4.6 carry the
# 2025 Lua-engine fixes (CVE-2025-49844 and the ones published with it); 7.0
# and older are end of life. RabbitMQ: 4.x (3.x is out of support). MariaDB:
# a long-term-support series.
REDIS_MINIMUM = {(7, 2): (7, 2, 11), (7, 4): (7, 4, 6)}
MARIADB_LTS = {(10, 11), (11, 4), (11, 8)}


def _image(service: str) -> tuple[str, tuple[int, ...], str]:
    import re

    image = _compose()["services"][service]["image"]
    name, _, tag = image.partition(":")
    found = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(-[a-z0-9.-]+)?", tag)
    assert found, f"{image}: not pinned to a patch release (major.minor.patch)"
    return name, tuple(int(found[i]) for i in (1, 2, 3)), found[4] or ""


def test_compose_pins_supported_server_images():
    name, version, _ = _image("redis")
    assert name == "redis"
    assert version[0] >= 8 or (version[:2] in REDIS_MINIMUM and version >= REDIS_MINIMUM[version[:2]]), version
    name, version, variant = _image("rabbitmq")
    assert name == "rabbitmq" and version >= (4, 1, 0), version
    assert variant in ("", "-management", "-alpine", "-management-alpine"), variant
    name, version, _ = _image("mysql")
    assert name == "mariadb" and version[:2] in MARIADB_LTS, version
    assert "latest" not in (ROOT / "docker-compose.yml").read_text().replace("seckill:latest", "")


def test_compose_migrate_step_creates_the_admin_and_no_demo_skus():
    compose = _compose()
    command = " ".join(compose["services"]["migrate"]["command"])
    assert "migrate --noinput" in command and "ensure_admin" in command
    assert "seed_demo" not in command
    assert compose["services"]["web"]["environment"]["SECKILL_TRUSTED_PROXIES"] == "${SECKILL_TRUSTED_PROXIES:-}"
