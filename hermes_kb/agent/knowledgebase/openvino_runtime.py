"""The offline default model run by OpenVINO: the same vectors, about 3.8x faster on this CPU.

Why not onnxruntime for the default: the shipped int8 export keeps its weights
as INT8 initializers dequantized by Cast+Mul, so onnxruntime runs every MatMul
in fp32 (95% of indexing time, near this CPU's fp32 peak). OpenVINO folds the
dequantization into its kernels and, where the CPU has bf16 units (AMX,
AVX512-BF16), runs the matrix products in bf16 with fp32 accumulation. Measured
on SciFact chunks: cosine to onnxruntime's vectors >= 0.99997, so an index built
by either runtime is searched by the other without re-embedding (both pin the
same model identity). Without bf16 units OpenVINO runs fp32 (1.5x, the same vectors).

Tokenisation repeats fastembed's for this model (word pieces truncated at 256,
[PAD] to the right) and pooling is the model's mean over real tokens. Batches
are padded to a multiple of 32 pieces: OpenVINO compiles kernels per input
shape, and fewer shapes mean less memory and less compiling (~7% faster).

Two compilations of the one model: a query is one small batch, fastest on one
stream over every core (LATENCY); an index run's many batches go through
OpenVINO's THROUGHPUT streams (one per core here), a batch per stream at a
time, which keeps the cores busy where one small batch split across them waits
on its slowest thread: 1.22x the model's speed on a Xeon with AMX (docs/benchmarks.md,
"On a Xeon with AMX: streams for an index run"), the same vectors.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

log = logging.getLogger(__name__)

PAD_MULTIPLE = 32
# bf16 where the CPU has it (OpenVINO falls back to fp32 by itself elsewhere); LATENCY keeps one
# stream on all cores, which suits our small length-sorted batches. Dynamic quantization off: in fp32
# OpenVINO quantizes the activations of int8-weight MatMuls on the fly by default, which put the cosine
# to onnxruntime's vectors at 0.9988 on a one-word text (1.00000 without it, at 1.5x instead of 2x).
# With bf16 on a CPU with VNNI, activations quantized per token in groups of ACTIVATION_GROUP values buy
# 1.7-2x (docs/benchmarks.md, "int8 activations") at a cosine of 0.9987 (0.9965 on short texts): below the
# 0.999 that lets either runtime search one index, so that is a variant of its own, which an index
# records (embeddings.INT8_ACTIVATIONS_VARIANT), served by OpenVINO alone.
COMPILE_SETTINGS = {"INFERENCE_PRECISION_HINT": "bf16", "PERFORMANCE_HINT": "LATENCY", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
BATCHES_SETTINGS = {"PERFORMANCE_HINT": "THROUGHPUT"}  # OpenVINO picks the streams (2 on 2 cores)
ACTIVATION_GROUP = 128
# int8 dot products and bf16 units: where int8 activations were measured to pay with quality kept
# (AMD EPYC with AVX512-VNNI/BF16: 1.3-2.0x the model). Not with AMX: its bf16 tiles multiply as fast as
# int8 activations do there (Xeon with AMX: 14.9 s against 14.6 s for 1,907 windows), so they would cost
# quality for nothing.
INT8_FLAGS, BF16_FLAGS, AMX_FLAGS = {"avx512_vnni", "avx_vnni"}, {"avx512_bf16"}, {"amx_bf16"}


def _compiled(core, model: Path, cache_dir: Path | None, activation_group: int, extra: dict | None = None):
    """The model compiled for this CPU. OpenVINO's own cache (CACHE_DIR, keyed by the model, these
    settings, the CPU and OpenVINO's version) turns the 0.29 s compile of every cold hybrid search into
    a 0.08 s load; a cache that cannot be written or read costs only the compile."""
    settings = {**COMPILE_SETTINGS, "DYNAMIC_QUANTIZATION_GROUP_SIZE": activation_group, **(extra or {})}
    if cache_dir is not None:
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
            return core.compile_model(str(model), "CPU", {**settings, "CACHE_DIR": str(cache_dir)})
        except Exception as exc:  # noqa: BLE001  (OpenVINO raises RuntimeError and others for a bad blob)
            log.info("OpenVINO's compile cache in %s is not usable (%s); compiling without it", cache_dir, exc)
    return core.compile_model(core.read_model(str(model)), "CPU", settings)


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("openvino") is not None


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """This CPU's feature flags (Linux); empty where the kernel does not say."""
    try:
        with cpuinfo.open(encoding="ascii", errors="replace") as lines:
            for line in lines:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def int8_activations_pay(flags: set[str] | None = None) -> bool:
    """Whether this CPU multiplies int8 activations faster at the measured quality (INT8_FLAGS and
    BF16_FLAGS); without VNNI OpenVINO leaves them in floating point anyway."""
    flags = cpu_flags() if flags is None else flags
    return bool(flags & INT8_FLAGS) and bool(flags & BF16_FLAGS) and not flags & AMX_FLAGS


