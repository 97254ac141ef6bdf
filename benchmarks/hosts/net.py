"""The test bed's network: network namespaces (the hosts), a bridge in the root
namespace that joins them, a veth pair per host, and the cuts between hosts
(nftables rules in the namespaces of both sides). iproute2 and nft only;
standard library only (scripts run it before any virtualenv exists).

Nothing here addresses anything outside 10.77.0.0/24 and loopback, and the
root namespace gets no firewall rule: a cut lives in the namespaces it cuts."""
from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass

from benchmarks.clusters.nodes import ClusterError, apt_install

PREFIX = "sk-"            # every namespace of the bed
BRIDGE = "skbr0"          # in the root namespace
NETWORK = "10.77.0"       # /24; the bridge is .1
BRIDGE_IP = f"{NETWORK}.1"
TABLE = "seckill_cuts"    # the nftables table (family inet) in a namespace with cuts
SET = "peers"             # the addresses that namespace no longer talks to


def run(*args: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), capture_output=True, text=True)
    if check and done.returncode != 0:
        raise ClusterError(f"{' '.join(args)}: {(done.stderr or done.stdout).strip()[-300:]}")
    return done


def ensure_tools() -> None:
    """ip (iproute2) and nft (nftables), installed where missing; root needed."""
    missing = [pkg for cmd, pkg in (("ip", "iproute2"), ("nft", "nftables")) if shutil.which(cmd) is None]
    if missing:
        apt_install(*missing)


def can_make() -> str:
    """"" when this process can make a bed (root, ip netns), else why not."""
    import os

    if os.geteuid() != 0:
        return "the test bed needs root (network namespaces, a bridge, nftables)"
    if shutil.which("ip") is None:
        return "the test bed needs iproute2 (ip netns)"
    probe = f"{PREFIX}probe"
    if run("ip", "netns", "add", probe, check=False).returncode != 0:
        return "ip netns add is refused here"
    run("ip", "netns", "del", probe, check=False)
    return ""


def namespaces() -> list[str]:
    """The bed's namespaces that exist (sk-*)."""
    out = run("ip", "-j", "netns", "list", check=False).stdout.strip()
    names = [entry["name"] for entry in json.loads(out)] if out else []
    return sorted(n for n in names if n.startswith(PREFIX))


def bridge_exists() -> bool:
    return run("ip", "link", "show", BRIDGE, check=False).returncode == 0


def in_ns(ns: str, *args: str) -> list[str]:
    """`args` run inside namespace `ns`."""
    return ["ip", "netns", "exec", ns, *args]


