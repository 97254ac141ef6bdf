"""Other people's internals: the version check every adapter makes.

Where the project relies on a library's private API (names with a leading
underscore, undocumented attributes, a step found by its name), it does so in
one adapter module and nowhere else, and that module states the exact versions
it was read against. Importing it on any other version raises UnknownVersion,
so an upgrade stops at the first import (the tests, a server's start) instead
of changing behaviour unnoticed.

The adapters live at the lowest layer that needs them: here, what core itself
uses (redis_py.py: redis-py below its client); seckill_site/adapters/, the
project package's (granian, Celery, Django). docs/architecture.md ("Other
people's internals") says what to do on an upgrade.
"""
from __future__ import annotations

from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class UnknownVersion(RuntimeError):
    """An adapter was imported beside a version of its library it was not written for."""


def installed(distribution: str) -> str:
    return metadata.version(distribution)


def require(written_for: dict[str, tuple[str, ...]], module_file: str) -> None:
    """Raise UnknownVersion unless every distribution named is installed at one
    of the versions given for it."""
    where = Path(module_file).resolve()
    where = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
    for distribution, versions in written_for.items():
        found = installed(distribution)
        if found not in versions:
            raise UnknownVersion(
                f"{distribution} {found} is installed, but {where} was written for {distribution} "
                f"{' or '.join(versions)}: read that file against {distribution} {found}'s source, "
                f"run core/tests/test_adapters.py, then add {found} to its WRITTEN_FOR")
