"""What an LM job reads, checked for its researcher: when it is created
(:func:`generation_job_inputs_check`) and whenever it runs (:func:`generation_job_inputs_refusal`,
which ``lifecycle.job_refusal`` asks at each batch's start, at fine-tuning's and Quark's progress
checks, on a resume and on beat's requeue), with the settings of the sources and question
generator a job reads as it runs, recorded when it is created (:func:`job_settings_snapshot`) and
compared with the live ones each time (:func:`job_settings_refusal`). Its own module, below
``lifecycle`` and the job kinds, so that every process that runs a job has the check (it was
handed to ``lifecycle`` by ``jobs`` when that module was imported, and a process that had not
imported it checked nothing); and the one lookup by which a source is named by its name or id
(:func:`source_by_name_or_id`)."""
from __future__ import annotations

from contextvars import ContextVar

from lab.ids import parse_id
from lab.jsontext import json_fingerprint, text_problem
from studies.lm.backends import openai_options_problem
from studies.lm.model_dir import model_location
from studies.models import Dataset, GenerationJob, Item, QuestionGenerator, RationaleSource, Study
from studies.selectors import (
    datasets_for_user,
    items_for_jobs,
    items_for_user,
    question_generators_for_user,
    sources_for_user,
)
from studies.services.content import PARENT_SELECTORS, job_acts_for
from studies.services.model_paths import (
    folder_training_record,
    local_model_path,
    model_path_readable,
    model_path_stored,
    path_within,
)

from .errors import GenerationError


def source_by_name_or_id(text: str, *, role: str = "policy") -> RationaleSource | None:
    """The rationale source named ``text``, else the one whose id it is. Text no query can carry
    (a NUL) is refused here, naming ``role``: the one lookup every way of naming a source goes through."""
    text = str(text or "").strip()
    problem = text_problem(text)
    if problem:
        raise GenerationError(f"{role} {problem}")
    found = RationaleSource.objects.filter(name=text).first()
    pk = parse_id(text) if found is None else None
    if pk is not None:
        found = RationaleSource.objects.filter(pk=pk).first()
    return found


# The params that name a rationale source by id (Gen-U answers and Quark's genu reward).
SOURCE_PARAMS = GenerationJob.SOURCE_PARAMS
# The params that name a model to load by its path or hub name (Quark's policy_path is checked
# beside the source it may name instead).
MODEL_PATH_PARAMS = ("base_model", "task_model")


