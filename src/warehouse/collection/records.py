"""Collections in the catalog: a manifest's text stored as blocks, plus a row.

Shared by the embedded warehouse and the controller, which differ only in
the block store they hand in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from warehouse import catalog
from warehouse.blocks import MAX_BLOCK_SIZE, Locator
from warehouse.blocks.store import BlockStore
from warehouse.collection.reader import decode_digests, encode_digests
from warehouse.errors import CorruptDataError, NotFoundError
from warehouse.manifest import Manifest

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = ["load_manifest", "store_manifest"]


def store_manifest(
    store: BlockStore,
    engine: sa.Engine,
    manifest: Manifest,
    user: str,
    file_md5s: dict[str, str] | None = None,
) -> catalog.CollectionRecord:
    """Store the portable text of ``manifest`` (normalized) and record the collection.

    The caller has checked that every block it lists is stored.
    """
    manifest = manifest.normalized()
    text = manifest.portable_text().encode()
    locators = [
        store.put(text[i : i + MAX_BLOCK_SIZE]).locator
        for i in range(0, max(len(text), 1), MAX_BLOCK_SIZE)
    ]
    store.flush()  # nothing is recorded before its blocks are durable
    return catalog.add_collection(
        engine,
        manifest.pdh,
        " ".join(str(loc.without_hints()) for loc in locators),
        manifest.size,
        len(manifest.files()),
        user,
        encode_digests(manifest, file_md5s),
    )


def load_manifest(
    store: BlockStore, engine: sa.Engine, pdh: str
) -> tuple[Manifest, dict[str, str] | None]:
    """A collection's manifest (checked against its PDH) and its recorded file digests."""
    record = catalog.get_collection(engine, pdh)
    try:
        text = b"".join(bytes(store.get(Locator.parse(s))) for s in record.manifest_blocks.split())
    except NotFoundError as e:
        # The collection is recorded, so a block of it missing is damage (5), not "no such" (4).
        raise CorruptDataError(f"a block of the manifest of {pdh} is missing: {e}") from None
    manifest = Manifest.parse(text)
    if manifest.pdh != pdh:
        raise CorruptDataError(f"the stored manifest of {pdh} hashes to {manifest.pdh}")
    return manifest, decode_digests(record.file_md5s)
