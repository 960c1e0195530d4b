"""The FUSE side of ``wh mount``: pyfuse3 operations over a ``Tree``.

pyfuse3 runs the operations as trio tasks; every call that may wait on the
warehouse (a manifest, a name, a block) runs on a worker thread, so one slow
read does not hold up a ``stat`` elsewhere. A warehouse error becomes an
errno (ENOENT for a missing name or PDH, EACCES for a refused one, EIO for
the rest: a dead controller, a block no copy of which checks), and one line
in the log; the mount stays up.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import signal
import stat
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pyfuse3
import trio

from warehouse.errors import ForbiddenError, NotFoundError, UsageError, WarehouseError
from warehouse.manifest import FileEntry
from warehouse.mount._handle import READAHEAD, Handle, NotHeld, Recent
from warehouse.mount._tree import NAME_TTL, ROOT, Child, Listing, Node, Tree

__all__ = ["serve"]

log = logging.getLogger("warehouse.mount")

T = TypeVar("T")

# Collections never change, so the kernel may keep what it was told about
# them; a name may move, so what lies under by_name is asked again soon.
_STILL = 3600.0
# Worker threads for the warehouse calls of all operations at once.
_WORKERS = 8
# Entries of a directory made at once for readdir (the kernel takes a page
# of them a call, some 25): a large directory is listed a batch at a time.
_BATCH = 1000


def _errno(e: BaseException) -> int:
    # A name that could not be one (UsageError) is as absent as a missing one.
    if isinstance(e, NotFoundError | UsageError):
        return errno.ENOENT
    if isinstance(e, ForbiddenError):
        return errno.EACCES
    return errno.EIO


class _Operations(pyfuse3.Operations):
    def __init__(self, tree: Tree) -> None:
        super().__init__()
        self.tree = tree
        self.limiter = trio.CapacityLimiter(_WORKERS)
        # Fetches ahead, and each one-pass read's next piece (a thread that
        # waits on its read's own fetches): a few large files read at once
        # leave room for the fetches of the others.
        self.pool = ThreadPoolExecutor(READAHEAD * 4, thread_name_prefix="wh-mount-ahead")
        self.recent = Recent()
        self.handles: dict[int, Handle] = {}
        self.dirs: dict[int, _Open] = {}
        self.next_fh = 1
        self.uid = os.getuid()
        self.gid = os.getgid()
        self.started_ns = time.time_ns()

    async def _call(
        self, what: str, fn: Callable[..., T], *args: Any, held: int = 0, reading: bool = False
    ) -> T:
        """``fn(*args)`` on a worker thread, its errors as errnos; on this
        thread when inode ``held`` lies in a collection whose listing is
        held (nothing to wait for: a thread would only cost a switch)."""
        try:
            if held and self.tree.held(held):
                return fn(*args)
            return await trio.to_thread.run_sync(fn, *args, limiter=self.limiter)
        except WarehouseError as e:
            # A block missing under a file that exists is damage, not absence.
            code = errno.EIO if reading else _errno(e)
            if code != errno.ENOENT:
                log.warning("%s: %s", what, e)
            raise pyfuse3.FUSEError(code) from None
        except OSError as e:
            log.warning("%s: %s", what, e)
            raise pyfuse3.FUSEError(errno.EIO) from None

    def _attrs(self, inode: int, node: Node, entry: FileEntry | None) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = inode
        if node.is_dir:
            a.st_mode = stat.S_IFDIR | 0o555
            a.st_nlink = 2
            a.st_size = 0
        else:
            assert entry is not None
            a.st_mode = stat.S_IFREG | 0o444
            a.st_nlink = 1
            a.st_size = entry.size
        a.st_blksize = 1 << 17
        a.st_blocks = (a.st_size + 511) // 512
        a.st_uid = self.uid
        a.st_gid = self.gid
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = self.started_ns
        # Only a name's own directory may change (the name moves); what lies
        # under it belongs to one PDH (its inodes are that PDH's).
        moves = node.kind in ("by_name", "folder") or (node.kind == "dir" and not node.path)
        held = NAME_TTL if moves and node.root != "id" else _STILL
        a.attr_timeout = a.entry_timeout = held
        return a

    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        try:
            text = name.decode()
        except UnicodeDecodeError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None
        if text in (".", ".."):  # the kernel resolves these; never a child here
            raise pyfuse3.FUSEError(errno.ENOENT)
        inode, node, entry = await self._call(
            "lookup", self.tree.lookup, parent_inode, text, held=parent_inode
        )
        return self._attrs(inode, node, entry)

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        node, entry = await self._call("stat", self.tree.stat, inode, held=inode)
        return self._attrs(inode, node, entry)

    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        listing = await self._call("list", self.tree.listing, inode)
        fh = self.next_fh
        self.next_fh += 1
        self.dirs[fh] = _Open(listing, inode)
        return fh

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        opened = self.dirs.get(fh)
        if opened is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        while True:
            # The kernel goes on from the offset of the last entry it took:
            # the rest of the batch made for the call before, or a new one.
            if opened.offset != start_id or opened.next >= len(opened.batch):
                if opened.listing.fixed is not None:  # made whole at opendir
                    opened.batch = opened.listing.entries(start_id, _BATCH)
                else:
                    opened.batch = await self._call(
                        "list", opened.listing.entries, start_id, _BATCH, held=opened.inode
                    )
                opened.offset, opened.next = start_id, 0
                if not opened.batch:
                    return
            batch = opened.batch
            for k in range(opened.next, len(batch)):
                name, inode, node, entry, after = batch[k]
                if not pyfuse3.readdir_reply(
                    token, name.encode(), self._attrs(inode, node, entry), after
                ):
                    return
                opened.offset, opened.next = after, k + 1
            start_id = opened.offset

    async def releasedir(self, fh: int) -> None:
        self.dirs.pop(fh, None)

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
            raise pyfuse3.FUSEError(errno.EROFS)
        entry = await self._call("open", self.tree.file_entry, inode, held=inode)
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = Handle(entry, self.tree.warehouse.store, self.pool, self.recent)
        return pyfuse3.FileInfo(fh=fh, keep_cache=True)

    # pyfuse3 sends any buffer (its stub says bytes): a view saves a copy a read.
    async def read(self, fh: int, off: int, size: int) -> bytes | memoryview:  # type: ignore[override]
        handle = self.handles.get(fh)
        if handle is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        try:  # at once when its blocks are at hand: no thread to switch to
            return handle.read(off, size, held_only=True)
        except NotHeld:
            return await self._call(
                f"read {handle.entry.path}", handle.read, off, size, reading=True
            )

    async def release(self, fh: int) -> None:
        handle = self.handles.pop(fh, None)
        if handle is not None:
            handle.close()

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 1 << 17
        s.f_namemax = 255
        return s


class _Open:
    """An open directory: its listing, and the batch of it made last (its
    entries from ``next`` on lie at ``offset`` on)."""

    def __init__(self, listing: Listing, inode: int) -> None:
        self.listing = listing
        self.inode = inode
        self.batch: list[Child] = []
        self.offset = 0
        self.next = 0


async def _until_stopped(ready: Callable[[], None] | None) -> None:
    async with trio.open_nursery() as nursery:

        async def fuse_main() -> None:
            # Returns when the file system is unmounted from outside
            # (fusermount3 -u) or terminated on a signal: then all stops.
            try:
                await pyfuse3.main()
            finally:
                nursery.cancel_scope.cancel()

        async def on_signal() -> None:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    pyfuse3.terminate()
                    return

        nursery.start_soon(fuse_main)
        nursery.start_soon(on_signal)
        if ready is not None:
            ready()


def serve(
    tree: Tree,
    mountpoint: Path,
    *,
    allow_other: bool = False,
    ready: Callable[[], None] | None = None,
) -> None:
    """Mount ``tree`` read-only at ``mountpoint`` and serve it until it is
    unmounted (``fusermount3 -u``) or SIGINT/SIGTERM arrive; it is always
    unmounted on return."""
    if not mountpoint.is_dir():
        raise UsageError(f"{mountpoint}: not a directory")
    options = set(pyfuse3.default_options) | {"fsname=wh", "subtype=wh", "ro"}
    if allow_other:
        options.add("allow_other")
    ops = _Operations(tree)
    try:
        pyfuse3.init(ops, str(mountpoint), options)
    except RuntimeError as e:
        raise WarehouseError(f"cannot mount at {mountpoint}: {e}") from None
    # What is made so far (imports, the tree) is never garbage: frozen, a
    # full collection does not go through it again each time the objects of
    # many FUSE requests set one off.
    gc.freeze()
    try:
        trio.run(_until_stopped, ready)
    finally:
        pyfuse3.close(unmount=True)
        ops.pool.shutdown(wait=False, cancel_futures=True)


# The root's inode is pyfuse3's.
assert ROOT == pyfuse3.ROOT_INODE
