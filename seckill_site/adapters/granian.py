"""granian's process server, as the web tier runs it (seckill_site/serve.py).

granian offers no hook for how its workers get their listening socket or for
what happens when one dies, so this module reaches into its process server.
What it uses that granian does not document, read against granian 2.8.7
(granian/server/common.py and mp.py, granian/_internal.py):

- `MPServer._init_shared_socket`, replaced: it sets `_shd`, `_sfd`, `_ssp` and
  `_sso` (which `_spawn_worker` hands each worker) from `bind_addr`,
  `bind_port` and `backlog`, with `granian.net.SocketSpec`;
- `MPServer._respawn_workers(workers, spawn_target, target_loader, delay)`,
  extended; `wrks[i].inner.pid`, the process it replaces; `respawned_wrks`,
  the record its crash-loop rule reads in `_serve_loop`;
- `granian._internal.load_target`, its loader of a `MODULE:CALLABLE`;
- its logger, `_granian`, and the words of its warning about thread counts.
"""
from __future__ import annotations

import logging
import socket

from core.adapters import require

WRITTEN_FOR = {"granian": ("2.8.7",)}
require(WRITTEN_FOR, __file__)  # before granian's modules: a version without them fails here, by name

from granian._internal import load_target as _load_target
from granian.net import SocketSpec
from granian.server.mp import MPServer

# granian configures this logger itself: lines written to it look like its own
logger = logging.getLogger("_granian")
THREAD_COUNT_NOTICE = "Configuration allows spawning up to"


class Server(MPServer):
    """granian's process server with one listening socket for every worker and
    without its crash-loop exit: a worker that dies is always replaced, and
    `worker_replacing` hears of it first (a subclass paces the replacements)."""

    def worker_replacing(self, idx: int, pid: int | None) -> None:
        """Runs in the main process before worker `idx` is replaced; `pid` is
        the process that exited, when it was started."""

    def _init_shared_socket(self):
        # On Linux granian lets each worker bind its own SO_REUSEPORT socket:
        # while every worker is down (a killed worker, a deploy) a client is
        # refused, and the connections queued at a worker that dies are reset
        # unless net.ipv4.tcp_migrate_req=1. One socket opened here and
        # inherited by the workers (granian's own path on other systems) keeps
        # them queued until a worker takes them, as gunicorn's arbiter does.
        self._shd = SocketSpec(self.bind_addr, self.bind_port, self.backlog).build()
        self._sfd = self._shd.get_fd()
        self._ssp = None
        self._sso = socket.socket(fileno=self._sfd)
        self._sso.set_inheritable(True)

    def _respawn_workers(self, workers, spawn_target, target_loader, delay: float = 0):
        for idx in workers:
            pid = self.wrks[idx].inner.pid if 0 <= idx < len(self.wrks) else None
            self.worker_replacing(idx, pid)
        super()._respawn_workers(workers, spawn_target, target_loader, delay)
        # granian exits when a worker it replaced dies again within 5.5 s of
        # the time recorded here: two kills in a row would end the web tier
        self.respawned_wrks.clear()


def load_target(target: str):
    """The WSGI callable `target` names (`MODULE:CALLABLE`), loaded as granian does."""
    return _load_target(target)


class _ThreadCountNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(THREAD_COUNT_NOTICE)


def thread_count_notice_silence() -> None:
    """Drop granian's warning that threads outnumber the cores (it is written
    at every start when they do)."""
    logger.addFilter(_ThreadCountNotice())
