"""An SQLite connection that several threads may share: every statement and every fetch runs
under the connection's re-entrant lock, which the store's transactions hold from BEGIN to COMMIT.

The write-back thread commits chunk rows while the main thread reads the catalog or recalls
chunks; with a bare shared connection a read could land inside the writer's transaction or step
a cursor while it commits. Here a reader simply waits for the transaction to finish.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from typing import Any


class LockedCursor(sqlite3.Cursor):
    """A cursor whose execute/fetch calls hold its connection's ``guard``."""

    def __init__(self, conn: LockedConnection) -> None:
        super().__init__(conn)
        self._guard = conn.guard

    def execute(self, sql: str, parameters: Any = (), /) -> LockedCursor:
        with self._guard:
            super().execute(sql, parameters)
        return self

    def executemany(self, sql: str, seq: Iterable[Any], /) -> LockedCursor:
        with self._guard:
            super().executemany(sql, seq)
        return self

    def fetchone(self) -> Any:
        with self._guard:
            return super().fetchone()

    def fetchmany(self, size: int | None = 1) -> list[Any]:
        with self._guard:
            return super().fetchmany(size if size is not None else self.arraysize)

    def fetchall(self) -> list[Any]:
        with self._guard:
            return super().fetchall()

    def __next__(self) -> Any:
        with self._guard:
            return super().__next__()


class LockedConnection(sqlite3.Connection):
    """``sqlite3.connect(..., factory=LockedConnection)``: statements serialised by ``guard``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = threading.RLock()

    def cursor(self, factory: Any = None) -> Any:
        cursor: Any = super().cursor
        return cursor(factory or LockedCursor)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        cur: LockedCursor = self.cursor()
        return cur.execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        cur: LockedCursor = self.cursor()
        return cur.executemany(sql, parameters)

    def close(self) -> None:
        with self.guard:
            super().close()
