"""Local model paths: which a researcher may point an LM at, and the folders the lab keeps for itself.

A checkpoint's folder is whatever a source's ``model_name_or_path`` or a job's parameter names, so
one rule decides whether a user may load (or point a source at) a local path, wherever that path
comes in: a job's params and question generator (``generation.jobs.generation_job_inputs_check``), a
source edited in the admin (``content.content_row_save``) or brought by a study bundle, a question
generator saved in the admin. Another researcher's checkpoint
is reached only through a source they may read (``sources_for_user``)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from django.conf import settings

from studies.lm.model_dir import MODEL_DIR_PREFIX, model_location  # noqa: F401  (read here by the migration and the app)
from studies.models import RationaleSource
from studies.selectors import sources_for_user

# The folders the code keeps under RL_MODEL_DIR beside the published checkpoints: Quark's runs
# (``quark.run_folder``: every job's resumable checkpoint) and what ``model_folder_publish`` writes
# beside a folder while it swaps it in (``<name>.partial``, ``<name>.job<id>.partial``, ``<name>.old``).
QUARK_RUNS = "quark-runs"
SCRATCH_SUFFIXES = (".partial", ".old")


def resolved_path(path: str | Path) -> Path:
    """``path`` made absolute (relative to the working directory, as a model loader reads it), with
    ``~``, ``..`` and symbolic links resolved."""
    return Path(path).expanduser().resolve()


def path_within(path: Path, folder: Path) -> bool:
    """Whether the resolved ``path`` is ``folder`` or lies under it (both resolved)."""
    return path == folder or folder in path.parents


# What a training job writes into the checkpoint it publishes under RL_MODEL_DIR: its training
# record, with its ``job_id`` (fine-tuning and Quark alike), the same record it registers on the
# source (``RationaleSource.training``).
TRAINING_FILE = "rationale_lab_training.json"


def folder_training_record(model_name_or_path: str) -> dict | None:
    """The training record of the published checkpoint the local model ``model_name_or_path`` is or
    lies in: the :data:`TRAINING_FILE` of that folder, or of the nearest folder above it under
    ``RL_MODEL_DIR``; None for a model elsewhere, a hub name, or no readable record here (the
    folder may live on an LM worker only)."""
    path = local_model_path(model_name_or_path)
    root = resolved_path(settings.RL_MODEL_DIR)
    if path is None or path == root or not path_within(path, root):
        return None
    for folder in (path, *path.parents):
        if folder == root:
            return None
        try:
            record = json.loads((folder / TRAINING_FILE).read_text())
        except (FileNotFoundError, NotADirectoryError):  # none here, or a model file (a GGUF) in the folder
            continue
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None
    return None


def operator_model_paths() -> list[Path]:
    """The models the operator configures in the settings rather than as a source: the demo's GGUF
    file (``RL_DEMO_LM_GGUF``) and the similarity model (``RL_SIMILARITY_MODEL``), resolved."""
    paths = (settings.RL_DEMO_LM_GGUF, settings.RL_SIMILARITY_MODEL)
    return [resolved_path(p) for p in paths if str(p or "").strip()]




def model_path_stored(path: str | Path) -> str:
    """The form a row keeps the model ``path`` in: ``models:<relative posix path>`` for a path (the
    folder itself excluded) under the current ``RL_MODEL_DIR`` (resolved, as :func:`local_model_path`
    reads it), anything else (a hub name, a path elsewhere, a stored form) as it is, stripped."""
    text = str(path or "").strip()
    if not text or text.startswith(MODEL_DIR_PREFIX):
        return text
    local = local_model_path(text)
    if local is None:
        return text
    root = resolved_path(settings.RL_MODEL_DIR)
    if local == root or root not in local.parents:
        return text
    return MODEL_DIR_PREFIX + local.relative_to(root).as_posix()


def local_model_path(text: str) -> Path | None:
    """The resolved path ``text`` names when it names a local model (a stored ``models:`` form,
    :func:`model_location`; absolute, starting with ``.`` or ``~``, or existing relative to the
    working directory, as a loader reads it); None for a hub name (``org/model`` with no such folder
    here) or text that is no path."""
    text = str(text or "").strip()
    if not text:
        return None
    if text.startswith(MODEL_DIR_PREFIX):
        text = model_location(text)
    try:
        path = resolved_path(text)
        if Path(text).expanduser().is_absolute() or text.startswith((".", "~")) or os.path.lexists(path):
            return path
    except (OSError, ValueError, RuntimeError):
        pass
    return None


def model_path_readable(value, *, visible_sources, missing_ok: bool = False) -> bool:
    """Whether a job acting for a user who may read ``visible_sources`` (``sources_for_user``) may
    load the model ``value`` names (fine-tuning's ``base_model``, faithfulness's ``task_model``,
    Quark's ``policy_path`` when it names no source). A hub name is the loader's to fetch: readable.
    A local path (:func:`local_model_path`) that is (under) some source's model is readable only
    through a source the user may read whose model it is (under), whether it exists or not; one
    that no source holds is an operator's model, readable (the ones the settings name,
    :func:`operator_model_paths`, always), except under ``RL_MODEL_DIR``, where the jobs publish:
    there only an existing folder outside the hidden, scratch and Quark-run folders is, and a
    missing one gets the answer of a hidden one (``missing_ok``: a source may name a folder not made
    yet). One query over the sources' model paths, made only for a local path."""
    path = local_model_path(value)
    if path is None:
        return True
    if any(path_within(path, p) for p in operator_model_paths()):
        return True
    held = []  # (source id, whether its model is the path or above it)
    for pk, model in RationaleSource.objects.exclude(model_name_or_path="").values_list("pk", "model_name_or_path"):
        theirs = local_model_path(model)
        if theirs is not None and (path_within(path, theirs) or path_within(theirs, path)):
            held.append((pk, path_within(path, theirs)))
    if held:
        return visible_sources.filter(pk__in=[pk for pk, above in held if above]).exists()
    root = resolved_path(settings.RL_MODEL_DIR)
    if path_within(path, root):
        parts = path.relative_to(root).parts
        return (bool(parts) and not (parts[0].startswith(".") or parts[0] == QUARK_RUNS
                                     or parts[0].endswith(SCRATCH_SUFFIXES)) and (missing_ok or os.path.lexists(path)))
    return True


def source_model_path_problem(*, user, path: str) -> str:
    """Why ``user`` may not point a rationale source or a question generator at the model ``path``
    (its ``model_name_or_path``), empty when they may: the rule jobs load models by
    (:func:`model_path_readable`), so a source cannot become a way into another researcher's
    checkpoint, Quark's runs or a scratch folder; a folder not made yet is allowed. The operator
    (``user`` None) may name any. The admin's source form, ``content.content_row_save``, the
    study bundle import and the admin's question generator form ask this."""
    if user is None or not str(path or "").strip():
        return ""
    if model_path_readable(path, visible_sources=sources_for_user(user=user), missing_ok=True):
        return ""
    return (f"model_name_or_path: no model {str(path)!r} that you may use (a folder of a source you may read, a "
            "hub name, or a folder of your own outside the lab's model folders)")
