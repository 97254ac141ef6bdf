"""The local scripts keep their secrets: scripts/lib.sh changes MariaDB's root
only on a server it installed, and logs URLs without passwords; the local
clusters' runner (benchmarks/clusters, behind scripts/cluster) gives the Redis
Cluster a password of its own, hands it to redis-cli through the environment
only, and writes the config files that hold passwords for the owner only. Each
runs the script's or the runner's own code (stand-ins for the commands it must
not run for real here)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE_MARIADB = r"""#!/bin/sh
# mariadb stand-in: refuses every login over TCP (-h...), records every call
echo "$*" >> "$FAKE/calls"
case " $* " in *" -h"*) echo "ERROR 1698 (28000): Access denied for user 'root'@'localhost'" >&2; exit 1 ;; esac
exit 0
"""


def _lib_sh(body: str, fake: Path, **env: str) -> subprocess.CompletedProcess:
    """`body` in bash with scripts/lib.sh loaded, the stand-ins in `fake` first on PATH."""
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SECKILL_MARIADB_MARKER")}
    return subprocess.run(["bash", "-c", f'source "{ROOT}/scripts/lib.sh"; {body}'], capture_output=True, text=True,
                          timeout=60, env={**base, "PATH": f"{fake}:{os.environ['PATH']}", "FAKE": str(fake), **env})


@pytest.mark.skipif(subprocess.run(["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/3306"],
                                   capture_output=True).returncode != 0, reason="needs MariaDB on 3306")
def test_ensure_mariadb_changes_roots_password_only_on_a_server_it_installed(tmp_path):
    """A server that refuses root without a password is switched to the local
    defaults only when scripts/lib.sh installed it (its marker file), and says
    so; any other is left alone, and the run stops naming DATABASE_URL."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mariadb").write_text(FAKE_MARIADB)
    (fake / "mariadb").chmod(0o755)
    marker = tmp_path / "installed"
    refused = _lib_sh("ensure_mariadb", fake, SECKILL_MARIADB_MARKER=str(marker))
    assert refused.returncode != 0, refused.stderr
    assert "did not install it" in refused.stderr and "Set DATABASE_URL=mysql://" in refused.stderr
    calls = (fake / "calls").read_text()
    assert "ALTER USER" not in calls
    marker.write_text("installed by scripts/lib.sh\n")
    switched = _lib_sh("ensure_mariadb", fake, SECKILL_MARIADB_MARKER=str(marker))
    assert switched.returncode == 0, switched.stderr
    assert "this script installed it" in switched.stderr and str(marker) in switched.stderr
    assert "ALTER USER 'root'@'localhost'" in (fake / "calls").read_text()
    # a DATABASE_URL that is refused is named (without its password), and nothing is changed
    (fake / "calls").unlink()
    named = _lib_sh("ensure_mariadb", fake, SECKILL_MARIADB_MARKER=str(marker),
                    DATABASE_URL="mysql://shop:hunter22@127.0.0.1:3306/seckill")
    assert named.returncode != 0 and "mysql://shop:***@127.0.0.1:3306/seckill" in named.stderr, named.stderr
    assert "hunter22" not in named.stderr + (fake / "calls").read_text()  # MYSQL_PWD, not argv
    assert "ALTER USER" not in (fake / "calls").read_text()


def test_urls_are_logged_without_their_passwords():
    urls = ("amqp://seckill:s3:cr@127.0.0.1:5681//;amqp://seckill:pw@h:5682// "
            "redis+cluster://:ab12@127.0.0.1:7000,127.0.0.1:7001 redis://127.0.0.1:6379/0")
    hidden = ("amqp://seckill:***@127.0.0.1:5681//;amqp://seckill:***@h:5682// "
              "redis+cluster://:***@127.0.0.1:7000,127.0.0.1:7001 redis://127.0.0.1:6379/0")
    out = _lib_sh(f'without_passwords "{urls}"', ROOT / "scripts")
    assert out.stdout.strip() == hidden
    from benchmarks.clusters.nodes import without_passwords

    assert without_passwords(urls) == hidden  # the clusters' runner hides them alike (its status line)
    # every URL scripts/up, scripts/test and scripts/bench print goes through it
    import re

    for script in ("scripts/up", "scripts/test", "scripts/bench", "scripts/cluster.sh"):
        for line in (ROOT / script).read_text().splitlines():
            if re.search(r"(log|echo|printf).*\$\{?(REDIS_URL|CELERY_BROKER_URL)|(log|echo).*_cluster_url\)", line):
                assert "without_passwords" in line, (script, line)


