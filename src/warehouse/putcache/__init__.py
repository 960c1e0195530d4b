"""The resume cache of ``wh put``: files already stored are not read again.

A file is taken as unchanged when its path, size, modification time (ns),
status change time (ns) and inode are what they were when it was last stored
(as restic decides); its pieces (block, offset, length) and MD5 are then
taken from the cache instead of from reading it. A changed file, or one that
is not in the cache, is read and stored as usual. A file whose times are
less than ``RACY_NS`` older than the put is read and not remembered: times
are kept to a clock tick, so it could still change without them changing
(git's "racily clean" files).

Only the files of a directory whose files average ``MIN_CACHED`` bytes or
more are cached: for a small file, the stat and the lookup that would spare
its read cost about what reading and hashing it costs, and remembering
every one would make a first put of many small files slower, not a later
one faster (docs/benchmarks.md). The choice is made for a directory's files
together, so an unchanged directory is either all taken from the cache or
all read and packed as before: its stream, and so the collection's PDH,
stay the same.

The cache is only trusted as far as the store agrees: before a put uses an
entry, every block it names is checked to exist (one local stat or one HEAD
per distinct block, on a few threads), and a signed locator near its expiry
is not used. An entry naming a missing block is read again.

One SQLite file per store (a local home, or a controller URL and token) under
``$XDG_CACHE_HOME/warehouse``, private to the user (0600 in a 0700 folder).
Its entries are looked up a directory at a time (one query per up to
``LOOKUP_BATCH`` files), a directory of more files than a put holds
``_CHUNK`` files at a time. What one put learns is written in one
transaction at its end, so a crash leaves the cache as it was (and its
rerun reads every file again); one found damaged is started again. It is
bounded: at most ``max_entries`` files per store (the least recently used go
first; an entry's time of use is rewritten at most once a day) and
``MAX_CACHE_FILES`` stores.

``cachefile`` is the SQLite file of one store; ``session`` one put's use of it.
"""

from warehouse.putcache.cachefile import PutCache
from warehouse.putcache.session import MIN_CACHED, RACY_NS, CacheSession, CacheStats

__all__ = ["MIN_CACHED", "RACY_NS", "CacheSession", "CacheStats", "PutCache"]
