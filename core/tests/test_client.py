"""The client's address: X-Forwarded-For is read only from trusted proxies,
from the right, and a bad proxy list stops the start."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from core.client import client_address, parse_trusted_proxies

ROOT = Path(__file__).resolve().parents[2]
PROXIES = parse_trusted_proxies("10.0.0.0/8, 192.0.2.1, 2001:db8:ff::/48")


def addr(remote: str, forwarded: str | None = None) -> str:
    meta = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        meta["HTTP_X_FORWARDED_FOR"] = forwarded
    return client_address(meta)


def test_without_trusted_proxies_the_header_is_ignored():
    assert addr("203.0.113.5", "198.51.100.1") == "203.0.113.5"
    assert addr("") == "unknown"


@override_settings(SECKILL_TRUSTED_PROXIES=PROXIES)
def test_an_untrusted_peer_cannot_name_another_address():
    assert addr("203.0.113.5", "198.51.100.1") == "203.0.113.5"
    assert addr("203.0.113.5", "10.0.0.1") == "203.0.113.5"


@override_settings(SECKILL_TRUSTED_PROXIES=PROXIES)
def test_the_right_most_address_that_is_not_a_trusted_proxy_is_the_client():
    assert addr("10.0.0.2", "203.0.113.7") == "203.0.113.7"
    # What the client wrote itself (left) is never reached.
    assert addr("10.0.0.2", "1.1.1.1, 203.0.113.7") == "203.0.113.7"
    # Through two trusted proxies.
    assert addr("10.0.0.2", "6.6.6.6, 203.0.113.7, 192.0.2.1") == "203.0.113.7"
    # Multiple headers arrive joined by commas; spaces do not matter.
    assert addr("10.0.0.2", "6.6.6.6,203.0.113.7 ,  10.9.9.9") == "203.0.113.7"
    # A request from inside the trusted network: the left-most address.
    assert addr("10.0.0.2", "10.0.0.3") == "10.0.0.3"
    assert addr("10.0.0.2") == "10.0.0.2"
    assert addr("10.0.0.2", "") == "10.0.0.2"


@override_settings(SECKILL_TRUSTED_PROXIES=PROXIES)
def test_ipv6_ports_and_mapped_addresses():
    assert addr("2001:db8:ff::1", "2001:DB8:1::7") == "2001:db8:1::7"
    assert addr("::ffff:10.0.0.2", "203.0.113.7") == "203.0.113.7"  # a dual-stack socket's view of 10.0.0.2
    assert addr("10.0.0.2", "203.0.113.7:4711") == "203.0.113.7"
    assert addr("10.0.0.2", "[2001:db8:1::7]:4711") == "2001:db8:1::7"


@override_settings(SECKILL_TRUSTED_PROXIES=PROXIES)
def test_a_malformed_entry_stops_the_walk_at_the_trusted_hop_that_wrote_it():
    assert addr("10.0.0.2", "203.0.113.7, unknown") == "10.0.0.2"
    assert addr("10.0.0.2", "203.0.113.7, garbage, 192.0.2.1") == "192.0.2.1"
    # Left of the client it is the client's own text: never read.
    assert addr("10.0.0.2", "garbage, 203.0.113.7") == "203.0.113.7"


def test_the_proxy_list_is_parsed_and_a_bad_entry_is_named():
    assert parse_trusted_proxies("") == ()
    assert [str(n) for n in parse_trusted_proxies(" 10.0.0.0/8 ,,::1")] == ["10.0.0.0/8", "::1/128"]
    for bad in ("10.0.0.0/33", "proxy.local", "10.0.0.1/8"):
        with pytest.raises(ImproperlyConfigured, match="SECKILL_TRUSTED_PROXIES"):
            parse_trusted_proxies(f"192.0.2.1,{bad}")


def test_a_bad_proxy_list_stops_the_start():
    env = dict(os.environ, SECKILL_TRUSTED_PROXIES="10.0.0.0/8,proxy.local",
               DJANGO_SETTINGS_MODULE="seckill_site.settings.test")
    run = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "SECKILL_TRUSTED_PROXIES: 'proxy.local' is not an address or CIDR" in run.stderr


def test_a_proxy_nobody_listed_is_reported_once(caplog, settings):
    from core.client import ForwardingWatch

    settings.SECKILL_TRUSTED_PROXIES = ()
    watch = ForwardingWatch()
    with caplog.at_level("WARNING", logger="core.client"):
        watch.see({"REMOTE_ADDR": "10.1.2.3"})  # no forwarding header: nothing to say
        watch.see({"REMOTE_ADDR": "9.9.9.9", "HTTP_X_FORWARDED_FOR": "198.51.100.1"})  # a client on the internet
        assert watch.active and not caplog.records
        watch.see({"REMOTE_ADDR": "10.1.2.3", "HTTP_X_FORWARDED_FOR": "198.51.100.1"})
        watch.see({"REMOTE_ADDR": "127.0.0.1", "HTTP_FORWARDED": "for=198.51.100.1"})
    [record] = caplog.records
    assert not watch.active
    assert "10.1.2.3" in record.getMessage() and "SECKILL_TRUSTED_PROXIES is empty" in record.getMessage()
    settings.SECKILL_TRUSTED_PROXIES = PROXIES
    assert not ForwardingWatch().active  # a listed proxy: nothing to watch


def test_a_web_server_behind_an_unlisted_proxy_says_so_once(process_env):
    """The real web tier, no proxy trusted: requests from loopback with
    X-Forwarded-For (a proxy on this machine) get one warning in the log per
    worker process; with the proxy listed, none."""
    import http.client
    import uuid

    from testsupport.processes import start_web

    def requests(port: int) -> None:
        for headers in ({"X-Forwarded-For": "198.51.100.1"}, {"X-Forwarded-For": "198.51.100.2"}, {}):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/api/v1/health", headers=headers)
            conn.getresponse().read()
            conn.close()

    env = {k: v for k, v in process_env.items() if k != "SECKILL_TRUSTED_PROXIES"}
    run = uuid.uuid4().hex[:6]  # a log of its own (start_web appends to an existing one)
    for name, extra, expected in ((f"web-unlisted-proxy-{run}", {}, 1),
                                  (f"web-listed-proxy-{run}", {"SECKILL_TRUSTED_PROXIES": "127.0.0.1"}, 0)):
        web = start_web(env, name=name, workers=1, **extra)
        try:
            requests(web.port)
        finally:
            web.stop()
        assert web.log_text().count("SECKILL_TRUSTED_PROXIES is empty") == expected, web.log_text()[-2000:]
        web.log.unlink()