def _id_or_none(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return parse_id(value)


# Who the job being created reads for: :func:`generation_job_inputs_check` (which
# ``generation_job_create`` asks right before the kind's ``prepare``) sets it, ``prepare`` picks the
# items it takes from a dataset or split only among those they may read (:func:`readable_item_ids`,
# through ``common.ordered_item_ids``), and ``common.Handler`` clears it once ``prepare`` returns.
# ``("operator",)``: every item; unset (``()``): nothing is being created, nothing to filter for.
_PREPARING_FOR: ContextVar[tuple] = ContextVar("generation_job_preparing_for", default=())
# What ``prepare`` left out, by role (``items``; Quark's ``train``, ``validation``, ``heldout``), for
# the job's record (``params[ITEMS_LEFT_OUT]``, written by ``common.Handler``).
_LEFT_OUT: ContextVar[dict | None] = ContextVar("generation_job_items_left_out", default=None)
ITEMS_LEFT_OUT = "items_left_out"
ITEMS_LEFT_OUT_WHY = ("items of the chosen dataset and split that only studies you may not read show (items_for_jobs): "
                      "a job reads and sends its items' questions and gold answers and rationales, so it takes only "
                      "the items you may read")
# Said instead for a kind that writes rows under its items (``Handler.builds_on_items``): rationales,
# generalization questions, Gen-U predictions.
ITEMS_NOT_TO_BUILD_ON_WHY = (
    "items of the chosen dataset and split that only studies you may not read show (items_for_jobs), or that you may "
    "read but not build on (items_to_build_on): a job that writes rationales, generalization questions or Gen-U "
    "predictions hangs them from its items, so it takes only those a row of yours may hang from, as the admin's pages "
    "and the imports add: not the items of a dataset you read only through a study shared with you to view")
# Why such a kind refuses items, or a rationale source, that its researcher may read but not build on.
BUILD_ON_WHY = ("a job that writes rationales, generalization questions or Gen-U predictions hangs them from its items "
                "(and a rationale or Gen-U job from its source), so it takes only those you may build on, as the "
                "admin's pages and the imports add: not those of a dataset, nor a source, that you read only through "
                "a study shared with you to view")


def preparing_for(user) -> None:
    """The job about to be prepared reads for ``user`` (None: the operator)."""
    _PREPARING_FOR.set(("operator",) if user is None else ("user", user))


def preparing_done() -> None:
    _PREPARING_FOR.set(())


def left_out_tally() -> tuple[dict, object]:
    """A fresh tally of the items ``prepare`` leaves out (:func:`readable_item_ids`), and its token."""
    tally: dict = {}
    return tally, _LEFT_OUT.set(tally)


def left_out_tally_reset(token) -> None:
    _LEFT_OUT.reset(token)


def readable_item_ids(ids: list[int], *, role: str = "items", build_on: bool = False) -> list[int]:
    """Of ``ids`` (items a new job takes from a dataset or split), those its researcher may read
    (``items_for_jobs``; the operator's job: all), in their order; how many were left out is added
    to the tally of ``role`` (:func:`left_out_tally`). A dataset a researcher sees may hold items
    that only another researcher's study shows, as the demonstration draw already allows for
    (``rationales.train_demonstrations``, by the same rule): the job runs on the rest rather than
    being refused.

    ``build_on``: for a kind that writes rows under its items (rationales, generalization
    questions), those they may build on instead (``content.PARENT_SELECTORS``: ``items_to_build_on``,
    the rule of the admin's content forms and the imports, within ``items_for_jobs``), the others
    left out and counted alike: a dataset they read only through a study shared with them to view is
    read, not theirs to add to. The rows are checked again as they are stored
    (``common.job_added_refusals``)."""
    reader = _PREPARING_FOR.get()
    if not reader or reader[0] == "operator":
        return ids
    rule = PARENT_SELECTORS[Item] if build_on else items_for_jobs
    readable = set(rule(user=reader[1]).filter(pk__in=ids).values_list("pk", flat=True))
    kept = [i for i in ids if i in readable]
    tally = _LEFT_OUT.get()
    if tally is not None:
        tally[role] = tally.get(role, 0) + len(ids) - len(kept)
    return kept


def item_ids_to_build_on_check(ids: list[int]) -> None:
    """Refuse, naming how many and the first few, the item ids given to a new job that writes rows
    under its items that its researcher may read (``generation_job_inputs_check`` refused the
    others as missing) but not build on (:func:`readable_item_ids` with ``build_on``): ids chosen one
    by one are refused rather than left out, as hidden ones are."""
    reader = _PREPARING_FOR.get()
    if not reader or reader[0] == "operator":
        return
    ids = sorted(set(ids))
    allowed = set(PARENT_SELECTORS[Item](user=reader[1]).filter(pk__in=ids).values_list("pk", flat=True))
    refused = [i for i in ids if i not in allowed]
    if refused:
        raise GenerationError(f"{len(refused)} of the {len(ids)} item ids given (ids {refused[:10]}) are not items you "
                              f"may build on: {BUILD_ON_WHY}")


def source_to_build_on_check(source: RationaleSource, *, role: str = "rationale source") -> None:
    """Refuse a new job's source that its researcher may read (``generation_job_inputs_check``
    refused a hidden one as missing) but not build on (``content.PARENT_SELECTORS``:
    ``sources_for_design``), for a kind that writes its rows under that source (rationales)."""
    reader = _PREPARING_FOR.get()
    if not reader or reader[0] == "operator":
        return
    if not PARENT_SELECTORS[RationaleSource](user=reader[1]).filter(pk=source.pk).exists():
        raise GenerationError(f"{role} {source.name!r} is not a source you may build on: {BUILD_ON_WHY}")


def generation_job_inputs_check(*, user, source: RationaleSource | None, dataset: Dataset | None,
                                item_ids: list[int] | None, params: dict | None,
                                generator: QuestionGenerator | None = None) -> None:
    """Refuse, with ``GenerationError``, a job that would read what ``user`` may not: the source
    (and the sources its params name: ``answerer_i`` / ``answerer_ir``, Quark's ``policy_path`` when
    it names a source) outside ``sources_for_user``, the question generator outside
    ``question_generators_for_user``, the dataset outside ``datasets_for_user``, item ids outside
    ``items_for_user``. A job copies its generator's instructions and its source's or generator's
    demonstrations (or its dataset's train items drawn as demonstrations) into its params and runs
    on them, and records the settings its source, generator or answerers send its prompts with
    (their backend, model, endpoint, decoding and template: :func:`job_settings_snapshot`), running
    only while they stay as recorded; so reading them is what starting it takes. A model named by
    its path (``base_model``, ``task_model``, ``policy_path``), and the question generator's
    ``model_name_or_path`` (a generator, read by whoever may read the library, may have been pointed
    at a checkpoint before the admin checked it, or the checkpoint's source hidden since), is read only through a source ``user`` may read,
    unless it is an operator's or a hub name (``model_paths.model_path_readable``). A hidden row or
    model is answered as a missing one.
    ``user`` None: the operator (a management command), never refused. Made again whenever the job
    runs (:func:`generation_job_inputs_refusal`). Then, for anyone, openai options out of bounds
    are refused (:func:`backend_options_check`).

    The items a job takes from its dataset and split (no item ids given; Quark's validation and
    held-out splits too) are those ``user`` may read: the kind's ``prepare``, which comes next, leaves
    out the others (:func:`readable_item_ids`) and the job records how many
    (``params["items_left_out"]``)."""
    preparing_for(user)
    try:
        _inputs_check(user=user, source=source, dataset=dataset, item_ids=item_ids, params=params,
                      generator=generator)
        # Once the rows are known to be the user's to read (a refusal names them).
        backend_options_check(source=source, generator=generator, params=params)
    except BaseException:
        preparing_done()  # refused: no prepare follows, and nothing is left set for a later one
        raise


def _inputs_check(*, user, source: RationaleSource | None, dataset: Dataset | None, item_ids: list[int] | None,
                  params: dict | None, generator: QuestionGenerator | None = None) -> None:
    """:func:`generation_job_inputs_check` without naming who the next ``prepare`` reads for."""
    if user is None:
        return
    params = params if isinstance(params, dict) else {}
    visible_sources = sources_for_user(user=user)
    if source is not None and (source.pk is None or not visible_sources.filter(pk=source.pk).exists()):
        raise GenerationError(f"no rationale source {source.pk} that you may use")
    if generator is not None and (generator.pk is None or not question_generators_for_user(user=user).filter(
            pk=generator.pk).exists()):
        raise GenerationError(f"no question generator {generator.pk} that you may use")
    if generator is not None and not model_path_readable(generator.model_name_or_path, visible_sources=visible_sources):
        # A generator is library data others may read: its model is loaded only by the path rule.
        raise GenerationError(f"question generator {generator.pk}: no model {generator.model_name_or_path.strip()!r} "
                              "that you may use (a model folder or .gguf file that exists, or a hub name)")
    for key in SOURCE_PARAMS:
        if params.get(key) in (None, ""):
            continue  # missing: the kind's own check names it
        source_id = _id_or_none(params[key])
        if source_id is None or not visible_sources.filter(pk=source_id).exists():
            raise GenerationError(f"params.{key}: no rationale source {params[key]!r} that you may use")
    policy = params.get("policy_path")
    if source is None and isinstance(policy, str) and policy.strip():
        named = source_by_name_or_id(policy)
        if (not visible_sources.filter(pk=named.pk).exists() if named is not None
                else not model_path_readable(policy, visible_sources=visible_sources)):
            # As resolve_policy answers a name that is neither a source nor a model folder.
            raise GenerationError(f"policy {policy!r} is neither a rationale source, a model folder nor a "
                                  ".gguf file")
    for key in MODEL_PATH_PARAMS:  # a model named by its path: another researcher's checkpoint is theirs
        if isinstance(params.get(key), str) and not model_path_readable(params[key], visible_sources=visible_sources):
            raise GenerationError(f"params.{key}: no model {params[key].strip()!r} that you may use (a model folder "
                                  "or .gguf file that exists, or a hub name)")
    if dataset is not None and (dataset.pk is None or not datasets_for_user(user=user).filter(pk=dataset.pk).exists()):
        raise GenerationError(f"no dataset {dataset.pk} that you may use")
    if item_ids:
        ids = sorted({int(i) for i in item_ids})
        seen = set(items_for_user(user=user).filter(pk__in=ids).values_list("pk", flat=True))
        hidden = [i for i in ids if i not in seen]
        if hidden:  # as ordered_item_ids answers ids that do not exist
            raise GenerationError(f"item ids {hidden[:10]} do not exist")


# The settings of a rationale source or question generator that decide where a job's prompts go
# and what comes back (a generator has no template: its instructions are frozen into the job's
# params). The one list that :func:`job_settings_snapshot` records and :func:`job_settings_refusal`
# compares.
SETTINGS_FIELDS = ("backend", "model_name_or_path", "endpoint_url", "decoding", "template", "seed")
# The key of a job's params holding, per role (``source``, ``generator``, or a key of
# ``SOURCE_PARAMS``), the row's id and name, its ``SETTINGS_FIELDS`` and its :data:`CHECKPOINT`
# when the job was created.
SETTINGS_SNAPSHOT = "settings_snapshot"
# The roles a job may read settings from as it runs: its source, its question generator, and the
# sources its params name by id.
SETTINGS_ROLES = ("source", "generator", *SOURCE_PARAMS)
# The key, beside a role's ``SETTINGS_FIELDS``, under which the snapshot records which trained
# checkpoint its model is (:func:`_checkpoints_of`): a fine-tuning or Quark job registering under an
# existing source's name publishes new weights into the same folder, so the model path stays as
# recorded while the weights do not. A snapshot without it was recorded before it was.
CHECKPOINT = "checkpoint"
TRAINING_KINDS = (GenerationJob.Kind.FINETUNE, GenerationJob.Kind.QUARK)
# The roles, beside :data:`SETTINGS_ROLES`, that name a model by its path in a job's params and whose
# weights the job loads as it runs (faithfulness's ``task_model``): the path is frozen in the params,
# the weights in its folder are not (a training job registering under the name of the source whose
# folder it is publishes new ones there), so the snapshot records only its :data:`CHECKPOINT`.
MODEL_ROLES = ("task_model",)


def _role_label(role: str) -> str:
    return {"source": "source", "generator": "question generator"}.get(role, f"{role} source")


def _model_label(role: str, model: str, source_ids) -> str:
    """``role``'s model (:data:`MODEL_ROLES`) as a refusal names it: its path, and the sources
    whose checkpoint folder it is (``source_ids``: those recorded or found now)."""
    pks = sorted({int(pk) for pk in source_ids if str(pk).isdigit()})
    names = list(RationaleSource.objects.filter(pk__in=pks).order_by("name").values_list("name", flat=True))
    where = f" (the checkpoint folder of source {', '.join(repr(n) for n in names)})" if names else ""
    return f"{role.replace('_', ' ')} {model!r}{where}"


def _settings_row(role: str, *, source: RationaleSource | None, generator: QuestionGenerator | None,
                  params: dict, stored: bool) -> RationaleSource | QuestionGenerator | None:
    """The row that ``role`` names for a job on ``source``, ``generator`` and ``params``, None when
    it names none or the row is gone. ``stored``: ``source`` and ``generator`` read again from the
    database (a caller may hold an unsaved copy; the job runs on the stored row); else the
    instances given (a job's own, which its batch then runs on, so that the values compared are
    those used). A source named by the params is read by its id, as the kind reads it."""
    if role in ("source", "generator"):
        row = source if role == "source" else generator
        if row is None or row.pk is None or not stored:
            return row
        return type(row).objects.filter(pk=row.pk).first()
    pk = None if params.get(role) in (None, "") else _id_or_none(params[role])
    return None if pk is None else RationaleSource.objects.filter(pk=pk).first()


def backend_options_check(*, source: RationaleSource | None, generator: QuestionGenerator | None,
                          params: dict | None) -> None:
    """A GenerationError naming the row, the field, its value and its bounds when an openai source
    or question generator a new job names (its source, generator, or a source its params name by
    id: :data:`SETTINGS_ROLES`) has an option (``timeout_s``, ``max_retries``, ``backoff_s``,
    ``concurrency``) outside :data:`studies.lm.backends.OPENAI_OPTION_BOUNDS`: refused as the job
    is created (:func:`generation_job_inputs_check`), not when a worker first builds its backend."""
    params = params if isinstance(params, dict) else {}
    for role in SETTINGS_ROLES:
        row = _settings_row(role, source=source, generator=generator, params=params, stored=False)
        if row is None or getattr(row, "backend", "") != "openai":
            continue
        problem = openai_options_problem(row.decoding)
        if problem:
            raise GenerationError(f"{_role_label(role)} {row.name!r}: {problem}")


def _checkpoints_of(row: RationaleSource | QuestionGenerator) -> dict[str, dict]:
    """The training records (by source id, as text) of the trained checkpoints whose weights ``row``
    loads: its own when it is a source with one (``lifecycle.model_source_register`` writes a new
    record, carrying its job's id, each time a fine-tuning or Quark job publishes into its folder),
    and those of the sources with one whose model folder ``row``'s local model is or lies in (a
    question generator, or another source, pointed at a registered checkpoint's folder:
    :func:`model_checkpoints`)."""
    found = {}
    if isinstance(row, RationaleSource) and row.training:
        found[str(row.pk)] = row.training
    return model_checkpoints(row.model_name_or_path, found=found)


def model_checkpoints(model_name_or_path: str, *, found: dict[str, dict] | None = None) -> dict[str, dict]:
    """``found`` (empty by default) with the training records (by source id, as text) of the sources
    with one whose model folder the local model ``model_name_or_path`` is or lies in: the trained
    checkpoints a job loading that model by its path (faithfulness's ``task_model``) reads. None for
    a hub name or a folder no source here trained. One query over the sources with a training
    record, made only for a local path."""
    found = dict(found or {})
    path = local_model_path(model_name_or_path)
    if path is None:
        return found
    trained = RationaleSource.objects.exclude(model_name_or_path="").exclude(training={})
    for pk, model, training in trained.values_list("pk", "model_name_or_path", "training"):
        theirs = local_model_path(model)
        if str(pk) not in found and training and theirs is not None and path_within(path, theirs):
            found[str(pk)] = training
    return found


def _settings_of(row: RationaleSource | QuestionGenerator) -> dict:
    """``row``'s id and name, and a fingerprint of each of its ``SETTINGS_FIELDS`` that its model
    has (``lab.jsontext.json_fingerprint``): enough to tell a change, without copying an endpoint
    or model path into params that readers of the job who may not read the row would see. A model
    path is taken in its stored form (``model_paths.model_path_stored``: ``models:<path>`` under
    ``RL_MODEL_DIR``), the same on the web host that records it and an LM worker whose model folder
    is elsewhere (:func:`_recorded_model_matches` reads a record made before that form)."""
    names = {field.name for field in type(row)._meta.concrete_fields}
    values = {f: getattr(row, f) for f in SETTINGS_FIELDS if f in names}
    if "model_name_or_path" in values:
        values["model_name_or_path"] = model_path_stored(values["model_name_or_path"])
    return {"id": row.pk, "name": row.name, **{f: json_fingerprint(v) for f, v in values.items()}}


def _recorded_model_matches(row, recorded: str) -> bool:
    """Whether a job's recorded model path fingerprint names ``row``'s model now: its stored form
    (:func:`_settings_of`), or the absolute path a job recorded before folders under
    ``RL_MODEL_DIR`` were stored relative to it (migration ``studies.0019`` converted the row, not
    the job's record), read on this host."""
    stored = model_path_stored(row.model_name_or_path)
    return recorded in (json_fingerprint(stored), json_fingerprint(model_location(stored)))


def _published_after(job: GenerationJob, trainings: list[dict]) -> list[dict]:
    """Those of ``trainings`` (training records) written by a fine-tuning or Quark job created after
    ``job`` (a higher id): weights published into the folder after ``job`` was created."""
    later = [t for t in trainings if type(t.get("job_id")) is int and t["job_id"] > job.pk]
    if not later:
        return []
    trained = set(GenerationJob.objects.filter(pk__in={t["job_id"] for t in later}, kind__in=TRAINING_KINDS)
                  .values_list("pk", flat=True))
    return [t for t in later if t["job_id"] in trained]


def _checkpoint_refusal(job: GenerationJob, live: dict[str, dict], recorded: dict, label: str,
                        model_name_or_path: str = "") -> str:
    """Why ``job`` may not go on because the checkpoint its role loads now (``live``:
    :func:`_checkpoints_of` of its row, :func:`model_checkpoints` of its model path) is not the one
    ``recorded`` (its role's snapshot) names: new weights were published into its folder since,
    under the same path; empty when they were not. A recorded checkpoint whose source is gone (the
    row deleted, or pointed at another model) still holds while the folder's own record
    (:func:`.model_paths.folder_training_record` of ``model_name_or_path``, the model the role
    loads) is the one recorded: the weights are where they were (a host that cannot read the folder,
    a web host whose ``RL_MODEL_DIR`` is elsewhere, stops the job as before). A snapshot recorded before snapshots named the
    checkpoint has nothing to compare with: the job is stopped only when the checkpoint is now that
    of a fine-tuning or Quark job created after it (a higher id: so one that published after this
    job was created), and otherwise runs as before."""
    before = recorded.get(CHECKPOINT)
    if isinstance(before, dict):
        # A recorded checkpoint whose record changed or went, or one that another source now holds
        # in the folder because a training job published there after this job was created. A source
        # merely added over the same folder (the admin, a bundle import) has not changed the weights.
        in_folder = folder_training_record(model_name_or_path) if any(pk not in live for pk in before) else None
        gone = [pk for pk in before
                if pk not in live and (in_folder is None or before[pk] != json_fingerprint(in_folder))]
        changed = [t for pk, t in live.items() if pk in before and before[pk] != json_fingerprint(t)]
        changed += _published_after(job, [t for pk, t in live.items() if pk not in before])
        if not changed and not gone:
            return ""
    else:
        changed = _published_after(job, list(live.values()))
        if not changed:
            return ""
    by = next((t.get("job_id") for t in changed if type(t.get("job_id")) is int), None)
    how = f"were replaced by training job {by}" if by is not None else "are no longer those it was started on"
    return (f"Cancelled: the {CHECKPOINT} of {label} changed since the job was created (its model weights {how}); "
            "start a new job (a job runs only on the weights it was started with).")


def job_settings_snapshot(*, roles: tuple[str, ...], source: RationaleSource | None,
                          generator: QuestionGenerator | None, params: dict) -> dict:
    """What a new job records under ``params[SETTINGS_SNAPSHOT]``: for each of ``roles`` (those its
    kind reads settings from as it runs, ``Handler.settings_read_live``) that names a row, that
    row's id, name and ``SETTINGS_FIELDS`` as stored, and under :data:`CHECKPOINT` a fingerprint of
    the training record of each checkpoint it loads (:func:`_checkpoints_of`); for a role of
    :data:`MODEL_ROLES` that names a model, only that (:func:`model_checkpoints`: none for a hub
    name or a folder no source was trained into, which is recorded as such, not refused). Sources and generators are shared library
    data that others with change rights may edit while the job waits or runs:
    :func:`job_settings_refusal` stops the job when they no longer match, so that its researcher's
    items never go to an endpoint, model or weights they did not start it on."""
    snapshot = {}
    for role in roles:
        if role in MODEL_ROLES:  # a model named by its path: only its checkpoint can change under it
            if _model_of(params, role):
                snapshot[role] = {CHECKPOINT: checkpoint_fingerprints(model_checkpoints(_model_of(params, role)))}
            continue
        row = _settings_row(role, source=source, generator=generator, params=params, stored=True)
        if row is not None:
            snapshot[role] = {**_settings_of(row), CHECKPOINT: checkpoint_fingerprints(_checkpoints_of(row))}
    return snapshot


def checkpoint_fingerprints(checkpoints: dict[str, dict]) -> dict[str, str]:
    """A snapshot's :data:`CHECKPOINT`: each training record of ``checkpoints`` (:func:`_checkpoints_of`,
    :func:`model_checkpoints`) as its fingerprint (``lab.jsontext.json_fingerprint``), by source id."""
    return {pk: json_fingerprint(training) for pk, training in checkpoints.items()}


def source_checkpoints(row: RationaleSource | QuestionGenerator) -> dict[str, str]:
    """The checkpoints ``row`` loads now, as a job's settings snapshot records them: the fingerprint
    of each one's training record by source id (:func:`_checkpoints_of`, :func:`checkpoint_fingerprints`)."""
    return checkpoint_fingerprints(_checkpoints_of(row))


def source_checkpoint(row: RationaleSource | QuestionGenerator) -> list[str] | None:
    """The checkpoint ``row`` loads now as a rationale records the one it was made with
    (``generation_info["checkpoint"]``, ``rationales.job_checkpoint``): the sorted, distinct
    fingerprints of :func:`source_checkpoints`, without the source ids; None for a model no job here
    trained."""
    return sorted(set(source_checkpoints(row).values())) or None


def _model_of(params, role: str) -> str:
    """The model ``params`` names by its path under ``role`` (:data:`MODEL_ROLES`), "" for none."""
    model = params.get(role) if isinstance(params, dict) else None
    return model.strip() if isinstance(model, str) else ""


def recorded_model_checkpoint(job: GenerationJob, role: str) -> list[str] | None:
    """The checkpoint of the model ``job`` loads by its path under ``role`` (:data:`MODEL_ROLES`),
    as what it stores records it: the sorted, distinct fingerprints of the training records its
    settings snapshot recorded when it was made (the job runs only while they hold:
    :func:`job_settings_refusal`), without the source ids they were read under (a source added over
    the same folder adds an id, not weights), as a rationale job's ``checkpoint``
    (``rationales.job_checkpoint``). A job made before the snapshot recorded it reads the folder's
    now. None for a model no job here trained (a hub name, a folder no source was trained into)."""
    snapshot = job.params.get(SETTINGS_SNAPSHOT) if isinstance(job.params, dict) else None
    recorded = (snapshot.get(role) or {}).get(CHECKPOINT) if isinstance(snapshot, dict) else None
    if not isinstance(recorded, dict):
        recorded = checkpoint_fingerprints(model_checkpoints(_model_of(job.params, role)))
    return sorted(set(recorded.values())) or None


def job_settings_refusal(job: GenerationJob) -> str:
    """Why ``job`` may not go on because a source or question generator it reads as it runs was
    changed since it was created (another researcher may change a shared row): the first recorded
    setting (:func:`job_settings_snapshot`) that differs from the row now, the row gone, or the
    weights in its model folder replaced (:func:`_checkpoint_refusal`), that of a model its params
    name by path (:data:`MODEL_ROLES`: faithfulness's task model) included; empty when all match. Compared on the job's own ``source`` and ``generator``, which its batch then
    prompts. A job created before jobs recorded their settings has no snapshot: it runs on the live
    settings, as it always did."""
    snapshot = job.params.get(SETTINGS_SNAPSHOT) if isinstance(job.params, dict) else None
    if not isinstance(snapshot, dict):
        return ""  # created before the snapshot: runs as before
    for role in MODEL_ROLES:
        # A job whose snapshot predates the role's record ({}) is stopped only by a training job
        # created after it (:func:`_checkpoint_refusal`).
        model = _model_of(job.params, role)
        if model:
            recorded = snapshot.get(role) if isinstance(snapshot.get(role), dict) else {}
            live = model_checkpoints(model)
            before = recorded.get(CHECKPOINT) if isinstance(recorded.get(CHECKPOINT), dict) else {}
            if _checkpoint_refusal(job, live, recorded, "", model):  # named (a query) only when refused
                return _checkpoint_refusal(job, live, recorded, _model_label(role, model, {*live, *before}), model)
    for role, recorded in snapshot.items():
        if role not in SETTINGS_ROLES or not isinstance(recorded, dict):
            continue
        row = _settings_row(role, source=job.source, generator=job.generator, params=job.params, stored=False)
        label = f"{_role_label(role)} {recorded.get('name', recorded.get('id'))!r}"
        if row is None or row.pk != recorded.get("id"):
            return f"Cancelled: {label} no longer exists; start a new job."
        live = _settings_of(row)
        for field in SETTINGS_FIELDS:
            if field not in recorded:
                continue
            same = (_recorded_model_matches(row, recorded[field]) if field == "model_name_or_path"
                    else live.get(field) == recorded[field])
            if not same:
                return (f"Cancelled: the {field} of {label} changed since the job was created; start a new "
                        "job (a job runs only on the settings it was started with).")
        refusal = _checkpoint_refusal(job, _checkpoints_of(row), recorded, label, row.model_name_or_path)
        if refusal:
            return refusal
    return ""


def generation_job_inputs_refusal(job: GenerationJob) -> str:
    """Why ``job`` may no longer run for its researcher: :func:`generation_job_inputs_check` made
    again for them (``common.job_actor``) on what the job reads (its source, question generator and
    params, and its dataset), as a share may have been revoked or a permission removed since it
    was created; empty when it still may. Its items are read through its dataset, so they are
    looked up one by one only when the dataset is hidden (a job on item ids its researcher read
    without the dataset). The operator's jobs, and those of a deleted account (acting for nobody,
    storing only what no study shows), are not concerned, as for ``lifecycle.creator_refusal``.
    Each batch's start, fine-tuning's progress reports, a resume and beat's requeue ask it: a few
    indexed reads, plus one over the sources' model paths for a job that names a model by path.
    Then, for every job (the operator's too: a shared row may be edited by anyone allowed to),
    whether the settings it prompts as it runs are still those it was created with
    (:func:`job_settings_refusal`)."""
    return _reading_refusal(job) or job_settings_refusal(job)


def _reading_refusal(job: GenerationJob) -> str:
    """Why ``job``'s researcher may no longer read what it reads (:func:`generation_job_inputs_refusal`)."""
    if job.created_by_id is None:
        return ""
    user = job_acts_for(created_by=job.created_by, by_operator=job.by_operator)  # common.job_actor
    try:
        _inputs_check(user=user, source=job.source, generator=job.generator, dataset=None, item_ids=None,
                      params=job.params)
        if job.dataset_id is not None and not datasets_for_user(user=user).filter(pk=job.dataset_id).exists():
            # a hidden dataset: only items named one by one that they still read go on
            ids = set(job.item_ids or [])
            if not ids or items_for_user(user=user).filter(pk__in=ids).count() != len(ids):
                raise GenerationError(f"no dataset {job.dataset_id} that you may use")
        _items_check(user, job)
    except GenerationError as exc:
        return f"Cancelled: {user} who started this job may no longer read what it reads ({exc})."
    return ""


# A fine-tuning job's training items (its ``item_ids`` are empty), recorded when it is created
# (``finetune``: it trains on exactly these).
TRAIN_ITEM_IDS = "train_item_ids"
# The params that hold item ids a job reads beside its ``item_ids``: Quark's validation and
# held-out items (its training items are its ``item_ids``), and a fine-tuning job's training items.
JOB_ITEM_PARAMS = {"validation_item_ids": "validation", "heldout_item_ids": "held-out",
                   TRAIN_ITEM_IDS: "training"}
_CHUNK = 2000  # ids per query: well under SQLite's limit on a statement's parameters


def _items_check(user, job: GenerationJob) -> None:
    """Refuse, naming the first few, the items of ``job`` (its ``item_ids``, Quark's validation
    and held-out ones, a fine-tuning job's training ones) that ``user`` may no longer read
    (``items_for_jobs``): a study that showed them to its researcher deleted, or its share revoked
    or lowered, since the job was created; or, for items no study shows, their dataset no longer
    one they may build on (``datasets_for_design``). The message says which. Items deleted since
    are left to the kind (they are no longer anyone's to read). A fine-tuning job created before
    its training items were recorded is checked by their number (:func:`_training_count_check`)."""
    params = job.params if isinstance(job.params, dict) else {}
    roles = {"": list(job.item_ids or [])}
    roles.update({label: list(params.get(key) or []) for key, label in JOB_ITEM_PARAMS.items()
                  if isinstance(params.get(key), list)})
    readable_all = items_for_jobs(user=user)
    if not readable_all.query.has_filters():
        return  # they read every item (``studies.view_item``): nothing to look up
    for label, ids in roles.items():
        ids = [i for i in ids if type(i) is int]
        hidden: list[int] = []
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start:start + _CHUNK]
            seen = set(readable_all.filter(pk__in=chunk).values_list("pk", flat=True))
            unseen = [i for i in chunk if i not in seen]
            if unseen:  # only those that still exist
                hidden += sorted(Item.objects.filter(pk__in=unseen).values_list("pk", flat=True))
        if hidden:
            which = f"{label} items" if label else "items"
            raise GenerationError(f"{len(hidden)} of the job's {len(ids)} {which} (ids {hidden[:10]}) "
                                  f"{_hidden_why(hidden)}")
    if job.kind == GenerationJob.Kind.FINETUNE and not isinstance(params.get(TRAIN_ITEM_IDS), list):
        _training_count_check(readable_all, job, params)


