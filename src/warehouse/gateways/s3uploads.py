"""The open multipart uploads of one controller's S3 gateway, in memory
(``s3multipart`` answers the requests), and the bytes of request bodies
held at once."""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field

from warehouse.gateways.s3write import Written
from warehouse.gateways.s3xml import S3Error

__all__ = ["BODY_BUDGET", "Budget", "Upload", "Uploads"]

# Uploads one user may have open at once, and how long one may stay open.
MAX_UPLOADS_PER_USER = 100
UPLOAD_LIFETIME = 24 * 3600.0
# Bytes of bodies held at once by PutObject and UploadPart, of all users:
# each holds what it has not yet stored, up to one 64 MiB block.
BODY_BUDGET = 512 << 20


class Budget:
    """Bytes of request bodies held at once; a request that would go over
    waits a moment, then is told to slow down (503 SlowDown: clients retry)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> bool:
        with self._lock:
            if self.used + size > self.limit and self.used > 0:
                return False
            self.used += size
            return True

    def give(self, size: int) -> None:
        with self._lock:
            self.used -= size


@dataclass
class Upload:
    user: str
    bucket: str
    key: str
    started: float
    parts: dict[int, Written] = field(default_factory=dict)


class Uploads:
    """The open multipart uploads of one controller."""

    def __init__(self) -> None:
        self._open: dict[str, Upload] = {}
        self._lock = threading.Lock()
        self.bodies = Budget(BODY_BUDGET)

    def start(self, user: str, bucket: str, key: str) -> str:
        now = time.time()
        with self._lock:
            for ident in [i for i, u in self._open.items() if u.started + UPLOAD_LIFETIME < now]:
                del self._open[ident]
            if sum(1 for u in self._open.values() if u.user == user) >= MAX_UPLOADS_PER_USER:
                raise S3Error(
                    "SlowDown",
                    f"at most {MAX_UPLOADS_PER_USER} multipart uploads open at once: "
                    "complete or abort some",
                    503,
                )
            ident = secrets.token_urlsafe(24)
            self._open[ident] = Upload(user, bucket, key, now)
            return ident

    def find(self, ident: str, user: str, bucket: str, key: str) -> Upload:
        with self._lock:
            found = self._open.get(ident)
        if found is None or (found.user, found.bucket, found.key) != (user, bucket, key):
            raise S3Error("NoSuchUpload", "The specified multipart upload does not exist.", 404)
        return found

    def drop(self, ident: str) -> None:
        with self._lock:
            self._open.pop(ident, None)

    def of(self, user: str, bucket: str) -> list[tuple[str, Upload]]:
        with self._lock:
            return [(i, u) for i, u in self._open.items() if u.user == user and u.bucket == bucket]
