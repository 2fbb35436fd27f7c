"""Leave out the MPI launchers' abort banners from the job's output, passing the rest live.

fogrun reports a failed or interrupted job itself (each distinct error once, the rank that
ended the job, one line for Ctrl-C), so MPICH's ``Abort(1) on node 3 ...``/``BAD
TERMINATION`` block, Hydra's ``Sending Ctrl-C to processes as requested``/``Press Ctrl-C
again to force abort`` and Open MPI's ``MPI_ABORT was invoked`` block only repeat it, in the
launcher's words; so does the ``Exit codes:`` report fogrun asks Hydra for
(`fogsim.run._status`). ``fogrun --verbose`` keeps them.

:class:`Filter` works on the bytes as they come: a line whose beginning cannot start a
banner is passed on at once, even before its end arrives (progress bars stay live); only a
line that may be a banner's is held until its newline.
"""

from __future__ import annotations

import re

__all__ = ["Filter"]

# One line each: MPICH's rank-side message, Hydra's "====" block and its epilogue, Hydra's
# Ctrl-C messages and exit codes, Open MPI's help aggregation.
_LINES = re.compile(
    rb"^(Abort\(\d+\) on node \d+|application called MPI_Abort\(|\[cli_\d+\]: aborting job"
    rb"|\[mpiexec@[^\]]*\] (Sending Ctrl-C to processes as requested|Press Ctrl-C again to "
    rb"force abort|Exit codes: )"
    rb"|=+\s*$|=   |YOUR APPLICATION TERMINATED WITH THE EXIT STRING"
    rb"|This typically refers to a problem with your application\.\s*$"
    rb"|Please see the FAQ page for debugging suggestions\s*$"
    rb"|\[[^\]]*\] \d+ more process(es)? ha(s|ve) sent help message"
    rb"|\[[^\]]*\] Set MCA parameter \S+ to 0 to see all help|\x00+\s*$)"
)
# Hydra's exit codes of the processes of a further host, on the lines after "Exit codes:".
_EXIT_CODES = re.compile(rb"^\[mpiexec@[^\]]*\] Exit codes: ")
_MORE_EXIT_CODES = re.compile(rb"^\[[^\]]*\] -?\d+(,-?\d+)*\s*$")
# Open MPI's blocks between two lines of dashes, told by their first line.
_DASHES = re.compile(rb"^-{40,}\s*$")
_BLOCK_FIRST = re.compile(
    rb"^(MPI_ABORT was invoked|\S+ has exited due to process rank|\S+ noticed that process rank"
    rb"|Primary job\s+terminated normally|\S+ detected that one or more processes exited)"
)
_STARTS = (
    b"Abort(",
    b"application called MPI_Abort(",
    b"[cli_",
    b"YOUR APPLICATION",
    b"This typically refers",
    b"Please see the FAQ",
)
_BLOCK_MAX = 40  # lines: a block not closed by then was not a banner after all


def _may_start_banner(head: bytes) -> bool:
    if head[:1] in (b"=", b"-", b"[", b"\x00"):
        return True
    return any(s.startswith(head[: len(s)]) for s in _STARTS)


class Filter:
    """Drop the banner lines from a stream of bytes: ``feed`` each chunk, then ``close``."""

    def __init__(self) -> None:
        self._partial = b""  # the start of a line that may be a banner's, held
        self._passing = False  # the current line's start was passed on: pass the rest
        self._dashes: bytes | None = None  # a line of dashes, held: a block may follow
        self._blank = b""  # an empty line, held: Hydra's block starts with one
        self._block: list[bytes] | None = None  # inside a banner block: its lines so far
        self._exit_codes = False  # the last line was Hydra's exit codes

    def feed(self, chunk: bytes) -> bytes:
        """Return what of ``chunk`` (and of what was held) to pass on now."""
        out: list[bytes] = []
        data = chunk
        while data:
            if self._passing:
                end = data.find(b"\n")
                if end < 0:
                    out.append(data)
                    break
                out.append(data[: end + 1])
                data, self._passing = data[end + 1 :], False
                continue
            data, self._partial = self._partial + data, b""
            end = data.find(b"\n")
            if end < 0:
                if self._block is not None or self._dashes is not None or _may_start_banner(data):
                    self._partial = data
                else:
                    out += [self._blank, data]
                    self._blank, self._passing = b"", True
                break
            self._line(data[: end + 1], out)
            data = data[end + 1 :]
        return b"".join(out)

    def close(self) -> bytes:
        """Return what is still held (the stream has ended)."""
        # A block still open was not a banner after all.
        partial = b"" if _LINES.match(self._partial) else self._partial  # Open MPI's NUL
        held = [*(self._block or ()), self._blank, self._dashes or b"", partial]
        self._block, self._dashes, self._partial, self._blank = None, None, b"", b""
        return b"".join(held)

    def _line(self, line: bytes, out: list[bytes]) -> None:
        after_codes, self._exit_codes = self._exit_codes, bool(_EXIT_CODES.match(line))
        if after_codes and _MORE_EXIT_CODES.match(line):
            self._exit_codes = True
            return
        if self._block is not None:
            self._block.append(line)
            if _DASHES.match(line):  # the end of the banner: dropped
                self._block = None
            elif len(self._block) > _BLOCK_MAX:  # not a banner after all
                out += self._block
                self._block = None
            return
        if self._dashes is not None:
            dashes, self._dashes = self._dashes, None
            if _BLOCK_FIRST.match(line):
                self._block = [dashes, line]
                return
            out.append(dashes)
        blank, self._blank = self._blank, b""
        if _DASHES.match(line):
            out.append(blank)
            self._dashes = line
        elif not line.strip(b"\r\n"):
            out.append(blank)
            self._blank = line
        elif not _LINES.match(line):
            out.append(blank + line)
