"""Plain records the store hands out: chunk metadata and the repair report."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cascade_cli.store.schema import FORMAT_VERSION

#: Owner prefix of prefix snapshots (window.prefix): ``snap:<owner>``, removed with the owner.
SNAP = "snap:"


@dataclass(frozen=True)
class ChunkMeta:
    """One chunk's index record.

    Callers fill key..pinned; the store fills nbytes, checksum, version, created, accessed and
    fingerprint when it saves the chunk. ``tokens`` is the chunk's token ids (int32), enough to
    recompute the chunk if its bytes are lost or corrupt; ``[start, end)`` is its token range in
    the owner's sequence and ``pos`` the window position its KV state was saved at.
    """

    key: str
    owner: str
    index: int
    start: int
    end: int
    tokens: np.ndarray = field(compare=False, repr=False)
    pos: int = 0
    scheme: str = "none"
    pinned: bool = False
    nbytes: int = 0
    checksum: int = 0
    version: int = FORMAT_VERSION
    created: float = 0.0
    accessed: float = 0.0
    fingerprint: str = ""

    def __post_init__(self) -> None:
        tokens = np.ascontiguousarray(self.tokens, dtype="<i4").reshape(-1)
        object.__setattr__(self, "tokens", tokens)
        if self.end < self.start:
            raise ValueError(f"chunk {self.key!r}: token range end {self.end} < start {self.start}")

    @property
    def n_tokens(self) -> int:
        """Tokens the chunk covers."""
        return self.end - self.start

    def replace(self, **changes: Any) -> ChunkMeta:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)


@dataclass
class RepairReport:
    """What opening a store found and fixed. Empty lists mean nothing needed repair."""

    temp_files: list[str] = field(default_factory=list)
    orphan_files: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    bytes_reclaimed: int = 0

    @property
    def repaired(self) -> bool:
        """Whether anything was fixed."""
        return bool(self.temp_files or self.orphan_files or self.dropped_keys)

    @property
    def dropped_keys(self) -> list[str]:
        """Keys of index rows removed because their bytes were missing, short or corrupt."""
        return [*self.missing, *self.truncated, *self.corrupt]

    def summary(self) -> str:
        """One line for logs."""
        if not self.repaired:
            return "store clean"
        parts = [
            f"{len(self.temp_files)} torn temp file(s)",
            f"{len(self.orphan_files)} orphan file(s)",
            f"{len(self.missing)} row(s) with missing bytes",
            f"{len(self.truncated)} truncated",
            f"{len(self.corrupt)} corrupt",
        ]
        return f"store repaired: {', '.join(parts)}; {self.bytes_reclaimed} bytes reclaimed"
