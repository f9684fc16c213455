"""What every job kind shares before and while it runs: prompt items, item selection, source
checks, decoding settings, the budget, the backend factory, and the handler interface with the
batch loop that item-by-item kinds run (how a job finishes, reports and fails is
:mod:`.lifecycle`'s)."""
from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lab.heartbeat import heartbeat
from lab.jsontext import json_path, json_problems, storable_text, text_problem
from studies.lm import templates
from studies.lm.backends import (
    Backend,
    BackendError,
    Budget,
    BudgetExceeded,
    Decoding,
    TransientBackendError,
    build_backend,
    operator_key_sent,
)
from studies.models import (
    YES_NO_CHOICES,
    Dataset,
    GeneralizationQuestion,
    GenerationFailure,
    GenerationJob,
    GenUPrediction,
    Item,
    Rationale,
    RationaleSource,
)
from studies.services.content import (
    content_added_refusals,
    content_parent_refusals,
    content_row_value_problems,
    job_acts_for,
)

from .errors import GenerationError
from .inputs import (
    BUILD_ON_WHY,
    ITEMS_LEFT_OUT,
    ITEMS_LEFT_OUT_WHY,
    ITEMS_NOT_TO_BUILD_ON_WHY,
    SETTINGS_ROLES,
    SOURCE_PARAMS,
    item_ids_to_build_on_check,
    left_out_tally,
    left_out_tally_reset,
    preparing_done,
    readable_item_ids,
)
from .lifecycle import (
    Status,
    creator_refusal,
    eta_seconds,
    generation_job_fail,
    job_cancel,
    mark_done,
    smoothed_rate,
)

logger = logging.getLogger(__name__)
DEFAULT_BATCH_SIZE = 16
# The most items one batch of a job may take: ``jobs.generation_job_create`` refuses more, and the
# API's serializer and the admin's job forms offer no more.
MAX_BATCH_SIZE = 1024


def prompt_item(item: Item, dataset_name: str | None = None) -> templates.PromptItem:
    facts = item.metadata.get("facts") if isinstance(item.metadata, dict) else None
    facts_text = " ".join(facts) if isinstance(facts, list) else ""
    return templates.PromptItem(
        question=item.question, choices=tuple((c["label"], c["text"]) for c in item.choices),
        dataset=dataset_name or item.dataset.name, answer=item.gold_answer, rationale=item.gold_rationale,
        facts=facts_text or item.gold_rationale, key=item.external_id,
    )


def yes_no_prompt_item(text: str, *, dataset: str, answer: str | None = None) -> templates.PromptItem:
    return templates.PromptItem(question=text, choices=tuple((c["label"], c["text"]) for c in YES_NO_CHOICES),
                                dataset=dataset, answer=answer)


def ordered_item_ids(*, dataset: Dataset | None, split: str, item_ids: list[int] | None,
                     limit: int | None, role: str = "items", build_on: bool = False) -> list[int]:
    """The job's items in id order: the given ids (checked; ``inputs.generation_job_inputs_check``
    refused any its researcher may not read) or the dataset's split among the items the job's
    researcher may read (``inputs.readable_item_ids``, which counts the others under ``role`` for the
    job's ``params["items_left_out"]``), first ``limit``. ``build_on``: a kind that writes rows under
    its items (``Handler.builds_on_items``) takes only those its researcher may build on: the split's
    others are left out and counted alike, given ids refused (``inputs.item_ids_to_build_on_check``)."""
    if item_ids is not None:
        ids = sorted({int(i) for i in item_ids})
        found = Item.objects.filter(pk__in=ids)
        if dataset is not None:
            found = found.filter(dataset=dataset)
        found_ids = set(found.values_list("pk", flat=True))
        missing = [i for i in ids if i not in found_ids]
        if missing:
            where = f" in dataset {dataset.name!r}" if dataset else ""
            raise GenerationError(f"item ids {missing[:10]} do not exist{where}")
        if build_on:
            item_ids_to_build_on_check(ids)
    else:
        if dataset is None:
            raise GenerationError("choose a dataset (and split) or give item ids")
        qs = Item.objects.filter(dataset=dataset)
        if split:
            qs = qs.filter(split=split)
        every = list(qs.order_by("pk").values_list("pk", flat=True))
        ids = readable_item_ids(every, role=role)
        if every and not ids:
            raise GenerationError(
                f"no items that you may read in dataset {dataset.name!r} split {split or 'any'!r}: its "
                f"{len(every)} items are shown only by studies you may not read")
        if build_on:
            readable, ids = ids, readable_item_ids(ids, role=role, build_on=True)
            if readable and not ids:
                raise GenerationError(
                    f"no items that you may build on in dataset {dataset.name!r} split {split or 'any'!r}: you may "
                    f"read {len(readable)} of its {len(every)} items, but not add to them: {BUILD_ON_WHY}")
    if limit is not None:
        if limit < 1:
            raise GenerationError("limit must be at least 1")
        ids = ids[:limit]
    if not ids:
        raise GenerationError(
            f"no items to process in dataset {dataset.name if dataset else '?'!r} split {split or 'any'!r}"
        )
    return ids


