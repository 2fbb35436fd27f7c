"""Which rank died first: each rank keeps a socket open to fogrun while it lives.

When one rank dies, MPI's launcher kills the others, so its own report ("PID n, exit
code 9") may name a process that was only cleaned up. Instead each rank, once it knows
its rank, connects to a Unix socket fogrun listens on (in ``FOGSIM_RANK_DIR``) and sends
``"<rank> <pid>\\n"``; at interpreter exit it sends ``"bye\\n"``, or ``"failed\\n"`` after
an uncaught exception (which ``python -m mpi4py`` turns into an abort of the job). The
kernel closes a dead process's socket at the moment it dies, so the first connection
that fails or ends without a goodbye is the rank that ended the job. Events seen in the
same wake-up of the watcher cannot be ordered; :meth:`Watch.first_dead` then returns
all of them. The goodbye leaves the connection open until the process has ended (MPI's
finalization, or abort, comes after it), so an open connection is a rank still running
(:meth:`Watch.alive`), which fogrun ends before it returns.

Best effort throughout: a rank that cannot connect runs on, and fogrun falls back on the
process ids the MPI launcher reports.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import selectors
import socket
import sys
import threading
import time
from typing import Any

__all__ = ["SOCKET_NAME", "Watch", "record", "report_alive"]

SOCKET_NAME = "alive"
_BYE, _FAILED = b"bye\n", b"failed\n"
_kept: list[socket.socket] = []  # the rank's connection, open until the process ends
_detached: list[int] = []  # ... and its descriptor after the goodbye


def record(rank_dir: str, rank: int) -> None:
    """Write this process's rank to ``rank_dir/<pid>`` (for the launcher's reports) and
    keep a socket to fogrun open while the process lives (best effort); report an uncaught
    exception, warnings and the exit status to fogrun (`fogsim.run._hooks`)."""
    with contextlib.suppress(OSError), open(os.path.join(rank_dir, str(os.getpid())), "w") as f:
        f.write(str(int(rank)))
    report_alive(rank_dir, rank)
    from ._hooks import install

    install(rank_dir, rank)  # where the bootstrap and `import fogsim` could not tell the rank


def report_alive(rank_dir: str, rank: int) -> None:
    """Tell the fogrun watching ``rank_dir`` that this process is ``rank`` (best effort)."""
    if not hasattr(socket, "AF_UNIX") or _kept:
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(2.0)
        sock.connect(os.path.join(rank_dir, SOCKET_NAME))
        sock.sendall(f"{int(rank)} {os.getpid()}\n".encode())
    except OSError:
        sock.close()
        return
    _kept.append(sock)
    atexit.register(_goodbye, sock)
    if hasattr(os, "register_at_fork"):  # a forked child must not keep the rank "alive"
        os.register_at_fork(after_in_child=lambda: _forget(sock, in_child=True))


def _goodbye(sock: socket.socket) -> None:
    from ._status import recorded

    # an uncaught exception sets sys.last_value; the bootstrap records sys.exit(n), n != 0
    failed = getattr(sys, "last_value", None) is not None or bool(recorded())
    with contextlib.suppress(OSError):
        sock.sendall(_FAILED if failed else _BYE)
    # open until the process is gone (the kernel closes it), not only until Python's exit
    with contextlib.suppress(ValueError):
        _kept.remove(sock)
    _detached.append(sock.detach())


def _forget(sock: socket.socket, in_child: bool = False) -> None:
    with contextlib.suppress(OSError):
        sock.close()
    with contextlib.suppress(ValueError):
        _kept.remove(sock)
    while in_child and _detached:
        with contextlib.suppress(OSError):
            os.close(_detached.pop())


class Watch:
    """Listen on ``rank_dir/alive`` in a thread; note the order in which ranks vanish."""

    def __init__(self, rank_dir: str) -> None:
        self._rounds: list[list[tuple[int, int, str]]] = []  # (rank, pid, how) per wake-up
        self._round_times: list[float] = []  # time.time() of each of those wake-ups
        self._alive: dict[socket.socket, tuple[int, int]] = {}  # open: (rank, pid)
        self._lock = threading.Lock()
        #: ``time.monotonic()`` when a rank first failed (an uncaught exception; None: none
        #: has). A rank gone without a goodbye may have called ``os._exit(0)``: not counted.
        self.failed_at: float | None = None
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._server: socket.socket | None = None
        if hasattr(socket, "AF_UNIX"):
            try:
                server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                server.bind(os.path.join(rank_dir, SOCKET_NAME))
                server.listen(256)
                server.setblocking(False)
            except OSError:
                server.close()
            else:
                self._server = server
                self._selector.register(server, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._loop, daemon=True, name="fogrun-watch")
        self._thread.start()

    def _loop(self) -> None:
        buffers: dict[socket.socket, bytes] = {}
        stop = False
        while not stop:
            ended: list[tuple[int, int, str] | None] = []
            for key, _ in self._selector.select():
                sock: Any = key.fileobj
                if sock is self._wake_r:
                    stop = True
                elif self._server is not None and sock is self._server:
                    with contextlib.suppress(OSError):
                        conn, _ = sock.accept()
                        conn.setblocking(False)
                        buffers[conn] = b""
                        self._selector.register(conn, selectors.EVENT_READ, None)
                else:
                    self._read(sock, buffers, ended, stop_at_eof=False)
            if stop:  # the job has ended: what is left to read is final
                for sock in list(buffers):
                    self._read(sock, buffers, ended, stop_at_eof=True)
            known = [who for who in ended if who is not None]
            if known:
                self._rounds.append(sorted(known))
                self._round_times.append(time.time())
                if self.failed_at is None and not stop and any(who[2] == "failed" for who in known):
                    self.failed_at = time.monotonic()

    def _read(
        self,
        sock: socket.socket,
        buffers: dict[socket.socket, bytes],
        ended: list[tuple[int, int, str] | None],
        stop_at_eof: bool,
    ) -> None:
        while True:
            try:
                chunk = sock.recv(4096)
            except BlockingIOError:
                if stop_at_eof:  # still open after the job ended: treat as ended
                    chunk = b""
                else:
                    return
            except OSError:
                chunk = b""
            if not chunk:
                said = buffers.pop(sock)
                with self._lock:
                    self._alive.pop(sock, None)
                self._selector.unregister(sock)
                sock.close()
                if not said.endswith((_BYE, _FAILED)):
                    ended.append(_parse(said, "died"))
                return
            buffers[sock] += chunk
            hello = _parse(buffers[sock], "alive") if b"\n" in buffers[sock] else None
            if hello is not None and sock not in self._alive:
                with self._lock:
                    self._alive[sock] = hello[:2]
            if buffers[sock].endswith(_FAILED):  # noted now: its abort ends the others
                ended.append(_parse(buffers[sock], "failed"))

    def first_dead(self) -> list[tuple[int, int, str]]:
        """Return ``(rank, pid, how)`` of the rank(s) that ended the job: ``how`` is
        ``"failed"`` (an uncaught exception) or ``"died"`` (gone without a goodbye)."""
        return list(self._rounds[0]) if self._rounds else []

    def first_dead_at(self) -> float | None:
        """Return when (``time.time()``) :meth:`first_dead`'s ranks were seen gone."""
        return self._round_times[0] if self._round_times else None

    def alive(self) -> list[tuple[int, int]]:
        """Return ``(rank, pid)`` of the ranks whose socket is still open: processes that
        are certainly alive (a forked child closes its copy)."""
        with self._lock:
            return sorted(self._alive.values())

    def close(self) -> None:
        """Stop the thread (after the job ended: all the ranks' sockets are closed)."""
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(5)
        for sock in (self._wake_r, self._wake_w, self._server):
            if sock is not None:
                sock.close()
        self._selector.close()


def _parse(said: bytes, how: str) -> tuple[int, int, str] | None:
    first = said.split(b"\n", 1)[0].split()
    try:
        return int(first[0]), int(first[1]), how
    except (IndexError, ValueError):
        return None
