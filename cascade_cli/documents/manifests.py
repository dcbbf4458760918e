"""Documents shared through the remote tier: publish a manifest, pull it elsewhere, check it.

A manifest names a document version (name, version, sha256, how it was cut) and lists its
chunks (token range, window position, content address) and every token id, which is all
another machine needs: it recomputes each address from the token ids (a manifest whose
addresses disagree is refused), rebuilds the recall index from the chunks' text, and records
the chunks in ``remote_chunks`` — no prefill. `ask` then pages chunks in from Redis on demand;
one Redis no longer holds is recomputed from its token ids in its own context and published
again.
"""

from __future__ import annotations

import base64
import contextlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cascade_cli import kv
from cascade_cli.documents import catalog
from cascade_cli.documents.library import Library
from cascade_cli.documents.remote_source import RemoteLink, chunk_address, doc_root, record_of
from cascade_cli.documents.sink import sink_key
from cascade_cli.errors import CodecError, NotFoundError, StoreError, StoreLockedError
from cascade_cli.store import ChunkMeta

FORMAT = 1


def _link(lib: Library) -> RemoteLink:
    if lib.remote is None:
        raise StoreError("no remote tier is set", "Pass --remote redis://host:port/0.")
    return lib.remote


@dataclass
class Published:
    """What publishing a document did."""

    chunks: int = 0
    uploaded: int = 0  # chunks Redis did not hold yet
    missing: list[int] = field(default_factory=list)  # chunks neither Redis nor the disk holds


def publish(lib: Library, doc: catalog.Document) -> Published:
    """Publish ``doc``'s chunks Redis does not hold yet (from the disk), the prompt prefix's
    state, then its manifest; StoreError when Redis is unavailable."""
    link = _link(lib)
    metas: list[ChunkMeta] = []
    for i in range(doc.chunks):
        m = link.record(doc, i)
        if m is None:
            raise StoreError(
                f"'{doc.name}' is missing chunk {i} in the store",
                f"Run `cascade ingest {doc.path}` again, then publish it.",
            )
        metas.append(m)
    addresses = _addresses(doc, metas, link.prefix)
    held = link.tier.exists(addresses)
    if held is None:
        raise StoreError(
            f"the remote tier {link.tier.url} is unavailable; '{doc.name}' was not published",
            "Start Redis (or check --remote) and run the command again.",
        )
    done = Published(chunks=len(metas))
    for m, address, there in zip(metas, addresses, held, strict=True):
        if there:
            continue
        try:
            payload = lib.disk.get(m.key)
        except StoreError:  # evicted or damaged here too: whoever needs it recomputes it
            done.missing.append(m.index)
            continue
        if link.tier.put(address, payload, record_of(m)):
            done.uploaded += 1
    sink = sink_key(link.prefix)
    if lib.disk.exists(sink):
        at = link.address(sink)
        if at is not None and link.tier.exists([at]) == [False]:
            link.tier.put(at, lib.disk.get(sink), record_of(lib.disk.meta(sink)))
    link.remember(doc, metas, addresses)  # evicted here later: fetched, not recomputed
    if not link.tier.put_manifest(doc.name, manifest(doc, metas, addresses)):
        raise StoreError(
            f"the remote tier {link.tier.url} did not take the manifest of '{doc.name}'",
            "Check Redis (its maxmemory, its ACL) and run the command again.",
        )
    return done


def _addresses(doc: catalog.Document, metas: list[ChunkMeta], prefix: list[int]) -> list[str]:
    out: list[str] = []
    parent = doc_root(doc, prefix)
    for m in metas:
        parent = chunk_address(parent, m)
        out.append(parent)
    return out


def manifest(doc: catalog.Document, metas: list[ChunkMeta], addresses: list[str]) -> dict[str, Any]:
    """The JSON body published for ``doc``."""
    tokens = np.concatenate([m.tokens for m in metas]) if metas else np.zeros(0, "<i4")
    return {
        "format": FORMAT,
        "name": doc.name,
        "version": doc.version,
        "sha256": doc.sha256,
        "path": doc.path,
        "scheme": doc.scheme,
        "block_size": doc.block_size,
        "window": doc.window,
        "prefix_tokens": doc.prefix_tokens,
        "tokens": doc.tokens,
        "chars": doc.chars,
        "chunks": [[m.start, m.end, m.pos, a] for m, a in zip(metas, addresses, strict=True)],
        "token_ids": base64.b64encode(tokens.astype("<i4").tobytes()).decode(),
    }