def lm_source(source: RationaleSource | None, role: str,
              backends: tuple[str, ...] = ("seq2seq", "causal", "openai")) -> RationaleSource:
    """``source`` if it is a usable LM source with one of ``backends``; else a GenerationError."""
    if source is None:
        raise GenerationError(f"choose the {role}")
    if source.kind != RationaleSource.Kind.LM or not source.backend:
        raise GenerationError(
            f"{role} {source.name!r} is not a language model source: set kind to 'Language model' and a backend"
        )
    if source.backend not in backends:
        raise GenerationError(f"{role} {source.name!r} must use one of the backends {', '.join(backends)}; "
                              f"it uses {source.backend}")
    if source.backend in ("seq2seq", "causal") and not source.model_name_or_path:
        raise GenerationError(f"{role} {source.name!r} has no model name or path")
    if source.backend == "openai" and not (source.endpoint_url and source.model_name_or_path):
        raise GenerationError(f"{role} {source.name!r} needs an endpoint URL and a model name for the openai backend")
    return source


def decoding_from(data: dict | None, **defaults: Any) -> Decoding:
    """The decoding settings ``data`` over ``defaults``, checked; a GenerationError for bad ones or
    for more outputs per prompt than the operator allows (``RL_LM_MAX_RETURN_SEQUENCES``)."""
    try:
        decoding = Decoding.from_json(data, **defaults)
    except (TypeError, ValueError) as exc:
        raise GenerationError(f"bad decoding settings {data!r}: {exc}") from exc
    most = int(settings.RL_LM_MAX_RETURN_SEQUENCES or 0)
    if most and decoding.num_return_sequences > most:
        raise GenerationError(
            f"decoding.num_return_sequences {decoding.num_return_sequences} is over the operator's maximum of "
            f"{most} outputs per prompt (RL_LM_MAX_RETURN_SEQUENCES)")
    return decoding


def template_check(source: RationaleSource, role: str = "rationale source") -> None:
    """A GenerationError naming ``source`` when its own prompt template cannot be used
    (:func:`studies.lm.templates.template_problem`: a placeholder it does not know, no
    ``{question}``); an empty template is the FEB default."""
    problem = templates.template_problem(source.template or "")
    if problem:
        raise GenerationError(f"{role} {source.name!r}: {problem}")


# The operator's caps per job on what its requests spend with ``RL_OPENAI_API_KEY``: (the param
# key of the job's own cap, the setting). :func:`operator_key_budget` records them in a new job
# whose requests carry the key, and :func:`job_budget` applies them, as each batch runs, to its
# requests that carry the key.
OPERATOR_KEY_CAPS = (("max_requests", "RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB"),
                     ("max_tokens", "RL_OPENAI_KEY_MAX_TOKENS_PER_JOB"))
# The key of a job's params that says, per cap it holds (``max_requests``, ``max_tokens``), the
# setting it was taken from when the job gave none (absent: the job's own or none).
BUDGET_FROM = "budget_from"


def operator_key_caps() -> dict[str, tuple[str, int]]:
    """The operator's caps set now, ``{param key: (setting name, cap)}``; 0 or empty: none."""
    caps = {}
    for key, name in OPERATOR_KEY_CAPS:
        value = getattr(settings, name)
        if value:
            caps[key] = (name, int(value))
    return caps


def sends_operator_key(row, options: dict | None = None) -> bool:
    """Whether the requests of ``row`` (a rationale source or question generator, prompted with
    ``options``, by default its ``decoding``) carry the operator's key: an openai backend whose URL
    :func:`studies.lm.backends.operator_key_sent` lets the key go to."""
    if row is None or getattr(row, "backend", "") != "openai":
        return False
    options = (row.decoding if options is None else options)
    api = options.get("api", "completions") if isinstance(options, dict) else "completions"
    return operator_key_sent(row.endpoint_url or "", api)


def budget_rows(handler: Handler, *, source, generator, params: dict) -> list:
    """The rows whose requests a job of ``handler``'s kind spends its budget on (:func:`job_budget`):
    those it prompts as it runs (``settings_read_live``), for a kind that takes a budget
    (``max_requests`` among its ``params_accepted``); none for any other kind."""
    if "max_requests" not in handler.params_accepted:
        return []
    rows = []
    for role in handler.settings_read_live:
        if role not in SETTINGS_ROLES:
            continue
        if role in ("source", "generator"):
            rows.append(source if role == "source" else generator)
            continue
        try:
            pk = int(params.get(role))
        except (TypeError, ValueError):
            continue
        rows.append(RationaleSource.objects.filter(pk=pk).first())
    return [row for row in rows if row is not None]


def budget_caps_check(params: dict | None) -> None:
    """A GenerationError naming ``params.max_requests`` / ``params.max_tokens`` and the value when
    either is given and is not a whole number of at least 1: a JSON integer (not true/false, not
    2.5, not a string of digits: the admin's form gives an int, the API the JSON it was sent).
    Checked as a job is created (:func:`.jobs.generation_job_create`), before anything reads them."""
    for key, _ in OPERATOR_KEY_CAPS:
        value = (params or {}).get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise GenerationError(f"params.{key} must be a whole number of at least 1, not {value!r}")


def operator_key_budget(params: dict, rows) -> None:
    """A new job's budget where its requests (to any of ``rows``: :func:`budget_rows`) carry the
    operator's key: each cap it does not set is the operator's (:func:`operator_key_caps`), recorded
    in ``params`` with the setting under :data:`BUDGET_FROM`; a cap over the operator's is refused
    with a GenerationError naming the setting. A job whose requests do not carry the key is left as
    it is."""
    if not any(sends_operator_key(row) for row in rows):
        return
    for key, (name, cap) in operator_key_caps().items():
        asked = params.get(key)
        if asked is None:
            params[key] = cap
            params[BUDGET_FROM] = {**(params.get(BUDGET_FROM) or {}), key: name}
            continue
        if asked > cap:  # a whole number of at least 1: budget_caps_check ran as the job was created
            raise GenerationError(
                f"params.{key} {asked} is over the operator's cap of {cap} per job ({name}) for endpoints "
                f"that get the operator's API key; ask for at most {cap}")