def test_the_local_rabbitmq_config_is_the_owners_only_and_its_user_no_administrator(tmp_path, monkeypatch):
    """A node's config under a permissive umask: rabbitmq.conf (the user's
    password) is 0600 all the same, also when it existed with another mode; the
    cluster's user is given no tag (no administrator)."""
    from benchmarks.clusters import RabbitCluster, rabbitmq_cluster

    monkeypatch.setenv("SECKILL_RABBITMQ_PASSWORD", "not-the-default-7")
    cluster = RabbitCluster(5690, directory=tmp_path)
    node = tmp_path / "5690"
    node.mkdir()
    (node / "rabbitmq.conf").write_text("old\n")
    (node / "rabbitmq.conf").chmod(0o644)
    old = os.umask(0o022)
    try:
        cluster.write_config(5690)
    finally:
        os.umask(old)
    assert (node / "rabbitmq.conf").stat().st_mode & 0o777 == 0o600
    assert (node / "rabbitmq-env.conf").stat().st_mode & 0o777 == 0o600
    text = (node / "rabbitmq.conf").read_text()
    assert "default_pass = not-the-default-7" in text and "default_user_tags.administrator = false" in text
    assert "listeners.tcp.local = 127.0.0.1:5690" in text
    assert "NODENAME=seckill-5690@localhost" in (node / "rabbitmq-env.conf").read_text()

    calls = []

    def ctl(port, tool, *args, check=True, timeout=60):
        calls.append((tool, *args))
        # the user does not authenticate yet, and adding it works
        return subprocess.CompletedProcess(args, 1 if args[0] == "authenticate_user" else 0, "", "")

    monkeypatch.setattr(cluster, "ctl", ctl)
    cluster.ensure_user()
    assert ("rabbitmqctl", "set_user_tags", "seckill") in calls  # no tag after the name
    assert ("rabbitmqctl", "set_permissions", "-p", "/", "seckill", ".*", ".*", ".*") in calls
    assert rabbitmq_cluster.RabbitCluster(5690).url().count("not-the-default-7") == 3


def test_the_local_redis_cluster_has_a_password_of_its_own(tmp_path, monkeypatch):
    """One password per cluster (0600, in its directory), made once and kept,
    written into each node's config (also 0600) and put into the URL the app,
    the tests and the benchmark get; redis-cli gets it from the environment,
    never as an argument."""
    import benchmarks.clusters
    from benchmarks.clusters import RedisCluster, redis_cluster
    from benchmarks.harness import stores
    from seckill_site.settings.env import parse_cluster_credentials, parse_cluster_url

    cluster = RedisCluster(7040, directory=tmp_path)
    cluster.node_dir(7040).mkdir(parents=True)
    old = os.umask(0o022)
    try:
        cluster.write_config(7040)
        url = cluster.url()
    finally:
        os.umask(old)
    password = (tmp_path / "password").read_text()
    assert len(password) >= 32 and all(c in "0123456789abcdef" for c in password)
    assert (tmp_path / "password").stat().st_mode & 0o777 == 0o600
    conf = tmp_path / "7040" / "redis.conf"
    assert conf.stat().st_mode & 0o777 == 0o600
    lines = conf.read_text().splitlines()
    assert f"requirepass {password}" in lines and f"masterauth {password}" in lines
    assert parse_cluster_credentials(url) == (None, password)
    assert parse_cluster_url(url) == [("127.0.0.1", 7040 + i) for i in range(9)]
    assert RedisCluster(7040, directory=tmp_path).url() == url  # made once, kept
    monkeypatch.setattr(benchmarks.clusters, "RedisCluster", lambda base: RedisCluster(base, directory=tmp_path))
    assert stores.cluster_url(7040) == url  # the benchmark's harness reads the same

    seen = []

    def run(args, env=None, **kwargs):
        seen.append((args, env))
        return subprocess.CompletedProcess(args, 0, "PONG\r\n", "")

    monkeypatch.setattr(redis_cluster.subprocess, "run", run)
    assert cluster.cli(7041, "ping") == "PONG\n"
    cluster._redis_cli_cluster("create", "127.0.0.1:7040")
    for args, env in seen:
        assert password not in " ".join(args) and env["REDISCLI_AUTH"] == password, args