@dataclass(frozen=True)
class Host:
    """One host of the bed: namespace sk-<name>, address 10.77.0.<last>."""

    name: str      # role and number: store1, mq2, db1, web1, worker2
    last: int      # the address's last byte
    role: str      # store, mq, db, web, worker

    @property
    def ns(self) -> str:
        return f"{PREFIX}{self.name}"

    @property
    def ip(self) -> str:
        return f"{NETWORK}.{self.last}"

    @property
    def veth(self) -> str:
        """The root namespace's end of its veth pair (the other is eth0 inside)."""
        return f"skv-{self.name}"[:15]

    def exists(self) -> bool:
        return self.ns in namespaces()

    def cmd(self, *args: str) -> list[str]:
        return in_ns(self.ns, *args)

    def make(self) -> None:
        """The namespace, its loopback up, its veth pair on the bridge, its address."""
        if not self.exists():
            run("ip", "netns", "add", self.ns)
        run(*self.cmd("ip", "link", "set", "lo", "up"))
        if run("ip", "link", "show", self.veth, check=False).returncode != 0:
            run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.ns)
        run("ip", "link", "set", self.veth, "master", BRIDGE, "up")
        if f"{self.ip}/24" not in run(*self.cmd("ip", "-4", "addr", "show", "eth0")).stdout:
            run(*self.cmd("ip", "addr", "add", f"{self.ip}/24", "dev", "eth0"))
        run(*self.cmd("ip", "link", "set", "eth0", "up"))

    # --- cuts ------------------------------------------------------------------------

    def _table(self) -> None:
        """The project's own table in this namespace: a set of peer addresses
        (intervals: a whole /24 isolates) dropped both ways, before anything else."""
        if run(*self.cmd("nft", "list", "table", "inet", TABLE), check=False).returncode == 0:
            return
        rules = (f"table inet {TABLE} {{\n"
                 f"  set {SET} {{ type ipv4_addr; flags interval; }}\n"
                 f"  chain input {{ type filter hook input priority -10; policy accept; ip saddr @{SET} drop; }}\n"
                 f"  chain output {{ type filter hook output priority -10; policy accept; ip daddr @{SET} drop; }}\n"
                 "}\n")
        subprocess.run(self.cmd("nft", "-f", "-"), input=rules, text=True, check=True, capture_output=True)

    def drop(self, *addresses: str) -> None:
        """Traffic to and from `addresses` (or a.b.c.d/nn) dropped in this namespace."""
        self._table()
        run(*self.cmd("nft", "add", "element", "inet", TABLE, SET, "{ " + ", ".join(addresses) + " }"))

    def undrop(self, *addresses: str) -> None:
        """Those drops deleted (each that is there); the table goes when its set is empty."""
        have = self.dropped()
        for address in addresses:
            if address in have:
                run(*self.cmd("nft", "delete", "element", "inet", TABLE, SET, "{ " + address + " }"))
        if not self.dropped():
            run(*self.cmd("nft", "delete", "table", "inet", TABLE), check=False)

    def heal_all(self) -> None:
        run(*self.cmd("nft", "delete", "table", "inet", TABLE), check=False)

    def dropped(self) -> list[str]:
        """The addresses this namespace drops now ([] with no table)."""
        done = run(*self.cmd("nft", "-j", "list", "set", "inet", TABLE, SET), check=False)
        if done.returncode != 0:
            return []
        out: list[str] = []
        for item in json.loads(done.stdout).get("nftables", []):
            for elem in (item.get("set") or {}).get("elem", []):
                if isinstance(elem, str):
                    out.append(elem)
                elif "prefix" in elem:
                    out.append(f"{elem['prefix']['addr']}/{elem['prefix']['len']}")
                elif "range" in elem:
                    out.append("-".join(elem["range"]))
        return out

    def has_table(self) -> bool:
        return run(*self.cmd("nft", "list", "table", "inet", TABLE), check=False).returncode == 0


def make_bridge() -> None:
    if not bridge_exists():
        run("ip", "link", "add", BRIDGE, "type", "bridge")
    if f"{BRIDGE_IP}/24" not in run("ip", "-4", "addr", "show", BRIDGE).stdout:
        run("ip", "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")


def remove_all() -> list[str]:
    """Every sk-* namespace (its processes killed first: SIGTERM, then SIGKILL),
    every skv-* veth left, and the bridge. Returns what it removed."""
    import os
    import signal
    import time

    removed = []
    spaces = namespaces()
    pids = {ns: [int(p) for p in run("ip", "netns", "pids", ns, check=False).stdout.split()] for ns in spaces}
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        left = [p for ps in pids.values() for p in ps if os.path.exists(f"/proc/{p}")]
        for pid in left:
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(_alive(p) for p in left):
            time.sleep(0.1)
    for ns in spaces:
        run("ip", "netns", "del", ns, check=False)  # its end of the veth, its nft tables go with it
        removed.append(ns)
    links = json.loads(run("ip", "-j", "link", "show", check=False).stdout or "[]")
    for link in links:
        name = link.get("ifname", "")
        if name.startswith("skv-"):
            run("ip", "link", "del", name, check=False)
            removed.append(name)
    if bridge_exists():
        run("ip", "link", "del", BRIDGE)
        removed.append(BRIDGE)
    return removed


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