# What a job's stored usage counts (``params["usage"]``): all its requests and tokens, and those
# that carried the operator's key (:class:`JobBudget`).
USAGE_COUNTS = ("used_requests", "used_tokens", "key_requests", "key_tokens")


@dataclass
class JobBudget(Budget):
    """A job's budget as one batch spends it. ``used_*`` start from the usage the job has stored
    and follow what other copies of the batch store meanwhile (:meth:`BatchUsage.add_to` brings
    them up to date), so the cap counts every copy's requests; ``own`` counts this batch's own,
    of which ``added`` is already added to the job's stored usage.

    ``max_*`` are the job's own caps, on every request. The operator's caps per job
    (``key_caps``: :func:`job_budget`) bound only the requests that carry its key, counted apart
    in ``key_requests`` / ``key_tokens`` (stored in the job's usage under those names): a backend
    whose requests carry it spends through :meth:`carrying_key` (:func:`source_backend`), so a
    Gen-U answerer on the researcher's own server does not spend the operator's cap."""

    key_caps: dict[str, tuple[str, int]] = field(default_factory=dict)  # {max_requests/max_tokens: (setting, cap)}
    key_requests: int = 0
    key_tokens: int = 0

    def __post_init__(self):
        super().__post_init__()
        self._lock = threading.RLock()  # held around Budget's own methods, which take it too
        self.own = dict.fromkeys(USAGE_COUNTS, 0)
        self.added = dict.fromkeys(USAGE_COUNTS, 0)

    def reserve_request(self) -> None:
        with self._lock:
            super().reserve_request()
            self.own["used_requests"] += 1

    def reserve_key_request(self) -> None:
        """:meth:`reserve_request` for a request that carries the operator's key: bounded by the
        job's own caps (on all its requests) and by the operator's (on those that carried the key),
        a BudgetExceeded naming the setting when the operator's cap is what stops it."""
        with self._lock:
            for cap_key, key_used, used, what in (
                    ("max_requests", self.key_requests, self.used_requests, "requests"),
                    ("max_tokens", self.key_tokens, self.used_tokens, "tokens")):
                if cap_key not in self.key_caps:
                    continue
                name, cap = self.key_caps[cap_key]
                own_cap = getattr(self, cap_key)
                if key_used >= cap and (own_cap is None or used < own_cap):  # else the job's own cap says so
                    raise BudgetExceeded(
                        f"operator's cap reached: {key_used} of {cap} {what} used with the operator's key ({name})")
            self.reserve_request()
            self.key_requests += 1
            self.own["key_requests"] += 1

    def record_tokens(self, tokens: int, *, estimated: bool = False) -> None:
        with self._lock:
            before = self.used_tokens
            super().record_tokens(tokens, estimated=estimated)
            self.own["used_tokens"] += self.used_tokens - before

    def record_key_tokens(self, tokens: int, *, estimated: bool = False) -> None:
        """:meth:`record_tokens` for a response to a request that carried the operator's key."""
        with self._lock:
            before = self.used_tokens
            self.record_tokens(tokens, estimated=estimated)
            self.key_tokens += self.used_tokens - before
            self.own["key_tokens"] += self.used_tokens - before

    def carrying_key(self) -> OperatorKeySpend:
        """What a backend whose requests carry the operator's key spends through."""
        return OperatorKeySpend(self)

    def unadded(self) -> tuple[dict[str, int], dict[str, int]]:
        """(this batch's own spending, the part of it not yet added to the job's stored usage),
        each by :data:`USAGE_COUNTS`."""
        with self._lock:
            return dict(self.own), {k: self.own[k] - self.added[k] for k in USAGE_COUNTS}

    def settle(self, *, own: dict[str, int], stored: dict[str, int]) -> None:
        """The job now stores ``stored`` (:func:`stored_usage`), which includes this batch's
        ``own`` (as :meth:`unadded` gave it): count from there, plus what this batch spent since."""
        with self._lock:
            self.added = dict(own)
            now = {k: stored[k] + self.own[k] - own[k] for k in USAGE_COUNTS}
            self.used_requests, self.used_tokens = now["used_requests"], now["used_tokens"]
            self.key_requests, self.key_tokens = now["key_requests"], now["key_tokens"]

    def as_json(self) -> dict:
        return {**super().as_json(), "key_requests": self.key_requests, "key_tokens": self.key_tokens}


class OperatorKeySpend:
    """The spending of a backend whose requests carry the operator's key, in its job's budget
    (:meth:`JobBudget.carrying_key`): each request counts against the job's own caps and the
    operator's caps per job."""

    def __init__(self, budget: JobBudget):
        self.budget = budget

    def reserve_request(self) -> None:
        self.budget.reserve_key_request()

    def record_tokens(self, tokens: int, *, estimated: bool = False) -> None:
        self.budget.record_key_tokens(tokens, estimated=estimated)

    def __getattr__(self, name):  # as_json, used_requests, ...: the job's budget
        return getattr(self.budget, name)


def stored_usage(params: dict) -> dict[str, int]:
    """The usage a job stores: ``used_requests`` / ``used_tokens`` (all its requests) and
    ``key_requests`` / ``key_tokens`` (those that carried the operator's key). A job whose usage
    was stored before these were counted apart counts all it used as carrying the key (an upper
    bound, so the operator's cap still holds)."""
    usage = params.get("usage") or {}
    requests, tokens = int(usage.get("used_requests", 0)), int(usage.get("used_tokens", 0))
    return {"used_requests": requests, "used_tokens": tokens,
            "key_requests": int(usage.get("key_requests", requests)),
            "key_tokens": int(usage.get("key_tokens", tokens))}


