"""The local scripts keep their secrets: scripts/lib.sh changes MariaDB's root
only on a server it installed, and logs URLs without passwords; scripts/cluster.sh
gives the local Redis Cluster a password of its own and writes its config files
for the owner only. Each runs the script's own function (stand-ins for the
commands it must not run for real here)."""
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


@pytest.mark.skipif(not subprocess.run(["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/3306"],
                                       capture_output=True).returncode == 0, reason="needs MariaDB on 3306")
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
    out = _lib_sh('without_passwords "amqp://seckill:s3:cr@127.0.0.1:5681//;amqp://seckill:pw@h:5682// '
                  'redis+cluster://:ab12@127.0.0.1:7000,127.0.0.1:7001 redis://127.0.0.1:6379/0"', ROOT / "scripts")
    assert out.stdout.strip() == ("amqp://seckill:***@127.0.0.1:5681//;amqp://seckill:***@h:5682// "
                                  "redis+cluster://:***@127.0.0.1:7000,127.0.0.1:7001 redis://127.0.0.1:6379/0")
    # every URL scripts/up and scripts/cluster.sh print goes through it
    import re

    for script in ("scripts/up", "scripts/cluster.sh"):
        for line in (ROOT / script).read_text().splitlines():
            if re.search(r"(log|echo|printf).*\$\{?(REDIS_URL|CELERY_BROKER_URL)|(log|echo).*_cluster_url\)", line):
                assert "without_passwords" in line, (script, line)


def test_the_local_rabbitmq_config_is_the_owners_only_and_its_user_no_administrator(tmp_path):
    """rabbitmq_node_write_config under a permissive umask: rabbitmq.conf (the
    user's password) is 0600 all the same, also when it existed with another mode."""
    node = tmp_path / "5690"
    body = (f'source "{ROOT}/scripts/cluster.sh"; RABBITMQ_CLUSTER_DIR="{tmp_path}"; umask 022; '
            f'mkdir -p "{node}" && : > "{node}/rabbitmq.conf" && chmod 644 "{node}/rabbitmq.conf"; '
            "rabbitmq_node_write_config 5690")
    out = _lib_sh(body, ROOT / "scripts", SECKILL_RABBITMQ_PASSWORD="not-the-default-7")
    assert out.returncode == 0, out.stderr
    conf = tmp_path / "5690" / "rabbitmq.conf"
    assert conf.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "5690" / "rabbitmq-env.conf").stat().st_mode & 0o777 == 0o600
    text = conf.read_text()
    assert "default_pass = not-the-default-7" in text and "default_user_tags.administrator = false" in text
    assert 'set_user_tags "$RABBITMQ_CLUSTER_USER" >/dev/null' in (ROOT / "scripts/cluster.sh").read_text()


def test_the_local_redis_cluster_has_a_password_of_its_own(tmp_path):
    """scripts/cluster.sh makes one password per cluster (0600, in its directory),
    writes it into each node's config (also 0600), and puts it into the URL the
    app, the tests and the benchmark get; the benchmark's harness reads the same."""
    body = (f'source "{ROOT}/scripts/cluster.sh"; redis_cluster_use 7040; REDIS_CLUSTER_DIR="{tmp_path}"; '
            f'umask 022; mkdir -p "$(redis_node_dir 7040)"; redis_node_write_config 7040; redis_cluster_url')
    out = _lib_sh(body, ROOT / "scripts")
    assert out.returncode == 0, out.stderr
    password = (tmp_path / "password").read_text()
    assert len(password) >= 32 and all(c in "0123456789abcdef" for c in password)
    assert (tmp_path / "password").stat().st_mode & 0o777 == 0o600
    conf = tmp_path / "7040" / "redis.conf"
    assert conf.stat().st_mode & 0o777 == 0o600
    lines = conf.read_text().splitlines()
    assert f"requirepass {password}" in lines and f"masterauth {password}" in lines
    from seckill_site.settings.env import parse_cluster_credentials, parse_cluster_url

    url = out.stdout.strip()
    assert parse_cluster_credentials(url) == (None, password)
    assert parse_cluster_url(url) == [("127.0.0.1", 7040 + i) for i in range(9)]
    again = _lib_sh(body, ROOT / "scripts")
    assert again.stdout.strip() == url  # made once, kept
    # redis-cli gets it from the environment, never as an argument
    text = (ROOT / "scripts/cluster.sh").read_text()
    assert " -a " not in text and "--pass" not in text
    assert text.count('REDISCLI_AUTH="$(redis_cluster_password)"') == 3  # redis_cli, create, add-node
