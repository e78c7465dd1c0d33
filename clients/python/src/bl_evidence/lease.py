"""A dispatch lease for processes on one host: SQLite's write lock.

`SqliteDispatchLease(path).hold(operation_id)` holds an exclusive lock on
the database for the reservation and the call, so two processes of the
app never dispatch at once. It is a reference for tests and single-host
deployments; across hosts, use your own (any object with `hold()`).
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import contextmanager
from typing import Iterator


class SqliteDispatchLease:
    def __init__(self, path: str, *, timeout: float = 30.0):
        self.path = path
        self.timeout = timeout
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE IF NOT EXISTS dispatched (operation_id TEXT PRIMARY KEY, at REAL NOT NULL)")

    @contextmanager
    def hold(self, operation_id: str) -> Iterator[None]:
        db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT OR IGNORE INTO dispatched VALUES (?, ?)", (operation_id, time.time()))
            yield
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        finally:
            db.close()