def _hidden_why(hidden: list[int]) -> str:
    """Why items a job's researcher read when it was created are hidden from them now (``items_for_jobs``):
    those a study shows are no longer shown by one they may read; those no study shows are in a
    dataset that is no longer one they may build on (``datasets_for_design``: their own study's, or a
    study's they may change, uses it), the datasets named (the job's own, which they chose)."""
    shown: set[int] = set()
    dataset_ids: set[int] = set()
    for start in range(0, len(hidden), _CHUNK):
        chunk = hidden[start:start + _CHUNK]
        shown.update(Study.items.through.objects.filter(item_id__in=chunk).values_list("item_id", flat=True))
        dataset_ids.update(Item.objects.filter(pk__in=[i for i in chunk if i not in shown]).values_list(
            "dataset_id", flat=True))
    reasons = []
    if shown:
        reasons.append(f"{len(shown)} no longer in a study you may read")
    unshown = [i for i in hidden if i not in shown]
    if unshown:
        datasets = Dataset.objects.filter(pk__in=dataset_ids).order_by("pk").values_list("pk", "name")
        names = ", ".join(f"dataset {pk} {name!r}" for pk, name in datasets[:5])
        reasons.append(f"{len(unshown)} in no study, in {names}, no longer a dataset you may build on (one "
                       "that a study of your own, or a study you may change, uses)")
    return "are no longer yours to read: " + "; ".join(reasons)


def _training_count_check(readable_all, job: GenerationJob, params: dict) -> None:
    """For a fine-tuning job that recorded how many items it trains on but not which: refuse when
    fewer of its split's items are readable now than it trains on."""
    data = params.get("data") if isinstance(params.get("data"), dict) else {}
    recorded = data.get("items")
    if type(recorded) is not int or job.dataset_id is None:
        return
    now = readable_all.filter(dataset_id=job.dataset_id, split=job.split or "train").count()
    if now < recorded:
        raise GenerationError(f"{recorded - now} of the job's {recorded} training items are no longer yours to read "
                              "(no longer in a study you may read, or in no study and in a dataset you may no "
                              "longer build on)")
