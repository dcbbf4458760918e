"""The remote tier: chunk payloads in Redis (or Valkey), shared by every machine that uses it.

Below the disk tier: a chunk the disk does not hold is looked up here by its content address
(see documents.remote_source for how addresses are made), and a chunk committed to the disk is published
here by the write-back thread. Redis is a cache (``maxmemory`` with an LRU policy): anything may
be gone at any time, and a miss costs a recompute, never an error.

Per chunk, two keys (as LMCache does): ``cascade:v1:<ns>:<address>:kv`` holds the payload bytes
and ``…:meta`` a small JSON record (the address again, size, CRC-32, scheme, token range,
position and token ids). Both are written in one MULTI (bytes first, then metadata) and read in
one MGET; a value whose record is missing or malformed, names another address, or whose bytes
fail the size or checksum is a miss (counted as ``corrupt``) and is deleted, never served (the
pager rejects the same way a value that passes these but does not decode).
``<ns>`` is a digest of the model fingerprint and the KV layout, so other models never meet.

Faults: every call is bounded by the socket timeouts; a connection error or timeout marks the
tier down for RETRY seconds (calls then miss at once, counted as ``errors``) and logs one
warning per process; the client reconnects by itself when Redis answers again. Passwords never
leave this module: only :func:`redact`-ed URLs are logged or shown.
"""

from __future__ import annotations

import base64
import json
import logging
import struct
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from cascade_cli.errors import ConfigError
from cascade_cli.store.reads import checksum
from cascade_cli.store.stats import Stats

log = logging.getLogger("cascade.remote")

TIER = "remote"
SCHEMES = ("redis", "rediss")
#: Seconds a failed call keeps the tier down before the next call tries Redis again.
RETRY = 2.0
#: Default socket (and connect) timeout, seconds: the longest one call may hold up a reader.
TIMEOUT = 1.0
#: Manifest values: magic, CRC-32 of the compressed body, then zlib(JSON).
_MAGIC = b"CSM1"
T = TypeVar("T")


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (safe to print or log)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid url>"
    if parts.query:  # redis-py takes ?password=… and other settings from the query
        parts = parts._replace(query="***")
    if "@" not in parts.netloc:
        return urlunsplit(parts)
    auth, _, host = parts.netloc.rpartition("@")
    user = auth.partition(":")[0] if ":" in auth else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def check_url(url: str) -> str:
    """``url`` if it is a redis:// or rediss:// URL with a host, else ConfigError."""
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme not in SCHEMES or not parts.hostname:
        raise ConfigError(
            f"invalid remote cache URL {redact(text)!r}",
            "Use redis://host:port/db, with user:password@ before the host if Redis needs "
            "them (rediss:// for TLS).",
        )
    del port
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise ConfigError(
            f"invalid remote cache URL {redact(text)!r}: the database {db!r} is not a number",
            "Use redis://host:port/0.",
        )
    return text


@dataclass(frozen=True)
class Record:
    """What the metadata key says about a chunk value."""

    start: int
    end: int
    pos: int
    scheme: str
    tokens: np.ndarray


