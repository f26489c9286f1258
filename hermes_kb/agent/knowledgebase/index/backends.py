"""Which backend (contract.Backend) holds the indexes: `knowledgebase.store` names SQLite files under
HERMES_HOME (sqlite_backend.py, the default) or schemas on a PostgreSQL server (pg_backend.py). Nothing
above this package knows which it is."""

from __future__ import annotations

from pathlib import Path

from ..config import StoreConfig
from .contract import Backend


def backend_for(config: StoreConfig, hermes_home: Path) -> Backend:
    """The backend `knowledgebase.store` names (PostgreSQL's, and its driver, loaded only when named)."""
    if config.backend == "postgres":
        from .pg_backend import PostgresBackend

        return PostgresBackend(hermes_home, config.url)
    from .sqlite_backend import SqliteBackend

    return SqliteBackend(hermes_home)