class BatchUsage:
    """The budget spent by one batch of one job (the budgets :func:`job_budget` makes while the
    batch runs), added to what the job stores rather than written over it: two copies of a batch
    (beat queued the job again while a worker was frozen) each add their own requests, and each
    copy's cap sees what the other stored (at its start and at each heartbeat)."""

    def __init__(self, job_id: int):
        self.job_id = job_id
        self.budgets: list[JobBudget] = []
        self._beats = threading.Lock()  # held by a beat while it writes, and by close
        self._closed = False

    def add_to(self, locked: GenerationJob) -> Callable[[], None]:
        """Add what this batch spent since the last time to ``locked.params["usage"]`` (the
        caller holds the job row with ``select_for_update`` and saves it); returns what brings
        the budgets up to date, to call once that is committed."""
        stored = stored_usage(locked.params)
        snapshots = [(budget, budget.unadded()) for budget in self.budgets]
        if not snapshots:
            return lambda: None
        for _, (_, unadded) in snapshots:
            for key in USAGE_COUNTS:
                stored[key] += unadded[key]
        # Some of the tokens are an upper estimate (an endpoint that sent no usage: backends.estimated_tokens).
        estimated = bool((locked.params.get("usage") or {}).get("tokens_estimated")) or any(
            budget.tokens_estimated for budget, _ in snapshots)
        locked.params = {**locked.params, "usage": {
            "max_requests": locked.params.get("max_requests"), "max_tokens": locked.params.get("max_tokens"),
            **stored, "tokens_estimated": estimated}}

        def settle() -> None:
            for budget, (own, _) in snapshots:
                budget.settle(own=own, stored=stored)
        return settle

    def store(self, *, skip_locked: bool = False) -> None:
        """Add what this batch spent and not yet stored to the job's usage, in a transaction of
        its own (a heartbeat, or a batch that failed and stores nothing else). ``skip_locked``
        (a heartbeat): nothing when another transaction holds the job's row; the next beat, or
        the batch's own store, adds it (a beat never waits, so never hangs its batch)."""
        if not self.budgets:
            return
        with transaction.atomic():
            locked = (GenerationJob.objects.select_for_update(skip_locked=skip_locked).defer("item_ids")
                      .filter(pk=self.job_id).first())
            if locked is None:
                return
            settle = self.add_to(locked)
            locked.save(update_fields=["params", "updated_at"])
        settle()

    def beat(self) -> None:
        """The batch's heartbeat: the job moves (``updated_at``, which beat's
        ``generation_jobs_resume_stalled`` reads), with the usage spent so far. None after
        :meth:`close`."""
        with self._beats:
            if self._closed:
                return
            if self.budgets:
                self.store(skip_locked=True)
            else:
                with transaction.atomic():
                    free = GenerationJob.objects.select_for_update(skip_locked=True).filter(
                        pk=self.job_id, status=Status.RUNNING).values_list("pk", flat=True)
                    GenerationJob.objects.filter(pk__in=list(free)).update(updated_at=timezone.now())

    def close(self) -> None:
        """No more beats; returns once a beat in progress has written (and brought the budgets up
        to date), so that what the batch then stores is not added twice."""
        with self._beats:
            self._closed = True


_BATCH_USAGE: ContextVar[BatchUsage | None] = ContextVar("generation_batch_usage", default=None)


def lm_heartbeat_seconds() -> float:
    """How often a running batch touches its job: often enough that beat (which queues again a
    job that has not moved for ``RL_LM_STALL_SECONDS``) never takes a live batch for a stalled one."""
    return max(0.01, min(60.0, float(settings.RL_LM_STALL_SECONDS) / 5))


def job_budget(job: GenerationJob) -> Budget:
    """The job's budget for a batch: its caps, and the usage the job stores now (read from the
    database, not from ``job``, which was read when the batch started: another copy of the batch
    may have stored its usage since). Made while :class:`ItemHandler` runs a batch of the job, the
    batch adds what it spends to the job's stored usage (:class:`BatchUsage`).

    The job's own ``max_requests`` / ``max_tokens`` bound all its requests. The operator's caps per
    job (:func:`operator_key_caps` as they stand now, and a cap :func:`operator_key_budget` recorded
    in a job that set none: named in its :data:`BUDGET_FROM`, the smaller where both) bound only its
    requests that carry the operator's key (:meth:`JobBudget.carrying_key`, which
    :func:`source_backend` gives such a backend); a recorded cap is not the job's own."""
    params = job.params
    if job.pk is not None:
        params = GenerationJob.objects.filter(pk=job.pk).values_list("params", flat=True).first() or params
    used = stored_usage(params)
    recorded = job.params.get(BUDGET_FROM) or {}
    own_caps = {key: None if key in recorded else job.params.get(key) for key, _ in OPERATOR_KEY_CAPS}
    key_caps = operator_key_caps()
    for key, name in OPERATOR_KEY_CAPS:
        if key in recorded and job.params.get(key) is not None:
            cap = int(job.params[key])
            key_caps[key] = (recorded[key] or name, min(cap, key_caps[key][1]) if key in key_caps else cap)
    budget = JobBudget(**own_caps, key_caps=key_caps, **used)
    batch = _BATCH_USAGE.get()
    if batch is not None and batch.job_id == job.pk:
        batch.budgets.append(budget)
    return budget


