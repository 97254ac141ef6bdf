"""Cuts between the bed's hosts: traffic between two sets of hosts dropped in
the namespaces of both sides (an nftables set of peer addresses in the table
inet seckill_cuts of each), healed by deleting those addresses again. A host
isolated drops the whole /24 (the root namespace's bridge address with it:
HAProxy and every client in the root namespace lose it too)."""
from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.hosts import bed, net
from benchmarks.hosts.net import Host


@dataclass
class Cut:
    """One cut: `left` and `right` no longer reach each other. `isolated`: a host
    cut from everything. Heal undoes exactly what this cut added."""

    left: list[Host]
    right: list[Host] = field(default_factory=list)
    isolated: bool = False
    dropped: list[tuple[Host, str]] = field(default_factory=list)

    def apply(self) -> Cut:
        if self.isolated:
            for h in self.left:
                h.drop(f"{net.NETWORK}.0/24")
                self.dropped.append((h, f"{net.NETWORK}.0/24"))
            return self
        for a in self.left:
            for b in self.right:
                a.drop(b.ip)
                b.drop(a.ip)
                self.dropped += [(a, b.ip), (b, a.ip)]
        return self

    def heal(self) -> None:
        by_host: dict[str, list[str]] = {}
        for h, address in self.dropped:
            by_host.setdefault(h.name, []).append(address)
        for name, addresses in by_host.items():
            bed.host(name).undrop(*addresses)
        self.dropped.clear()

    def __str__(self) -> str:
        if self.isolated:
            return "isolated " + ",".join(h.name for h in self.left)
        return f"{','.join(h.name for h in self.left)} x {','.join(h.name for h in self.right)}"

    def __enter__(self) -> Cut:
        return self.apply()

    def __exit__(self, *exc) -> None:
        self.heal()


def cut(left: list[Host] | Host, right: list[Host] | Host) -> Cut:
    """Traffic between `left` and `right` dropped both ways (as a context manager: healed on exit)."""
    return Cut(left if isinstance(left, list) else [left], right if isinstance(right, list) else [right])


def isolate(h: Host) -> Cut:
    return Cut([h], isolated=True)


def heal_all() -> None:
    """Every cut of every host deleted (its table gone)."""
    for h in bed.HOSTS:
        if h.exists():
            h.heal_all()


def listed() -> list[str]:
    """Every host's drops, "<host> drops <address or name>"."""
    return [f"{h.name} drops {a}" for h in bed.HOSTS if h.exists() for a in h.dropped()]


def reaches(src: Host, dst: Host, port: int, timeout: float = 1.0) -> bool:
    """A TCP connection from inside `src` to dst:port is accepted (bash's /dev/tcp, run in src's namespace)."""
    import subprocess

    probe = f"exec 3<>/dev/tcp/{dst.ip}/{port}"
    try:
        return subprocess.run(src.cmd("timeout", str(timeout), "bash", "-c", probe), capture_output=True,
                              timeout=timeout + 5).returncode == 0
    except subprocess.TimeoutExpired:
        return False
