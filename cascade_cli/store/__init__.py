"""The chunk store: RAM and disk tiers for KV-cache chunks, treated as opaque bytes.

``DiskStore`` (SQLite index + one file per chunk), ``RamCache`` (byte-bounded LRU), ``Pager``
(prefetch / write-back pools), ``snapshot`` (cross-process stats) and ``register_migrations``
(for tables of other modules in the same index). Nothing here imports llama_cpp or the engine.
"""

from cascade_cli.store.disk import DiskStore, checksum
from cascade_cli.store.lru import RamCache
from cascade_cli.store.prefetch import Pager
from cascade_cli.store.records import SNAP, ChunkMeta, RepairReport
from cascade_cli.store.schema import FORMAT_VERSION, register_migrations
from cascade_cli.store.stats import Stats, owners, snapshot

__all__ = [
    "FORMAT_VERSION",
    "SNAP",
    "ChunkMeta",
    "DiskStore",
    "Pager",
    "RamCache",
    "RepairReport",
    "Stats",
    "checksum",
    "owners",
    "register_migrations",
    "snapshot",
]