class OpenVinoMeanPooled:
    """A BERT-style ONNX model folder (model.onnx + tokenizer.json) that embeds by mean pooling."""

    def __init__(self, model_dir: Path, max_tokens: int, cache_dir: Path | None = None, activation_group: int = 0):
        import openvino
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_tokens)
        pad_id = self._tokenizer.token_to_id("[PAD]")
        self._tokenizer.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]",
                                       pad_to_multiple_of=PAD_MULTIPLE)
        self._core, self._compile_args = openvino.Core(), (model_dir / "model.onnx", cache_dir, activation_group)
        compiled = _compiled(self._core, *self._compile_args)
        self._inputs = {port.get_any_name() for port in compiled.inputs}
        self.precision = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()  # bf16 or f32
        self._request = compiled.create_infer_request()
        self._lock = threading.Lock()  # one infer request: a query may come while an index run embeds
        self._streams = None  # the THROUGHPUT compilation, made by the first call with several batches
        self._queues: dict[int, object] = {}  # its infer requests, by how many run at once
        self._streams_lock = threading.Lock()
        self.dim = int(compiled.outputs[0].get_partial_shape()[2].get_length())

    def _feeds(self, texts: Sequence[str]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        encoded = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        return {name: value for name, value in feeds.items() if name in self._inputs}, mask

    @staticmethod
    def _pooled(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return (hidden * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One batch, one row per text (not normalised)."""
        feeds, mask = self._feeds(texts)
        with self._lock:  # the output tensor is the request's own buffer: pool it before the next call
            return self._pooled(self._request.infer(feeds)[0], mask)

    def embed_batches(self, batches: Sequence[Sequence[str]], leave_a_core: bool = False) -> list[np.ndarray]:
        """Each batch's rows (as `embed`), the batches spread over OpenVINO's streams; the next batch
        is tokenised while the streams run. `leave_a_core` runs one stream fewer (at least one), for
        an index run whose own thread is still reading files."""
        if len(batches) < 2 and not leave_a_core:
            return [self.embed(batch) for batch in batches]
        with self._streams_lock:
            queue = self._queue(leave_a_core)
            out: list[np.ndarray | None] = [None] * len(batches)

            def pooled(request, userdata) -> None:  # in OpenVINO's thread, before the request is reused
                index, mask = userdata
                out[index] = self._pooled(request.get_output_tensor(0).data, mask)

            queue.set_callback(pooled)
            for index, batch in enumerate(batches):
                feeds, mask = self._feeds(batch)
                queue.start_async(feeds, (index, mask))
            queue.wait_all()
        if any(rows is None for rows in out):
            raise RuntimeError("OpenVINO returned no vectors for a batch")
        return out

    def _queue(self, leave_a_core: bool):
        """The infer requests of the THROUGHPUT compilation (made on first use), one per stream, or one
        fewer to leave a core."""
        import openvino

        if self._streams is None:
            self._streams = _compiled(self._core, *self._compile_args, BATCHES_SETTINGS)
        streams = int(self._streams.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        size = max(1, streams - 1) if leave_a_core else streams
        if size not in self._queues:
            self._queues[size] = openvino.AsyncInferQueue(self._streams, size)
        return self._queues[size]
