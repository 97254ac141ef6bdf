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


@pytest.mark.parametrize("change, word", [
    ({"SECKILL_TASK_SIGNING_KEY": PRODUCTION_ENV["DJANGO_SECRET_KEY"]}, "SECKILL_TASK_SIGNING_KEY"),
    ({"DJANGO_SECRET_KEY": "short"}, "DJANGO_SECRET_KEY"),
    ({"CELERY_BROKER_URL": "amqp://guest:guest@mq.internal:5672//"}, "guest"),
    ({"DJANGO_DEBUG": "1"}, "DJANGO_DEBUG"),
])
def test_production_refuses_weak_or_shared_secrets(change, word):
    out = manage("check", env={**PRODUCTION_ENV, **change})
    assert out.returncode != 0 and word in out.stderr, out.stderr[-800:]


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


def test_compose_publishes_the_web_on_loopback_and_keeps_redis_on_disk():
    compose = _compose()
    [port] = compose["services"]["web"]["ports"]
    assert port.startswith("${SECKILL_WEB_BIND:-127.0.0.1}:")
    assert not any("ports" in compose["services"][s] for s in ("mysql", "redis", "rabbitmq", "worker", "beat"))
    redis_cmd = compose["services"]["redis"]["command"]
    assert redis_cmd[redis_cmd.index("--appendonly") + 1] == "yes"
    for name in ("web", "worker", "beat"):
        assert "healthcheck" in compose["services"][name], name


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
    secrets = {k: "x" for k in ("DJANGO_SECRET_KEY", "SECKILL_TASK_SIGNING_KEY", "MARIADB_PASSWORD", "REDIS_PASSWORD",
                                "RABBITMQ_PASSWORD", "MARIADB_ROOT_PASSWORD", "SECKILL_ADMIN_PASSWORD")}
    valid = subprocess.run(["docker-compose", "config"], cwd=ROOT, capture_output=True, text=True,
                           env={"PATH": os.environ["PATH"], **secrets})
    assert valid.returncode == 0, valid.stderr
    assert "127.0.0.1:8000:8000" in valid.stdout


def test_production_migrate_step_makes_the_admin_and_refuses_demo_data(live_db):
    """The compose migrate step's commands under the production settings
    themselves (against the test database): seed_demo is refused, ensure_admin
    refuses a default password, then creates the admin once."""
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from testsupport.factories import unique
    from inventory.models import Sku

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