def source_backend(source, *, budget: Budget | None = None, options: dict | None = None) -> Backend:
    """The backend of a rationale source or question generator record. A backend whose requests
    carry the operator's key (:func:`sends_operator_key`) spends a job's ``budget``
    (:func:`job_budget`) as such (:meth:`JobBudget.carrying_key`), bounded by the operator's caps per job."""
    options = (source.decoding or {}) if options is None else options
    if isinstance(budget, JobBudget) and sends_operator_key(source, options):
        budget = budget.carrying_key()
    return build_backend(backend=source.backend, model_name_or_path=source.model_name_or_path,
                         endpoint_url=source.endpoint_url, options=options, budget=budget)


# --- handlers -----------------------------------------------------------------------------------
@dataclass
class Prepared:
    """What a handler settles when a job is created."""

    item_ids: list[int]
    params: dict
    total: int
    split: str = ""


@dataclass
class BatchOutput:
    """What a handler generated for one batch, written in one transaction."""

    units: int = 0
    rationales: list[Rationale] = field(default_factory=list)
    questions: list[GeneralizationQuestion] = field(default_factory=list)
    predictions: list[GenUPrediction] = field(default_factory=list)
    faithfulness: dict[int, dict] = field(default_factory=dict)  # rationale id -> probabilities
    failures: list[GenerationFailure] = field(default_factory=list)
    dropped: list = field(default_factory=list)  # DroppedQuestion rows (generalization question jobs)


class Handler:
    """One job kind: ``prepare`` checks a new job's inputs; ``run_batch`` does the next piece of
    work and says whether more remains (the task queues itself again while it does)."""

    kind: str = ""
    # The parameters a caller may give (``generation_job_create`` refuses any other key): the
    # handlers write their own keys (a cursor, budget usage, a Quark run's history and report)
    # into ``job.params`` as the job runs, and none of those may come from outside.
    params_accepted: frozenset[str] = frozenset()
    # The rows whose settings (where its prompts go and what comes back: ``inputs.SETTINGS_FIELDS``)
    # the kind reads as it runs, by role (``inputs.SETTINGS_ROLES``): ``generation_job_create``
    # records them (``inputs.job_settings_snapshot``) and the job stops if they change
    # (``inputs.job_settings_refusal``). By default the sources its params name by id (Gen-U's
    # answerers, Quark's genu reward), which every kind that names them reads live; a kind that
    # prompts its source or generator as it stands adds that role. Kinds that freeze what they read
    # into their params at creation need nothing more (Quark's policy); a path frozen there whose
    # weights a training job may replace adds its role to record their checkpoint
    # (``inputs.MODEL_ROLES``: faithfulness's task model).
    settings_read_live: tuple[str, ...] = SOURCE_PARAMS
    # Whether the kind writes rows under its items (rationales, generalization questions, Gen-U
    # predictions): it takes only items its researcher may build on (``ordered_item_ids(build_on=True)``),
    # not every item they may read, and checks each row again as it stores it (:func:`job_added_refusals`;
    # Gen-U, whose predictions hang from questions and a source, ``content.gen_u_parent_refusals``).
    # Kinds that only read their items (fine-tuning, Quark, faithfulness) keep the read rule.
    builds_on_items: bool = False

    def prepare(self, *, source, generator, dataset, split: str, item_ids, limit, params: dict) -> Prepared:
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs):
        """Each kind's ``prepare`` runs with :func:`_reading_for_researcher` around it."""
        super().__init_subclass__(**kwargs)
        if "prepare" in cls.__dict__:
            cls.prepare = _reading_for_researcher(cls.__dict__["prepare"])

    def run_batch(self, job: GenerationJob) -> bool:
        raise NotImplementedError

    def before_save(self, job: GenerationJob) -> None:
        """What a new job records that needs its researcher (``job.created_by``; None: the
        operator's), called by ``generation_job_create`` before the job is saved: a
        ``GenerationError`` refuses the job. Nothing by default."""

    def request_params(self, params: dict) -> dict:
        """What of a new job's ``params`` (those the caller gave and those creation derived) tells
        one request from another (``jobs._active_twin``: a request asked again while its job is
        queued or running gets that job): all of them by default."""
        return params

    def twin_prompts_allowed(self, job: GenerationJob, other: GenerationJob) -> bool:
        """Whether ``other``, a queued or running job of the same request as ``job`` (not saved yet),
        prompts only with what ``job`` may prompt with now, where ``request_params`` leaves some of
        it out: True by default (all of it was compared)."""
        return True

    def resume_refusal(self, job: GenerationJob, *, user) -> str:
        """Why ``job`` (failed, cancelled or stalled) may not be queued again, told to ``user`` who
        resumes it (``generation_job_resume``, after the checks every kind shares): a kind's own
        creation check that another job may have made false meanwhile. Empty by default."""
        return ""


def _reading_for_researcher(prepare):
    """``prepare``, which takes a job's items from its dataset and split only among those its
    researcher may read (``ordered_item_ids``; ``generation_job_inputs_check`` named them just
    before), and then records how many it left out in the job's ``params["items_left_out"]`` (by
    role, with why; absent when none), and forgets who it read for."""
    if getattr(prepare, "reads_for_researcher", False):
        return prepare

    @functools.wraps(prepare)
    def wrapped(self, **kwargs) -> Prepared:
        tally, token = left_out_tally()
        try:
            prepared = prepare(self, **kwargs)
        finally:
            left_out_tally_reset(token)
            preparing_done()
        if any(tally.values()):
            why = ITEMS_NOT_TO_BUILD_ON_WHY if self.builds_on_items else ITEMS_LEFT_OUT_WHY
            prepared.params[ITEMS_LEFT_OUT] = {**tally, "why": why}
        return prepared

    wrapped.reads_for_researcher = True
    return wrapped


