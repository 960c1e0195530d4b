"""The walk of a put, with its small files opened ahead so the disk reads them together."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import (
    Generator,
    Iterator,
    Mapping,
)
from dataclasses import dataclass

from warehouse.collection.filecache import CachedFile
from warehouse.collection.scan import DirNode, Files
from warehouse.collection.scratch import SpilledHits

# Files of at most SMALL_FILE bytes are opened AHEAD files before they are
# read, each with posix_fadvise(WILLNEED): the kernel starts reading them at
# once, so the reads of a tree of small files not in memory wait on the disk
# together instead of one after the other (6.5-9.6 s -> 2.1 s for 100,000
# files of 1-8 KB here). Threads reading them did worse: each holds the GIL
# between its system calls.
SMALL_FILE = 1 << 20
AHEAD = 64


# Directories a read-ahead holds at most beyond the one being packed (a run
# of directories without small files is not all read ahead).
NODES_AHEAD = 16


class ReadAhead:
    """The directories of a walk, and their small files opened ahead in the
    order the packer takes them in."""

    def __init__(self, nodes: Iterator[Todo]) -> None:
        self._nodes: deque[Todo] = deque()  # found by the walk, not packed yet
        # The walk holds the deque, not the read-ahead: a walk referring to
        # its read-ahead would keep both, and the directories' scratch files,
        # until the cycle collector ran.
        self._walk = _small_paths(nodes, self._nodes)
        self._open: deque[int | OSError] = deque()
        self._done = False
        try:
            for _ in range(AHEAD):
                self._ahead()
        except BaseException:
            self.close()  # the walk failed (a special file, a link loop)
            raise

    def _step(self) -> bool:
        """One step of the walk; True if it opened a small file."""
        path = next(self._walk, None)
        if not path:
            self._done = self._done or path is None
            return False
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            # Its turn raises an error of its own. Without its traceback:
            # the frames of it would hold the packing of a directory.
            self._open.append(e.with_traceback(None))
            return True
        try:  # noqa: SIM105 - once a file: cheaper than contextlib.suppress
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass  # only a hint
        self._open.append(fd)
        return True

    def _ahead(self) -> None:
        """Open one more small file, unless enough directories are held ahead."""
        while not self._done and not self._step():
            if len(self._nodes) > NODES_AHEAD:
                return

    def node(self) -> Todo | None:
        """The next directory of the walk (None: no more)."""
        while not self._nodes and not self._done:
            self._step()
        return self._nodes.popleft() if self._nodes else None

    def next(self) -> int | OSError:
        """The open descriptor of the next small file of the walk (the caller closes it)."""
        while not self._open:
            if self._done:
                raise RuntimeError("the walk ended before the files packed")
            self._step()
        fd = self._open.popleft()
        try:
            self._ahead()
        except BaseException:
            if isinstance(fd, int):
                os.close(fd)
            raise
        return fd

    def close(self) -> None:
        """Close the files opened ahead and end the walk; the directories
        found and not packed (an error ended the put) close their scratch
        files."""
        self._done = True
        self._walk.close()
        while self._open:
            fd = self._open.popleft()
            if isinstance(fd, int):
                os.close(fd)
        while self._nodes:
            self._nodes.popleft().close()


def _small_paths(nodes: Iterator[Todo], found: deque[Todo]) -> Generator[str, None, None]:
    """The small files of ``nodes`` in order, each directory put in ``found``
    as it starts (a "" then: reading ahead may stop there)."""
    try:
        for node in nodes:
            found.append(node)
            yield ""
            for _, path, size in node.files:
                if size <= SMALL_FILE:
                    yield path
    finally:
        if isinstance(nodes, Generator):
            nodes.close()  # ends the tree's walk too, now


@dataclass
class Todo:
    """A directory of the walk, the files of it to read (the others the
    cache answers for: ``hits``, None where it was not asked)."""

    node: DirNode
    files: Files
    hits: Mapping[str, CachedFile] | SpilledHits | None = None
    marker: bool = False  # an empty directory, written as a marker stream
    walked: bool = False  # the node is the put's own walk's (a lazy tree's)

    def close(self) -> None:
        """Close its scratch files (an error ended the put): the node's own
        only if the put's walk made it, not a tree the caller scanned."""
        if self.walked or self.files is not self.node.files:
            self.files.close()
        if self.walked:
            self.node.files.close()
        if isinstance(self.hits, SpilledHits):
            self.hits.close()
