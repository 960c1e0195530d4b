"""Collections over the API: create from a signed manifest, get it signed back."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator

from fastapi import APIRouter, HTTPException, Query, Response
from fastapi import Request as _Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from warehouse import catalog
from warehouse.blocks import Locator
from warehouse.blocks.signing import Check, check_signature, sign
from warehouse.catalog.holdings import record_block_bytes
from warehouse.catalog.records import get_listing
from warehouse.collection.listings import check_listing, parse_listing
from warehouse.collection.reader import stored_text_damage
from warehouse.collection.records import (
    listing_of,
    load_manifest,
    load_manifest_text,
    store_manifest,
)
from warehouse.errors import NotFoundError, UsageError
from warehouse.manifest import Manifest
from warehouse.manifest.parse import iter_raw_streams
from warehouse.server.controller.access import readable_pdhs, require_collection_read
from warehouse.server.controller.auth import Caller, CallerToken, state_of
from warehouse.server.controller.putstream import Body, block_refusal, record_streamed
from warehouse.server.controller.quota import check_quota
from warehouse.server.controller.state import ControllerState

__all__ = ["STREAMED_PATH", "router", "signed_text"]

router = APIRouter(prefix="/api/v1/collections", tags=["collections"])

# A PDH, then any hints (docs/formats.md): +A… signatures, +K… clusters, others.
_HINTED_PDH = re.compile(r"([0-9a-f]{32}\+(?:0|[1-9][0-9]{0,14}))(?:\+[A-Z][A-Za-z0-9@_-]*)*")
# The most of a client's key an error repeats.
_SHOWN = 80


def _shown(text: str) -> str:
    """``text`` for an error message: whole if short, else its start and length."""
    if len(text) <= _SHOWN:
        return text
    return f"{text[: _SHOWN - 16]}… ({len(text):,} characters)"


def _portable(pdh: str) -> str:
    """The PDH a path names, its hints stripped (hints never change which
    data it names); NotFoundError for what is no PDH."""
    found = _HINTED_PDH.fullmatch(pdh)
    if found is None:
        raise NotFoundError(f"no collection {_shown(pdh)}")
    return found.group(1)


class BlockWrite(BaseModel):
    md5: str = Field(pattern=r"^[0-9a-f]{32}$")
    size: int = Field(ge=0, le=64 * 1024 * 1024)
    new: bool


class CollectionCreate(BaseModel):
    manifest_text: str = Field(description="The manifest, every locator signed for the caller.")
    file_md5s: dict[str, str] | None = Field(
        default=None,
        description="Each file's MD5 as read when it was stored: exactly the manifest's "
        "files, 32 lowercase hex digits each. Kept as the caller's own listing, "
        "shown to nobody else.",
    )
    block_writes: list[BlockWrite] = Field(
        default_factory=list, description="The block writes that made it, for accounting."
    )


class CollectionOut(BaseModel):
    pdh: str
    manifest_text: str = Field(description="Locators signed for the caller's token.")
    size: int
    file_count: int
    file_md5s: dict[str, str] | None = Field(
        default=None, description="The caller's own listing of the files' MD5s, if recorded."
    )


class CollectionSummary(BaseModel):
    pdh: str
    size: int
    file_count: int
    created_at: float
    created_by: str
    # What the collection is (lineage labels), when asked for with with_kinds.
    kinds: list[str] | None = None


def _signer(token: str, state: ControllerState) -> Callable[[Locator], Locator]:
    """A locator as sent to ``token``'s holder: signed for it (not the empty
    block's), with "+K@name" so that a client elsewhere that knows this
    cluster reads the block here."""
    cfg = state.config
    key = state.signing_key
    where = f"K@{cfg.cluster}"

    def signed(loc: Locator) -> Locator:
        return loc if loc.is_empty else sign(loc, token, key, cfg.signature_ttl).with_hint(where)

    return signed


def signed_text(manifest: Manifest, token: str, state: ControllerState) -> str:
    signed = _signer(token, state)
    streams = tuple(
        dataclasses.replace(s, locators=tuple(map(signed, s.locators))) for s in manifest.streams
    )
    return Manifest(streams).format()


def _out(
    manifest: Manifest, digests: dict[str, str] | None, token: str, state: ControllerState
) -> CollectionOut:
    return CollectionOut(
        pdh=manifest.pdh,
        manifest_text=signed_text(manifest, token, state),
        size=manifest.size,
        file_count=manifest.file_count(),
        file_md5s=digests,
    )


def _check_size(text: str, limit: int) -> None:
    # Parsing costs ~25 bytes of memory per byte of manifest: refuse before that.
    if len(text) > limit or (len(text) * 4 > limit and len(text.encode()) > limit):
        raise HTTPException(
            413, f"manifest_text: over {limit} bytes (the controller's max manifest size)"
        )


def _check_blocks(manifest: Manifest, token: str, state: ControllerState) -> None:
    """Every block signed for ``token``, its size included (DESIGN §3.4)."""
    legacy: list[Locator] = []
    for loc in manifest.blocks():
        verdict = check_signature(loc, token, state.signing_key, state.config.signature_ttl)
        why = block_refusal(verdict)
        if why is not None:
            raise HTTPException(403, f"manifest_text: block {loc.key} {why}")
        if verdict is Check.LEGACY:
            legacy.append(loc)
    # An old-format signature does not cover the size: ask the keep servers
    # for a block of exactly that size (their HEAD matches md5 and size).
    keep = state.keep() if legacy else None
    for loc in legacy:
        assert keep is not None
        if not keep.exists(loc.without_hints()):
            raise HTTPException(
                400, f"manifest_text: block {loc.key}: no block of that size is stored"
            )


@router.post("", response_model=CollectionOut)
def create_collection(
    body: CollectionCreate, user: Caller, token: CallerToken, request: _Request
) -> CollectionOut:
    """Record a collection. Every block must carry a valid signature for the caller."""
    state = state_of(request)
    _check_size(body.manifest_text, state.config.max_manifest)
    manifest = Manifest.parse(body.manifest_text)
    if not user.admin:
        _check_blocks(manifest, token, state)
    if body.file_md5s is not None:
        try:
            check_listing(manifest, body.file_md5s)
        except UsageError as e:
            raise HTTPException(400, str(e)) from None
    normal = manifest.normalized()
    # Whole blocks are kept however few of their bytes the files name: the
    # quota counts the larger (docs/server.md, "Quota").
    block_bytes = sum(loc.size for loc in normal.blocks())
    check_quota(state, user, normal.pdh, max(manifest.size, block_bytes))
    store_manifest(state.keep(), state.engine, manifest, user.name, body.file_md5s)
    record_block_bytes(state.engine, normal.pdh, block_bytes)
    catalog.record_block_writes(
        state.engine, user.name, ((w.md5, w.size, w.new) for w in body.block_writes)
    )
    # The listing just recorded is the caller's own; without one, an earlier one of theirs.
    digests = body.file_md5s
    if digests is None:
        digests = parse_listing(get_listing(state.engine, normal.pdh, user.name))
    return _out(normal, digests, token, state)


class CollectionStored(BaseModel):
    pdh: str
    size: int
    file_count: int


# The streamed put's path, which has its own bound on the body (BodyLimit).
STREAMED_PATH = "/api/v1/collections/text"


@router.post(
    "/text",
    response_model=CollectionStored,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string"}}},
        }
    },
)
async def create_collection_streamed(
    user: Caller,
    token: CallerToken,
    request: _Request,
    manifest_size: int = Query(ge=0, description="Bytes of the manifest text, first."),
    listing_size: int = Query(
        ge=0, description="Bytes of the listing (JSON), next; 0: none (a put of manifest text)."
    ),
) -> CollectionStored:
    """Record a collection of any number of files from a streamed body (the
    way `wh --controller URL put` records one): the manifest text, normalized
    and signed for the caller; then the caller's listing of the files' MD5s,
    one JSON object naming the manifest's files in manifest order; then the
    put's block writes, a line ``md5 size new`` (0 or 1) each. Spooled to
    disk (at most the controller's --max-spooled-body bytes, else 413) and
    checked a line at a time (a line over --max-manifest bytes: 413); bad
    input is a 400 naming the line and token, and nothing is recorded.
    Stored exactly as an embedded put stores its collection."""
    state = state_of(request)
    limit = state.config.max_spooled
    over = HTTPException(
        413, f"request body over {limit} bytes (the controller's max spooled body)"
    )
    length = request.headers.get("content-length")
    announced = int(length) if length is not None and length.isdigit() else None
    if manifest_size + listing_size > limit or (announced is not None and announced > limit):
        raise over
    # The user's puts at once share the bound one has: held as announced,
    # more as more comes (a chunked body), given back when the request ends.
    shares = state.spooled
    busy = HTTPException(
        429,
        f"{user.name}'s streamed puts at once would spool over {limit} bytes (the "
        "controller's max spooled body): try again when one has ended",
    )
    held = max(announced or 0, manifest_size + listing_size)
    # A bound over all users: each put holds scratch files and disk.
    slots = state.streamed_puts
    if not slots.take():
        raise HTTPException(
            503,
            f"the controller runs its most streamed puts at once ({slots.limit}, its "
            "--max-streamed-puts): try again when one has ended",
            headers={"Retry-After": "5"},
        )
    if not shares.take(user.name, held):
        slots.give()
        raise busy
    body = None
    try:
        body = await run_in_threadpool(Body, state.config.scratch, manifest_size, listing_size)
        try:
            async for chunk in request.stream():
                if body.seen + len(chunk) > limit:
                    raise over
                if body.seen + len(chunk) > held:
                    more = body.seen + len(chunk) - held
                    if not shares.take(user.name, more):
                        raise busy
                    held += more
                if body.add(chunk):
                    await run_in_threadpool(body.flush)
            await run_in_threadpool(body.flush)
        except ClientDisconnect:
            # The client left (or was cut off for slowness): nothing is recorded.
            raise HTTPException(400, "the request body ended early") from None
        if body.received < manifest_size + listing_size:
            raise HTTPException(
                400,
                f"the body ended after {body.received} bytes, before the "
                f"{manifest_size + listing_size} of its manifest and listing "
                "(manifest_size + listing_size)",
            )
        record = await run_in_threadpool(record_streamed, state, body, user, token)
    finally:
        if body is not None:
            await run_in_threadpool(body.close)
        shares.give(user.name, held)
        slots.give()
    return CollectionStored(pdh=record.pdh, size=record.size, file_count=record.file_count)


@router.get("/{pdh}", response_model=CollectionOut)
def get_collection(pdh: str, user: Caller, token: CallerToken, request: _Request) -> CollectionOut:
    """The collection's manifest, signed for the caller, with the caller's own listing."""
    state = state_of(request)
    pdh = _portable(pdh)
    # Signatures only for a collection the caller may read (docs/permissions.md).
    require_collection_read(state.engine, user, pdh)
    manifest, digests = load_manifest(state.keep(), state.engine, pdh, user.name)
    return _out(manifest, digests, token, state)


@router.get(
    "/{pdh}/manifest",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/plain": {}}}, 409: {"description": "not stored normalized"}},
)
def get_collection_text(
    pdh: str, user: Caller, token: CallerToken, request: _Request
) -> StreamingResponse:
    """The collection's manifest text as stored (normalized), signed for the
    caller, a stream at a time: no table of its files is built here or by a
    client reading it stream by stream. 409 for a collection stored another
    way (ask ``GET /collections/{pdh}``); 502 for a stored text that does
    not parse.

    The whole text is signed before the status is sent (pieces of it, about
    as large as the text): an error found at its last line, a file that is
    also a directory, is then an answer of its own, where a body broken
    after 200 read as "cannot reach the controller"."""
    state = state_of(request)
    pdh = _portable(pdh)
    require_collection_read(state.engine, user, pdh)
    text = load_manifest_text(state.keep(), state.engine, pdh)
    if text is None:
        raise HTTPException(409, f"the manifest of {pdh} is not stored normalized")
    with stored_text_damage(pdh):
        pieces = list(_signed_chunks(text, token, state))
    return StreamingResponse(iter(pieces), media_type="text/plain")


@router.get(
    "/{pdh}/listing",
    response_class=Response,
    responses={200: {"content": {"application/json": {}}}, 204: {"description": "none"}},
)
def get_listing_text(pdh: str, user: Caller, request: _Request) -> Response:
    """The caller's own listing of the collection's file MD5s as stored (a JSON
    object {path: md5}, in manifest order when recorded by this version);
    204 when the caller recorded none."""
    state = state_of(request)
    pdh = _portable(pdh)
    require_collection_read(state.engine, user, pdh)
    catalog.get_collection(state.engine, pdh)  # 404 for no such collection
    text = listing_of(state.engine, pdh, user.name)
    if text is None:
        return Response(status_code=204)
    # Encoded and sent in pieces: no second, encoded copy of a whole
    # listing of a million files (a slice ends between characters).
    pieces = (text[i : i + _CHUNK].encode() for i in range(0, len(text), _CHUNK))
    return StreamingResponse(pieces, media_type="application/json")


# Signed lines are sent in pieces of about this many bytes.
_CHUNK = 1 << 18


def _signed_chunks(text: bytes, token: str, state: ControllerState) -> Iterator[bytes]:
    """Stored normalized ``text`` with each locator signed for ``token`` (as
    ``signed_text`` writes it), line by line: a line is the stored one with
    its locator tokens replaced."""
    signed = _signer(token, state)
    lines: list[str] = []
    size = 0
    for line, (_, locators, _) in iter_raw_streams(text):
        tokens = line.split(" ")
        for i, loc in enumerate(locators, 1):
            if not loc.is_empty:
                tokens[i] = str(signed(loc))
        lines.append(" ".join(tokens))
        size += len(line)
        if size >= _CHUNK:
            yield ("\n".join(lines) + "\n").encode()
            lines.clear()
            size = 0
    if lines:
        yield ("\n".join(lines) + "\n").encode()


@router.get("", response_model=list[CollectionSummary])
def list_collections(
    user: Caller,
    request: _Request,
    limit: int = 1000,
    created_by: str | None = None,
    kind: str | None = None,
    with_kinds: bool = False,
) -> list[CollectionSummary]:
    """The newest collections; by created_by, of kind (`wh collection ls`), with kinds."""
    engine = state_of(request).engine
    limit = min(max(limit, 1), 10000)
    # In private mode only those the caller may read: fewer than ``limit``
    # then (docs/permissions.md).
    if created_by is None and kind is None and not with_kinds:
        records = catalog.list_collections(engine, limit)
        shown = readable_pdhs(engine, user, [r.pdh for r in records])
        return [
            CollectionSummary(
                pdh=r.pdh,
                size=r.size,
                file_count=r.file_count,
                created_at=r.created_at,
                created_by=r.created_by,
            )
            for r in records
            if r.pdh in shown
        ]
    from warehouse.lineage.finding import find_in_catalog

    found = find_in_catalog(engine, created_by=created_by, kind=kind, limit=limit)
    shown = readable_pdhs(engine, user, [f.pdh for f in found])
    return [
        CollectionSummary(**{**f.as_dict(), "kinds": list(f.kinds)})
        for f in found
        if f.pdh in shown
    ]