class ItemHandler(Handler):
    """Kinds that process a frozen list of items in batches. Each batch

    1. picks the next ``batch_size`` items with no output yet and no failure recorded by this job
       (:meth:`next_batch`, which looks only from the job's cursor on),
    2. generates outside any transaction (the slow part; :meth:`generate`), touching the job
       every :func:`lm_heartbeat_seconds` meanwhile (so beat never queues a second copy of a batch
       that is merely slow) and storing the budget it spent so far,
    3. writes the outputs and failures in one transaction holding the job row with
       ``select_for_update``, re-checking what exists (:meth:`store`), adds the budget it spent to
       the job's stored usage (:class:`BatchUsage`), and updates done/total, rate and ETA.

    So a batch is all-or-nothing, a re-run or a worker killed mid-batch continues where it
    stopped, and two deliveries of the same task never write a duplicate. Two copies of one batch
    running at once (a worker frozen past ``RL_LM_STALL_SECONDS``, then woken: beat queued the
    job again meanwhile) may both send the same items' requests, but each request counts once
    in the job's usage, and each copy's cap sees what the other stored."""

    # Items examined per query when looking for the next batch: the scan starts at the job's
    # cursor (every item before it is processed) instead of re-reading the whole job each batch.
    # The first window is one batch (usually all unprocessed: the cursor moved past the last
    # batch); each further window doubles, up to this, so a resumed job skips done items quickly.
    SCAN_WINDOW = 256

    def processed_among(self, job: GenerationJob, ids: list[int]) -> set[int]:
        """Of ``ids``, the items the job need not process (output stored or failure recorded)."""
        raise NotImplementedError

    def generate(self, job: GenerationJob, item_ids: list[int]) -> BatchOutput:
        raise NotImplementedError

    def processed_by(self, output: BatchOutput) -> set[int]:
        """Items that ``output``, once stored, certainly leaves processed (without a query);
        the batch's other items are checked in the database after the writes."""
        return set()

    def store(self, job: GenerationJob, output: BatchOutput) -> None:
        raise NotImplementedError

    def next_batch(self, job: GenerationJob) -> tuple[list[int], int, int]:
        """(the next ``batch_size`` unprocessed items in job order, the position of the first of
        them, how many items are known processed), scanning from ``params["cursor"]`` in windows."""
        ids = list(job.item_ids)
        start = min(int(job.params.get("cursor", 0)), len(ids))
        todo: list[int] = []
        first, known, pos = None, start, start
        size = job.batch_size
        while pos < len(ids) and len(todo) < job.batch_size:
            window = ids[pos:pos + size]
            size = min(2 * size, max(self.SCAN_WINDOW, job.batch_size))
            done = self.processed_among(job, window)
            for offset, item in enumerate(window):
                if item in done:
                    known += 1
                elif len(todo) < job.batch_size:
                    first = pos + offset if first is None else first
                    todo.append(item)
            pos += len(window)
        return todo, len(ids) if first is None else first, known

    def run_batch(self, job: GenerationJob) -> bool:
        item_ids, cursor, processed = self.next_batch(job)
        if not item_ids:
            with transaction.atomic():
                locked = GenerationJob.objects.select_for_update().defer("item_ids").get(pk=job.pk)
                mark_done(locked, done=min(processed, locked.total))
            return False

        started = time.monotonic()
        usage = BatchUsage(job.pk)
        try:
            output = self._generate_alive(job, item_ids, usage)
        except Exception as exc:
            # The requests spent before the endpoint gave out count against the job's budget: a
            # resumed job would otherwise start from the usage of its last stored batch and could
            # go past max_requests / max_tokens.
            _store_usage_quietly(usage)
            if isinstance(exc, BackendError) and not isinstance(exc, TransientBackendError):
                generation_job_fail(job_id=job.pk, error=str(exc))
                return False
            raise  # a transient error: the task records it; the job can be resumed
        elapsed = max(time.monotonic() - started, 1e-6)

        try:
            return self._store_batch(job, output, item_ids=item_ids, cursor=cursor, processed=processed,
                                     elapsed=elapsed, usage=usage)
        except Exception:
            _store_usage_quietly(usage)  # the batch's writes rolled back: its spending still counts
            raise

    def _generate_alive(self, job: GenerationJob, item_ids: list[int], usage: BatchUsage) -> BatchOutput:
        """:meth:`generate`, with the job's heartbeat running (:meth:`BatchUsage.beat`): a batch
        longer than ``RL_LM_STALL_SECONDS`` is not taken for a stalled one (beat would queue a
        second copy of it that sends the same requests), and its spending is stored as it goes."""
        token = _BATCH_USAGE.set(usage)
        try:
            with heartbeat(usage.beat, every=lm_heartbeat_seconds(), name=f"generation job {job.pk}"):
                return self.generate(job, item_ids)
        finally:
            usage.close()
            _BATCH_USAGE.reset(token)

    def _store_batch(self, job: GenerationJob, output: BatchOutput, *, item_ids: list[int], cursor: int,
                     processed: int, elapsed: float, usage: BatchUsage) -> bool:
        unstorable_outputs_failed(job, output)  # one bad output fails its item, not the batch
        with transaction.atomic():
            locked = GenerationJob.objects.select_for_update().defer("item_ids").get(pk=job.pk)
            # Its researcher may have lost the right to start jobs (or their account) while the batch
            # generated: the check each batch's start makes (``lifecycle.creator_refusal``), made again
            # where the outputs would be written, so nothing more is stored for them and the job ends
            # cancelled with that reason. What the batch spent still counts against the job's budget.
            refusal = creator_refusal(locked)
            if refusal:
                usage.add_to(locked)
                locked.save(update_fields=["params", "updated_at"])
                if locked.is_active:
                    job_cancel(locked, error=refusal)
                return False
            self.store(locked, output)
            # Outputs are valid even when the job was cancelled meanwhile: keep them, stop after.
            newly = self.processed_by(output) & set(item_ids)
            unsure = [i for i in item_ids if i not in newly]
            if unsure:
                newly |= self.processed_among(locked, unsure)
                left = [i for i in unsure if i not in newly]
                if left:
                    # Deleted since the job was created: nothing is left to do for them (nor a row to
                    # record a failure under), so they count as processed. Before, no kind counted
                    # them, so every batch handed them out again, each queueing the next, for ever.
                    newly |= set(left) - set(Item.objects.filter(pk__in=left).values_list("pk", flat=True))
            if len(newly) == len(item_ids):  # every item up to the batch's last is processed now
                cursor = job.item_ids.index(item_ids[-1], cursor) + 1
            locked.done = min(processed + len(newly), locked.total)
            if output.failures:  # failures are only written here, under this lock: else the count stands
                locked.failed = GenerationFailure.objects.filter(job=locked).values("item_id").distinct().count()
            locked.rate = smoothed_rate(locked.rate, output.units / elapsed)
            remaining = locked.total - locked.done
            locked.eta_seconds = eta_seconds(remaining, locked.rate)
            usage.add_to(locked)  # what this batch spent, added to what other copies stored
            locked.params = {**locked.params, "cursor": cursor}
            locked.save(update_fields=["done", "failed", "rate", "eta_seconds", "params", "updated_at"])
            if remaining == 0:
                mark_done(locked)
            return locked.status == Status.RUNNING and not locked.cancel_requested


