"""The RAM tier: an LRU of ready-to-restore chunk states bounded by the bytes it holds."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from cascade_cli.store.stats import Stats


def nbytes_of(value: Any) -> int:
    """Bytes a cached value occupies (``.nbytes`` for arrays and memoryviews, else ``len``)."""
    size = getattr(value, "nbytes", None)
    return int(size) if size is not None else len(value)


class RamCache:
    """Thread-safe LRU bounded by ``budget`` bytes (the sum of every held buffer's nbytes).

    An item larger than the whole budget is not cached. Hits, misses and evictions are counted
    here and, when ``stats`` is given, under its ``ram`` tier.
    """

    def __init__(self, budget: int, stats: Stats | None = None, tier: str = "ram") -> None:
        if budget < 0:
            raise ValueError("budget must be >= 0")
        self.budget = budget
        self._stats = stats
        self._tier = tier
        self._items: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def _count(self, name: str, n: int = 1) -> None:
        if self._stats is not None:
            self._stats.add(self._tier, name, n)

    def get(self, key: str) -> Any | None:
        """The cached state (now most recently used), or None."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
            else:
                self.hits += 1
                self._items.move_to_end(key)
        if item is None:
            self._count("misses")
            return None
        self._count("hits")
        self._count("bytes_read", item[1])
        return item[0]

    def peek(self, key: str) -> Any | None:
        """The cached state without counting or reordering, or None."""
        with self._lock:
            item = self._items.get(key)
        return None if item is None else item[0]

    def put(self, key: str, value: Any) -> bool:
        """Cache ``value`` (replacing ``key``), evicting LRU items; False if it cannot fit."""
        size = nbytes_of(value)
        evicted = 0
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.nbytes -= old[1]
            if size > self.budget:
                return False
            while self.nbytes + size > self.budget:
                _, (_, n) = self._items.popitem(last=False)
                self.nbytes -= n
                evicted += 1
            self._items[key] = (value, size)
            self.nbytes += size
            self.evictions += evicted
        self._count("evictions", evicted)
        self._count("bytes_written", size)
        return True

    def pop(self, key: str) -> Any | None:
        """Remove and return ``key``'s state, or None."""
        with self._lock:
            item = self._items.pop(key, None)
            if item is None:
                return None
            self.nbytes -= item[1]
        return item[0]

    def discard_prefix(self, prefix: str) -> int:
        """Drop every key starting with ``prefix`` (e.g. a deleted document's); returns count."""
        with self._lock:
            keys = [k for k in self._items if k.startswith(prefix)]
            for k in keys:
                self.nbytes -= self._items.pop(k)[1]
        return len(keys)

    def clear(self) -> None:
        """Drop everything (not counted as evictions)."""
        with self._lock:
            self._items.clear()
            self.nbytes = 0

    def resize(self, budget: int) -> None:
        """Change the budget, evicting LRU items to honour it."""
        with self._lock:
            self.budget = budget
            evicted = 0
            while self.nbytes > budget:
                _, (_, n) = self._items.popitem(last=False)
                self.nbytes -= n
                evicted += 1
            self.evictions += evicted
        self._count("evictions", evicted)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def keys(self) -> list[str]:
        """Keys from least to most recently used."""
        with self._lock:
            return list(self._items)
