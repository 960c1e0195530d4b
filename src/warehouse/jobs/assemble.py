"""Assembling a job's output and logs: manifest text only, never the data.

The output is every step's fragment in step order, normalized (DESIGN §5.2).
The log collection holds ``step-NNNNNN.log`` (the last attempt of each step)
and, under ``intermediate/step-NNNNNN/``, what steps passed to later levels,
so those blocks stay referenced by a collection.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any, Protocol

from warehouse import catalog
from warehouse.blocks import MAX_BLOCK_SIZE, Locator
from warehouse.blocks.store import BlockStore
from warehouse.errors import NotFoundError
from warehouse.jobs.jobrecords import StepRecord
from warehouse.manifest import FileEntry, Manifest

__all__ = [
    "assemble_logs",
    "assemble_output",
    "check_fragment",
    "collection_row",
    "logs_manifest",
    "output_manifest",
]


class _Saver(Protocol):
    def save_manifest(
        self, manifest: Manifest, file_md5s: dict[str, str] | None = None
    ) -> catalog.CollectionRecord: ...


def check_fragment(store: BlockStore, text: str) -> str:
    """A step's fragment, checked: it parses and every block it lists is stored."""
    manifest = Manifest.parse(text)
    for locator in manifest.blocks():
        if not locator.is_empty and not store.exists(locator):
            raise NotFoundError(f"block {locator.key} of the step's fragment is not stored")
    return manifest.format()


def assemble_output(wh: _Saver, steps: Sequence[StepRecord]) -> str:
    """Store the job's output collection; return its PDH."""
    return wh.save_manifest(output_manifest(steps)).pdh


def output_manifest(steps: Sequence[StepRecord]) -> Manifest:
    """The job's output: every step's fragment in step order, normalized."""
    ordered = sorted(steps, key=lambda s: s.number)
    # Each fragment parsed on its own first, so an error names the step.
    for step in ordered:
        if step.output:
            Manifest.parse(step.output)
    return Manifest.parse("".join(s.output or "" for s in ordered)).normalized()


def assemble_logs(wh: _Saver, steps: Sequence[StepRecord]) -> str:
    """Store the job's log collection; return its PDH."""
    return wh.save_manifest(logs_manifest(steps)).pdh


def logs_manifest(steps: Sequence[StepRecord]) -> Manifest:
    """The job's log collection: each step's log, and what it passed on."""
    entries: list[FileEntry] = []
    for step in sorted(steps, key=lambda s: s.number):
        if step.log:
            entries.extend(Manifest.parse(step.log).files().values())
        if step.intermediate:
            prefix = f"intermediate/step-{step.number:06d}/"
            for e in Manifest.parse(step.intermediate).files().values():
                entries.append(FileEntry(prefix + e.path, e.size, e.pieces))
    return Manifest.from_files(entries)


def collection_row(manifest: Manifest, user: str) -> tuple[dict[str, Any], list[bytes]]:
    """The catalog row recording a manifest, and the blocks of its text, which the
    caller stores (and flushes) before writing the row: the manager does both on
    its writer thread with the rest of its turn (every block the manifest names
    is stored: the steps' fragments were checked as they came)."""
    manifest = manifest.normalized()
    text = manifest.portable_text().encode()
    chunks = [text[i : i + MAX_BLOCK_SIZE] for i in range(0, max(len(text), 1), MAX_BLOCK_SIZE)]
    locators = [Locator(hashlib.md5(c).hexdigest(), len(c)) for c in chunks]
    row = {
        "pdh": manifest.pdh,
        "manifest_blocks": " ".join(str(loc) for loc in locators),
        "size": manifest.size,
        "file_count": len(manifest.files()),
        "created_at": time.time(),
        "created_by": user,
        "file_md5s": None,
    }
    return row, [c for c, loc in zip(chunks, locators, strict=True) if not loc.is_empty]