# Why an item of a job that reads its source's rationales (Gen-U, faithfulness) is failed: the
# rationale was deleted after the job was created, so nothing is left to answer or score for it.
RATIONALE_GONE = ("nothing to {what}: the source's rationale of this item was deleted after the job was created "
                  "(import or generate it again, then start a job for it)")


def rationale_gone_failures(job: GenerationJob, item_ids: list[int], *, with_rationale, what: str
                            ) -> list[GenerationFailure]:
    """One failure (``RATIONALE_GONE``) for each item of ``item_ids`` that still exists but is not in
    ``with_rationale``, so that it counts as processed instead of being handed out for ever."""
    have = set(with_rationale)
    gone = [i for i in item_ids if i not in have]
    return [GenerationFailure(job=job, item_id=pk, unit="", raw_output="", reason=RATIONALE_GONE.format(what=what))
            for pk in Item.objects.filter(pk__in=gone).order_by("pk").values_list("pk", flat=True)]


# Why an output was kept as a failure instead of stored: it holds text no database can store.
UNSTORABLE_OUTPUT = ("not stored: the {what}'s {field} {problem}; the model's output is kept here with such "
                     "characters replaced by U+FFFD")
UNSTORABLE_FAILURE = "; its {field} {problem}, kept with such characters replaced by U+FFFD"
# Why an output was kept as a failure instead of stored: its text breaks a rule every import, form and
# study bundle follows (``content.content_row_value_problems``: a T5 sentinel token, for one).
REFUSED_OUTPUT = ("not stored: the {what}'s {field} breaks a rule every import, form and study bundle follows "
                  "({problem}); the model's output is kept here")


def _row_problem(row) -> tuple[str, str] | None:
    """(field, why) for the first text or JSON field of ``row`` that no database can store
    (:func:`lab.jsontext.text_problem`: a NUL, a lone surrogate), None when every one can."""
    for model_field in row._meta.concrete_fields:
        value = getattr(row, model_field.attname, None)
        if isinstance(value, str):
            problem = text_problem(value)
            if problem:
                return model_field.name, problem
        elif model_field.get_internal_type() == "JSONField" and value is not None:
            for path, problem in json_problems(value):
                return f"{model_field.name} at {json_path(path)}", problem.removeprefix("the text ")
    return None


def _output_refusal(row) -> str | None:
    """Why generated ``row`` is not stored (the reason its failure records), None when it is: a
    text or JSON field no database can store (:func:`_row_problem`), or a value an import, a form
    or a study bundle would refuse (``content.content_row_value_problems``, as for a new row: a
    rationale's or a question's text holding a T5 sentinel token), so that a job stores nothing
    those refuse."""
    found = _row_problem(row)
    if found:
        return UNSTORABLE_OUTPUT.format(what=row._meta.verbose_name, field=found[0], problem=found[1])
    refused = next(iter(content_row_value_problems(obj=row).items()), None)
    if refused:
        return REFUSED_OUTPUT.format(what=row._meta.verbose_name, field=refused[0], problem=refused[1])
    return None


def _output_unit(row) -> tuple[int, str]:
    """(item id, failure unit) of a generated row, as its kind names a failure of it."""
    if isinstance(row, GeneralizationQuestion):
        return row.item_id, f"{row.qtype}#{(row.metadata or {}).get('sample_index', 0)}"
    if isinstance(row, GenUPrediction):
        return row.generalization_question.item_id, f"{row.answerer}:q{row.generalization_question_id}"
    if hasattr(row, "qtype"):  # a DroppedQuestion
        return row.item_id, f"{row.qtype}#{row.sample_index}"
    return row.item_id, ""  # a rationale