class RemoteTier:
    """A Redis connection pool with timeouts, a down-marker for outages, and counters under
    the ``remote`` tier of ``stats``."""

    def __init__(
        self,
        url: str,
        namespace: str,
        stats: Stats,
        *,
        ttl: int = 0,
        timeout: float = TIMEOUT,
    ) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.url = redact(url)
        self.prefix = f"cascade:v1:{namespace}:"
        self.stats = stats
        self.ttl = ttl or None
        self._errors: tuple[type[BaseException], ...] = (
            redis.ConnectionError,
            redis.TimeoutError,
            OSError,
        )
        self._redis_error = redis.RedisError
        no_retry = Retry(NoBackoff(), 0)
        pool = redis.ConnectionPool.from_url(
            check_url(url),
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=no_retry,
            max_connections=16,
        )
        self.client = redis.Redis(connection_pool=pool, retry=no_retry)
        self._lock = threading.Lock()
        self._down_until = 0.0
        self._warned = False

    # ---- plumbing ----------------------------------------------------------------------------

    def _key(self, address: str, part: str) -> str:
        return f"{self.prefix}{address}:{part}"

    @property
    def up(self) -> bool:
        """False while a recent failure keeps the tier down."""
        return time.monotonic() >= self._down_until

    def _call(self, op: str, fn: Callable[[Any], T], default: T) -> T:
        """``fn(client)``, or ``default`` when Redis is down, unreachable, slow or refuses."""
        if not self.up:
            self.stats.add(TIER, "errors")
            return default
        try:
            with self.stats.timer(op):
                return fn(self.client)
        except self._errors as exc:
            with self._lock:
                self._down_until = time.monotonic() + RETRY
                first, self._warned = not self._warned, True
            self.stats.add(TIER, "errors")
            if first:
                log.warning(
                    "warning: remote tier %s unavailable (%s); using the local tiers only "
                    "until it answers",
                    self.url,
                    _reason(exc),
                )
            return default
        except self._redis_error as exc:  # e.g. OOM under maxmemory noeviction, a bad ACL
            self.stats.add(TIER, "errors")
            log.debug("remote tier %s refused %s: %s", self.url, op, _reason(exc))
            return default

    def ping(self) -> bool:
        """Whether Redis answers now (warns once when it does not)."""
        return bool(self._call("remote_ping", lambda c: c.ping(), False))

    # ---- chunks ------------------------------------------------------------------------------

    def put(self, address: str, payload: bytes | memoryview, rec: Record) -> bool:
        """Store a chunk's payload, then its record, in one transaction; False if not stored."""
        view = memoryview(payload).cast("B")
        meta = json.dumps(
            {
                "address": address,
                "nbytes": len(view),
                "crc": checksum(view),
                "scheme": rec.scheme,
                "start": rec.start,
                "end": rec.end,
                "pos": rec.pos,
                "tokens": base64.b64encode(np.asarray(rec.tokens, "<i4").tobytes()).decode(),
            }
        )

        def put(c: Any) -> bool:
            pipe = c.pipeline(transaction=True)
            pipe.set(self._key(address, "kv"), view.tobytes(), ex=self.ttl)
            pipe.set(self._key(address, "meta"), meta, ex=self.ttl)
            return all(pipe.execute())

        done = self._call("remote_write", put, False)
        if done:
            self.stats.add(TIER, "bytes_written", len(view))
            self.stats.add(TIER, "published")
        return done

    def get(self, address: str) -> tuple[bytes, Record] | None:
        """The verified payload and record at ``address``, or None (a miss, counted)."""
        got = self._call(
            "remote_read",
            lambda c: c.mget([self._key(address, "meta"), self._key(address, "kv")]),
            None,
        )
        if got is None:
            self.stats.add(TIER, "misses")
            return None
        meta, payload = got
        if meta is None or payload is None:  # never stored, expired or evicted
            self.stats.add(TIER, "misses")
            return None
        rec, why = _parse(address, meta, payload)
        if rec is None:
            self.stats.add(TIER, "misses")
            self.stats.add(TIER, "corrupt")
            log.debug("remote chunk %s failed verification (%s); dropped", address, why)
            self.drop(address)
            return None
        self.stats.add(TIER, "hits")
        self.stats.add(TIER, "bytes_read", len(payload))
        return bytes(payload), rec

    def exists(self, addresses: list[str]) -> list[bool] | None:
        """Whether both keys of each address are held, or None when Redis is unavailable."""

        def look(c: Any) -> list[bool]:
            pipe = c.pipeline(transaction=False)
            for a in addresses:
                pipe.exists(self._key(a, "meta"), self._key(a, "kv"))
            return [n == 2 for n in pipe.execute()]

        return self._call("remote_exists", look, None) if addresses else []

    def drop(self, address: str) -> None:
        """Delete a chunk's keys (a value that failed verification)."""
        self._call(
            "remote_delete",
            lambda c: c.delete(self._key(address, "kv"), self._key(address, "meta")),
            0,
        )

    # ---- document manifests ------------------------------------------------------------------

    def put_manifest(self, name: str, body: dict[str, Any]) -> bool:
        """Publish a document's manifest under its name (replacing the previous version)."""
        data = zlib.compress(json.dumps(body).encode(), 6)
        value = _MAGIC + struct.pack("<I", zlib.crc32(data)) + data
        key = f"{self.prefix}doc:{name}"
        return bool(self._call("remote_write", lambda c: c.set(key, value, ex=self.ttl), False))

    def get_manifest(self, name: str) -> dict[str, Any] | None:
        """The manifest published under ``name``; None if absent, unreadable or Redis is down."""
        value = self._call("remote_read", lambda c: c.get(f"{self.prefix}doc:{name}"), None)
        if value is None:
            return None
        try:
            if value[:4] != _MAGIC or struct.unpack("<I", value[4:8])[0] != zlib.crc32(value[8:]):
                raise ValueError("bad header or checksum")
            body = json.loads(zlib.decompress(value[8:]))
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except (ValueError, zlib.error, struct.error) as exc:
            self.stats.add(TIER, "corrupt")
            log.debug("remote manifest %r is unreadable: %s", name, exc)
            return None
        return body

    def close(self) -> None:
        """Close the pool's connections (the client does not own a pool it was given)."""
        self.client.close()
        self.client.connection_pool.disconnect()


def _parse(address: str, meta: bytes, payload: bytes) -> tuple[Record | None, str]:
    """The record in ``meta`` if it describes ``payload`` at ``address``, else (None, why)."""
    try:
        m = json.loads(meta)
        if m.get("address") != address:
            return None, "its record names another address"
        if int(m["nbytes"]) != len(payload):
            return None, f"{len(payload)} bytes, {m['nbytes']} recorded"
        if int(m["crc"]) != checksum(payload):
            return None, "its checksum does not match"
        tokens = np.frombuffer(base64.b64decode(m["tokens"], validate=True), dtype="<i4")
        start, end = int(m["start"]), int(m["end"])
        if len(tokens) != end - start or end < start:
            return None, "its token ids do not match its range"
        return Record(start, end, int(m["pos"]), str(m["scheme"]), tokens), ""
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"its record is malformed ({exc})"


def _reason(exc: BaseException) -> str:
    """A short reason for a failure, without anything from the URL."""
    text = str(exc).split("\n")[0].strip() or type(exc).__name__
    return text[:160]
