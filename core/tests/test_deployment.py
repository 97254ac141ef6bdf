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


def test_seed_demo_refuses_default_passwords_outside_local_settings(live_db, monkeypatch):
    import io

    from django.contrib.auth import get_user_model
    from django.core.management import CommandError, call_command
    from django.test import override_settings

    from conftest import unique

    name = unique("root")
    monkeypatch.setenv("SECKILL_ADMIN_USER", name)
    monkeypatch.delenv("SECKILL_ADMIN_PASSWORD", raising=False)
    with override_settings(SECKILL_DEMO_USERS=False):
        with pytest.raises(CommandError, match="SECKILL_ADMIN_PASSWORD"):
            call_command("seed_demo", stdout=io.StringIO())
        monkeypatch.setenv("SECKILL_ADMIN_PASSWORD", "admin")
        with pytest.raises(CommandError):
            call_command("seed_demo", stdout=io.StringIO())
        monkeypatch.setenv("SECKILL_ADMIN_PASSWORD", "a-long-and-real-one-42")
        out = io.StringIO()
        call_command("seed_demo", stdout=out)
    assert get_user_model().objects.get(username=name).check_password("a-long-and-real-one-42")
    assert "a-long-and-real-one-42" not in out.getvalue() and "demo buyer token" not in out.getvalue()