def unstorable_outputs_failed(job: GenerationJob, output: BatchOutput) -> None:
    """Take out of ``output`` each row holding text no database can store (a NUL or a lone
    surrogate in an LM's output: PostgreSQL refuses the first, no database can encode the second,
    and either would roll back the whole batch and fail every resume of the job the same way), or
    text an import, a form or a study bundle refuses (a T5 sentinel token in a rationale's or a
    question's text: :func:`_output_refusal`), and keep it as a failure of its item and unit
    (:func:`_output_unit`), its raw output stored with NULs and lone surrogates replaced
    (:func:`lab.jsontext.storable_text`) and the reason naming the field; a failure that holds such
    characters is kept the same way. Every other output of the batch is stored, and the item counts
    as processed, so a resume does not send it again. The one place every item-by-item kind's
    generated text passes before it is written (:meth:`ItemHandler._store_batch`)."""
    failures = {(f.item_id, f.unit): f for f in output.failures}
    for f in output.failures:
        found = _row_problem(f)
        if found:
            f.raw_output, f.reason, f.unit = (storable_text(f.raw_output), storable_text(f.reason),
                                              storable_text(f.unit))
            f.reason += UNSTORABLE_FAILURE.format(field=found[0], problem=found[1])
    for name in ("rationales", "questions", "predictions", "dropped"):
        kept = []
        for row in getattr(output, name):
            reason = _output_refusal(row)
            if reason is None:
                kept.append(row)
                continue
            item_id, unit = _output_unit(row)
            raw = getattr(row, "raw_output", "") or getattr(row, "text", "")
            logger.warning("generation job %s: item %s %s: %s", job.pk, item_id, unit, reason)
            existing = failures.get((item_id, unit))
            if existing is not None:
                existing.reason = f"{existing.reason}; {reason}"
                continue
            failures[item_id, unit] = failure = GenerationFailure(
                job=job, item_id=item_id, unit=unit, raw_output=storable_text(raw), reason=reason)
            output.failures.append(failure)
        setattr(output, name, kept)


def _store_usage_quietly(usage: BatchUsage) -> None:
    """:meth:`BatchUsage.store` for a batch that is failing: a database that fails here too is
    logged, and the batch's own error goes on."""
    try:
        usage.store()
    except Exception:
        logger.warning("generation job %s: the usage of a failed batch was not stored", usage.job_id,
                       exc_info=True)


def failed_item_ids(job: GenerationJob, ids: list[int]) -> set[int]:
    if not job.failed:  # kept under the job's row lock with every failure written: none yet
        return set()
    return set(GenerationFailure.objects.filter(job=job, item_id__in=ids).values_list("item_id", flat=True))


def job_actor(job: GenerationJob):
    """Who ``job`` stores what it makes for (``studies.services.content``): the researcher who
    started it; the operator (``None``) for a job a command started; for a job whose researcher's
    account was deleted meanwhile, nobody (an anonymous user, who may add nothing a study shows)."""
    return job_acts_for(created_by=job.created_by, by_operator=job.by_operator)


# Why a job's output was not stored: it would change what a study that the job's researcher may not
# change shows or scores (the not-yours clause of studies.services.content). TO_ADD: a new row that
# study would show (content_added_refusals); TO_CHANGE: a change to a row it uses, or an addition
# its scores would read (content_change_problems).
NOT_YOURS_TO_ADD = ("not stored: a study you may not change would show this {what}; only that study's "
                    "researchers may add to what it shows")
NOT_YOURS_TO_CHANGE = ("not stored: a study you may not change uses this {what}; only that study's "
                       "researchers may change what it shows or what its scores read")


NOT_TO_BUILD_ON = ("not stored: this {what} would hang from an item (or source) that you may no longer build on "
                   "({reason}; a share lowered to view since the job was created, for instance): only rows under what "
                   "you may build on are added, as on the admin's pages and in the imports")


def job_added_refusals(job: GenerationJob, model, pks: list[int], *, what: str) -> dict[int, str]:
    """Of the rows ``job`` just added (``pks`` of ``model``, in its batch's transaction), those it
    may not keep, each with the reason its failure records: one hanging from an item or source
    its researcher may not build on now (``content.content_parent_refusals``: the share that let
    them may have been lowered since the job was created, ``NOT_TO_BUILD_ON``), and one that a study
    they may not change would show (``content.content_added_refusals``, ``NOT_YOURS_TO_ADD``). The
    one check of the kinds that write under items (``Handler.builds_on_items``). A job whose
    researcher's account was deleted acts for nobody (:func:`job_actor`): its items were checked as
    theirs to build on when it was created, and it stores, as before, only what no study shows."""
    actor = job_actor(job)
    parents = content_parent_refusals(user=actor, model=model, pks=pks) if job.created_by_id is not None else {}
    shown = content_added_refusals(user=actor, model=model, pks=[pk for pk in pks if pk not in parents])
    return {**{pk: NOT_TO_BUILD_ON.format(reason=reason, what=what) for pk, reason in parents.items()},
            **dict.fromkeys(shown, NOT_YOURS_TO_ADD.format(what=what))}


def store_failures(job: GenerationJob, failures: list[GenerationFailure]) -> None:
    # (job, item, unit) is unique: a failure another delivery already stored is skipped.
    GenerationFailure.objects.bulk_create(failures, ignore_conflicts=True)
