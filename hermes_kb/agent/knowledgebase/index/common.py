"""What both stores do the same way on top of their own SQL (StoreCommon), and the columns a chunk
row is read from in both."""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

from .. import analysis
from ..embeddings import ModelIdentity
from .contract import SCHEMA_VERSION, VECTOR_IDS, IndexCorrupt, StoreError
from .local_files import companion_paths

MAX_COSINE_BASELINE = 0.9  # a recorded baseline above this is damage, not a model: vector scores keep a range
REANALYSE_BATCH = 1_000  # chunks whose texts a re-analysis reads at once: the texts of 1M chunks are GBs

CHUNK_COLUMNS = ("c.id, f.path, f.kind, c.ord, c.text, c.start_line, c.end_line, c.page, c.heading, c.content_hash, "
                 "f.size, f.mtime_ns, f.recognised")
# Chunk ids in a fixed scattered order (Knuth's multiplicative hash, a permutation of ids below 2^32):
# a sample spread over the whole index that is the same every time the same files are indexed.
SAMPLE_ORDER = "(id * 2654435761) % 4294967296, id"


class StoreCommon:
    """What both stores (SQLite here, PostgreSQL in pg_store) do the same way on top of their own SQL:
    each supplies conn, path, _t (a table's qualified name), meta, all_meta, set_meta, has_vector_table, transaction,
    _bump_generation, _insert_vectors and _delete_paths."""

    def _chunk_texts(self, placeholder: str) -> Iterator[list[tuple[int, str, str]]]:
        """(id, text, heading) of every chunk, REANALYSE_BATCH at a time in id order (`placeholder`:
        the driver's parameter mark), never all of them in memory at once."""
        after = -1
        while rows := self.conn.execute(f"SELECT id, text, heading FROM {self._t('chunks')} WHERE id > {placeholder} "
                                        f"ORDER BY id LIMIT {REANALYSE_BATCH}", (after,)).fetchall():
            yield rows
            after = rows[-1][0]

    def sample_texts(self, limit: int) -> list[str]:
        """Up to `limit` chunk texts spread over the index: what it is like (its share of code, how much
        of it the model reads), cheaply. Not drawn at random: fusion weighs the vector side by these
        figures, and a random draw made the same folder, indexed twice, score its hits differently
        (calibrate_pipeline's nDCG moved by up to 0.01 a form between identical runs)."""
        return [row[0] for row in self.conn.execute(
            f"SELECT text FROM {self._t('chunks')} ORDER BY {SAMPLE_ORDER} LIMIT {int(limit)}").fetchall()]

    def close(self) -> None:
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def reembed_pending(self) -> bool:
        return self.meta("reembed_pending") == "1"

    def model_identity(self) -> ModelIdentity | None:
        meta = self.all_meta()
        if "model_id" not in meta:
            return None
        try:
            return ModelIdentity(meta["model_id"], meta.get("model_variant", ""), int(meta.get("dimension", "")))
        except ValueError:
            raise IndexCorrupt(f"The index {self.path} records no usable vector dimension "
                               f"({meta.get('dimension')!r}); run `hermes kb doctor --repair` to rebuild it.") from None

    def has_window_vectors(self) -> bool:
        """False for vectors written before chunks had windows (rowid = chunk id): they must be rebuilt."""
        return not self.has_vector_table() or self.meta("vector_ids") == VECTOR_IDS

    def drop_vectors(self) -> None:
        """Forget every vector and the pinned model (a model change means re-embedding all)."""
        with self.transaction():
            generation = self._bump_generation()
            self.conn.execute(f"DROP TABLE IF EXISTS {self._t('chunk_vec')}")
            self.conn.execute(f"DELETE FROM {self._t('meta')} WHERE key IN ('model_id', 'model_variant', 'dimension', 'vector_ids')")
            # The journal entry of the re-embed this starts: cleared only by a run that finished it, so a
            # run cut short (SIGKILL, disk full) is finished by the next one, not taken as done.
            # No vector copy of an earlier state may serve with a delta (SQLite's vector log; PostgreSQL
            # keeps none): its vectors are another model's.
            self.set_meta(reembed_pending=1, vectors_logged_since=generation)

    def add_vectors(self, vectors: dict[int, np.ndarray]) -> None:
        """Window vectors for chunks written earlier without them (keyword-first indexing), atomically."""
        with self.transaction():
            self._bump_generation()
            self._insert_vectors(vectors)

    def delete_files(self, paths: Iterable[str]) -> int:
        """Forget these files (relative paths), their chunks, terms and vectors, in one transaction."""
        paths = list(paths)
        if not paths:
            return 0
        with self.transaction():
            self._bump_generation()
            self._delete_paths(paths)
        return len(paths)

    def _check_schema(self, where: str) -> None:
        """On opening: refuse an index a newer version wrote; re-analyse one an older analyzer wrote."""
        written = int(self.meta("schema_version") or SCHEMA_VERSION)
        if written > SCHEMA_VERSION:
            raise StoreError(f"The index of {where} was written by a newer hermes-knowledgebase (schema {written}; "
                             f"this one reads {SCHEMA_VERSION}); upgrade hermes-knowledgebase to use it.")
        if self.meta("analyzer") != analysis.ANALYZER:
            self.reanalyse()

    def code_share(self) -> float:
        """The share of this index's chunks that are program source (meta `code_share`, set by index runs)."""
        return self._fraction("code_share")

    def cosine_baseline(self) -> float:
        """The cosine this index's model gives two unrelated texts (meta `cosine_baseline`, set by index
        runs: embeddings.cosine_baseline; 0 before one has measured it): what vector scores start from."""
        return min(self._fraction("cosine_baseline"), MAX_COSINE_BASELINE)

    def _fraction(self, key: str) -> float:
        try:
            return min(1.0, max(0.0, float(self.meta(key) or 0.0)))
        except ValueError:
            return 0.0

    def latin_languages(self) -> tuple[str, ...]:
        """The stemmers this index's Latin-script words were stemmed with: a query is stemmed in each."""
        return analysis.languages_of(self.meta("languages"))

    def _record_languages(self, used: Iterable[str]) -> None:
        """Inside a writing transaction: add languages its chunks were stemmed in (never removed: an
        extra language only adds a query alternative)."""
        known = set((self.meta("languages") or "").split(",")) - {""}
        if not set(used) <= known:
            self.set_meta(languages=",".join(sorted(known | set(used))))

    def local_bytes(self) -> int:
        """What this machine keeps of the index on disk: the file and its companions (the copies)."""
        return sum(p.stat().st_size for p in companion_paths(self.path) if p.exists())