def _bad(name: str, why: str) -> StoreError:
    return StoreError(
        f"the remote manifest of '{name}' is unusable ({why})",
        "Publish it again from the machine that ingested it (`cascade ingest … --remote`).",
    )


def pull(lib: Library, name: str) -> catalog.Document:
    """The document ``name`` from the remote tier, as a ready local version (its chunks left
    in Redis); the local version when it is the same. NotFoundError if Redis has no such
    manifest for this model."""
    link = _link(lib)
    body = link.tier.get_manifest(name)
    if body is None:
        raise NotFoundError(
            f"no document named {name!r} in the store or the remote tier {link.tier.url}",
            f"Run `cascade ingest FILE --name {name} --remote …` on a machine with the file "
            "(with the same model), or see `cascade docs`.",
        )
    try:
        if body.get("format") != FORMAT:
            raise ValueError(f"format {body.get('format')!r}")
        scheme, block, window = str(body["scheme"]), int(body["block_size"]), int(body["window"])
        prefix_n, sha = int(body["prefix_tokens"]), str(body["sha256"])
        rows = [(int(s), int(e), int(p), str(a)) for s, e, p, a in body["chunks"]]
        tokens = np.frombuffer(base64.b64decode(body["token_ids"], validate=True), "<i4")
    except (ValueError, KeyError, TypeError) as exc:
        raise _bad(name, str(exc)) from None
    if prefix_n != len(link.prefix):
        raise _bad(name, "it was made with another prompt prefix")
    with lib.disk.transaction() as conn:
        prev = catalog.latest(conn, name)
        if (
            prev is not None
            and prev.status == "ready"
            and (prev.sha256, prev.scheme, prev.block_size, prev.window)
            == (sha, scheme, block, window)
        ):
            return prev
        doc = catalog.create(
            conn, name=name, path=str(body.get("path", "")), sha256=sha, scheme=scheme,
            block_size=block, window=window, prefix_tokens=prefix_n,
        )  # fmt: skip
    metas: list[ChunkMeta] = []
    end = 0
    for i, (s, e, p, _) in enumerate(rows):
        if s != end or e <= s or e > len(tokens):
            lib.remove(doc)
            raise _bad(name, f"chunk {i} covers tokens [{s}, {e})")
        metas.append(ChunkMeta(doc.chunk_key(i), doc.owner, i, s, e, tokens[s:e], p, scheme))
        end = e
    addresses = _addresses(doc, metas, link.prefix)
    if end != len(tokens) or addresses != [r[3] for r in rows]:
        lib.remove(doc)
        raise _bad(name, "its chunk addresses do not match its token ids")
    link.remember(doc, metas, addresses)
    chars = 0
    for m in metas:  # the recall index, rebuilt from the chunks' text as ingest made it
        text = lib.ctx.model.detokenize(m.tokens.tolist())
        lib.recall.index(doc.owner, m.index, text, chars)
        chars += len(text)
    lib.recall.flush()
    with lib.disk.transaction() as conn:
        catalog.progress(conn, doc, end, len(metas), chars)
        catalog.finish(conn, doc)
    with contextlib.suppress(StoreLockedError):  # beside a writer: its next open sweeps
        catalog.sweep(lib.disk)  # drops the versions this one replaces
    return catalog.by_id(lib.disk.conn, doc.id)


@dataclass
class RemoteCheck:
    """What `verify --remote` found for one document."""

    doc: str
    chunks: int = 0
    missing: list[int] = field(default_factory=list)  # not held (evicted, expired, corrupt)
    damaged: list[tuple[int, str]] = field(default_factory=list)  # held, but does not decode


def check(lib: Library, doc: catalog.Document) -> RemoteCheck:
    """Fetch every chunk of ``doc`` from the remote tier and look inside each payload."""
    link = _link(lib)
    if link.tier.get_manifest(doc.name) is None and not link.tier.up:
        raise StoreError(
            f"the remote tier {link.tier.url} is unavailable", "Start Redis and verify again."
        )
    out = RemoteCheck(doc.name, doc.chunks)
    for i in range(doc.chunks):
        meta = link.record(doc, i)
        address = link.chain(doc, i) if meta is not None else None
        got = link.tier.get(address) if address is not None else None
        if got is None:
            out.missing.append(i)
            continue
        try:
            hdr = kv.info(got[0]).header
            if meta is not None and hdr.n_cells != meta.n_tokens:
                raise CodecError(f"{hdr.n_cells} cells for {meta.n_tokens} tokens")
        except CodecError as exc:
            out.damaged.append((i, exc.message))
    return out
