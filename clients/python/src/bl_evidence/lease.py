"""A dispatch lease for processes on one host: SQLite's write lock.

`SqliteDispatchLease(path).hold(operation_id)` holds an exclusive lock on
the database for the reservation and the call, so two processes of the
app never dispatch at once. While one dispatch holds it, another waits
(up to `timeout` seconds) for the whole of the first one's tool call. It is
a reference for tests and single-host deployments; across hosts, use your
own (any object with `hold()`).
"""

from __future__ import annotations

import sqlite3
import time
import warnings
from contextlib import contextmanager
from typing import Iterator


class LeaseTimeout(TimeoutError):
    """Another dispatch held the lease for longer than the timeout."""


class SqliteDispatchLease:
    def __init__(self, path: str, *, timeout: float = 30.0):
        self.path = path
        self.timeout = timeout
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE IF NOT EXISTS dispatched (operation_id TEXT PRIMARY KEY, at REAL NOT NULL)")

    @contextmanager
    def hold(self, operation_id: str) -> Iterator[None]:
        # An async node takes and gives back the lease on worker threads,
        # not always the same one; the connection is used by one at a time.
        db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
        try:
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                if getattr(e, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED"):
                    raise LeaseTimeout(f"the dispatch lease {self.path} was held by another dispatch for more "
                                       f"than {self.timeout} s; nothing was reserved or called") from e
                raise
            try:
                db.execute("INSERT OR IGNORE INTO dispatched VALUES (?, ?)", (operation_id, time.time()))
                yield
            except BaseException:
                db.execute("ROLLBACK")
                raise
            try:
                db.execute("COMMIT")
            except sqlite3.Error as e:
                # The call is over and bl holds its record; closing the
                # connection gives the lock back all the same.
                warnings.warn(f"the dispatch lease {self.path}: {e}; the lock is given back on close",
                              RuntimeWarning, stacklevel=2)
        finally:
            db.close()
