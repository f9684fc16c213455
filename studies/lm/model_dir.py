"""How a model folder under ``RL_MODEL_DIR`` is named in the database, and where that name points:
no model is read here, so the backends import it at load time of the module (the rights on a
path are ``studies.services.model_paths``')."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings

# How a model path under ``RL_MODEL_DIR`` is stored (a source's or generator's ``model_name_or_path``,
# a job's params, a Gen-U prediction's answerer model): ``models:<path relative to RL_MODEL_DIR>``,
# so the row still names the folder after the database is restored beside a moved ``RL_MODEL_DIR``.
# A hub id never holds a ``:``, so the form is never taken for one.
MODEL_DIR_PREFIX = "models:"


def model_location(text: str) -> str:
    """What a loader opens for the model ``text`` names (a stored form resolved against the current
    ``RL_MODEL_DIR``, anything else as it is). Every loader asks this before loading: the backends'
    ``load_transformers_model`` and ``load_trainable_model`` (so Quark's ``load_models``, the label
    scorer and the GGUF files too) and fine-tuning's base model."""
    text = str(text or "").strip()
    if text.startswith(MODEL_DIR_PREFIX):
        return str(Path(settings.RL_MODEL_DIR) / text.removeprefix(MODEL_DIR_PREFIX))
    return text
