"""Faithfulness jobs (SPEC section 6): for each rationale of a highlight source, a task model
scores the item's answer labels three times, on the full question x, on the highlight alone h
and on the question without the highlight x \\ h, and the job stores p(y_hat | x), p(y_hat | h)
and p(y_hat | x \\ h) on the rationale (``Rationale.faithfulness``), which is where scoring reads
them, with the task model and its backend, how it scored the labels (``method``: the backend's
``label_scoring.LABEL_METHODS`` and the three inputs, ``PASSES``), the template it read
(``prompt``: ``label_scoring.LABEL_PROMPTS``), the rule that chose y_hat (``y_hat_from``) and the
highlight spans the three passes read (``highlights``, ``faithfulness_rules.SPANS_KEY``: scoring
leaves the probabilities out once the rationale's highlights differ from them), the task model's
``checkpoint`` (``faithfulness_rules.CHECKPOINT_KEY``: the sorted fingerprints of the training
records of the trained checkpoints in its folder, as the job's settings snapshot recorded them when
it was made, ``inputs.recorded_model_checkpoint``, as a rationale job's; None for a hub name or a
folder no job here trained) and what the scorer reports of its run (``lm.backends.backend_run_info``).
A fine-tuning or Quark job registering under the name of the source whose folder the task model is
publishes new weights under the same path: the job is cancelled, naming the source, when the
checkpoint it was made on is replaced (``inputs.job_settings_refusal``, :data:`inputs.MODEL_ROLES`),
and scoring tells probabilities of two checkpoints apart (``computed_with``):

- the model that made the highlight (the highlight source's own seq2seq or causal model, used when
  ``task_model`` is left out or names it): y_hat from the highlight pass, as the seed
  (pyhighlights) scores select-then-predict models (``y_hat_from = "highlight"``);
- any other task model, usually one that reads the full input: y_hat from the full input, as
  ERASER (``y_hat_from = "full"``).

``params``: ``task_model`` (a folder, hub name or ``.gguf`` file; empty: the source's own model),
``task_backend`` (``classifier`` for a sequence-classification model whose classes name the choice
labels; ``seq2seq`` or ``causal`` to score the label words, see :mod:`studies.lm.label_scoring`;
empty with the source's own model: its backend) and ``y_hat_from`` (``highlight`` or ``full``: an
explicit choice overriding the rule above, e.g. for an external select-then-predict model).
A rationale whose highlight does not fit its question is recorded as a failure, and so is one that
a study the job's researcher may not change uses (not theirs to change: :meth:`FaithfulnessHandler.store`)."""
from __future__ import annotations

import json

from django.utils import timezone

from studies.faithfulness_rules import faithfulness_problem_text, with_spans
from studies.lm import highlights
from studies.lm.backends import backend_run_info
from studies.lm.label_scoring import LABEL_METHODS, LABEL_PROMPTS, TASK_BACKENDS, LabelScorer
from studies.models import GenerationFailure, GenerationJob, Item, Rationale
from studies.services.content import content_change_problems
from studies.services.model_paths import model_path_stored

from .common import (
    NOT_YOURS_TO_CHANGE,
    BatchOutput,
    GenerationError,
    ItemHandler,
    Prepared,
    failed_item_ids,
    job_actor,
    ordered_item_ids,
    prompt_item,
    rationale_gone_failures,
    store_failures,
)
from .inputs import recorded_model_checkpoint

# The three inputs each rationale's labels are scored on (``generate``), stored in ``"method"``
# after the backend's label method (``label_scoring.LABEL_METHODS``).
PASSES = ("three passes per rationale, each filling the prompt's question: x (the full question), h (the "
          "highlighted spans alone, in order, joined by spaces) and x \\ h (the question with the highlighted text "
          "deleted, the remaining parts joined by spaces)")


def method_text(backend: str) -> str:
    """What the job stores as ``"method"``: how ``backend`` turns the model into label
    probabilities, and the three inputs."""
    return f"{LABEL_METHODS[backend]}; {PASSES}"


def own_model(source) -> tuple[str, str]:
    """(model, backend) of the model that made the source's highlights when the project can run
    it (an LM source with a seq2seq or causal backend and a model), else ("", "")."""
    if source.kind == "lm" and source.backend in ("seq2seq", "causal") and source.model_name_or_path.strip():
        return source.model_name_or_path.strip(), source.backend
    return "", ""


# The y_hat rules a job may name (``highlights.Y_HAT_FROM``) in words, and the rule a job that names
# none gets (:func:`faithfulness_params`), for the pages that offer the choice.
Y_HAT_FROM_TEXT = dict(zip(highlights.Y_HAT_FROM, (
    "the highlight pass (select-then-predict), as SPEC section 6 says",
    "the full input (ERASER), which departs from SPEC section 6 (y_hat predicted from the highlight)",
), strict=True))
Y_HAT_FROM_DEFAULT = "highlight with the highlight source's own model, full with another task model"


def faithfulness_params(source, params: dict) -> dict:
    """A faithfulness job's params checked and completed: the task model (the source's own when
    none is given), its backend and the y_hat rule (see the module docstring)."""
    mine, my_backend = own_model(source)
    model = params.get("task_model")
    if model is not None and not isinstance(model, str):
        raise GenerationError("task_model must be text: the folder, hub name or .gguf file of the task model")
    model = model_path_stored(model or "") or mine  # a folder of RL_MODEL_DIR kept relative to it, as a source's
    if not model:
        raise GenerationError(f"task_model is required: {source.name!r} has no model of its own that the project can "
                              "run; give the folder (or .gguf file) of the task model")
    backend = params.get("task_backend") or (my_backend if model == mine else None)
    if backend not in TASK_BACKENDS:
        raise GenerationError(f"task_backend must be one of {', '.join(TASK_BACKENDS)}")
    rule = params.get("y_hat_from") or ("highlight" if model == mine else "full")  # Y_HAT_FROM_DEFAULT
    if rule not in highlights.Y_HAT_FROM:
        raise GenerationError(f"y_hat_from must be one of {', '.join(highlights.Y_HAT_FROM)}, not {rule!r}")
    return {**params, "task_model": model, "task_backend": backend, "y_hat_from": rule}


class FaithfulnessHandler(ItemHandler):
    kind = GenerationJob.Kind.FAITHFULNESS
    params_accepted = frozenset({"task_model", "task_backend", "y_hat_from"})
    # The task model is frozen into the params as a path, but the weights in its folder are not: the
    # job records their checkpoint and stops if it is replaced (``inputs.MODEL_ROLES``).
    settings_read_live = (*ItemHandler.settings_read_live, "task_model")

    def prepare(self, *, source, generator, dataset, split, item_ids, limit, params):
        if source is None:
            raise GenerationError("choose the highlight source")
        if not source.has_highlights:
            raise GenerationError(f"source {source.name!r} has no highlights: tick 'has highlights' on it and "
                                  "import its rationales with a highlights column")
        params = faithfulness_params(source, params)
        ids = ordered_item_ids(dataset=dataset, split=split, item_ids=item_ids, limit=None)
        with_highlights = set(Rationale.objects.filter(source=source, item_id__in=ids).exclude(highlights=[])
                              .values_list("item_id", flat=True))
        ids = [i for i in ids if i in with_highlights][: limit or None]
        if not ids:
            raise GenerationError(f"no rationale of {source.name!r} in this selection has highlights")
        return Prepared(item_ids=ids, params=params, total=len(ids), split=split)

    def processed_among(self, job, ids):
        done = {item for item, info in Rationale.objects.filter(source_id=job.source_id, item_id__in=ids)
                .values_list("item_id", "faithfulness") if (info or {}).get("job_id") == job.pk}
        return done | failed_item_ids(job, ids)

    def generate(self, job, item_ids):
        scorer = LabelScorer(job.params["task_backend"], job.params["task_model"])
        rationales = list(Rationale.objects.filter(source_id=job.source_id, item_id__in=item_ids)
                          .select_related("item__dataset").order_by("item_id"))
        out = BatchOutput(units=len(item_ids))
        out.failures.extend(rationale_gone_failures(job, item_ids, with_rationale={r.item_id for r in rationales},
                                                    what="score"))
        passes: dict[str, list] = {"full": [], "highlight": [], "without": []}
        usable: list[Rationale] = []
        for rationale in rationales:
            item: Item = rationale.item
            try:
                h = highlights.highlight_only(item.question, rationale.highlights)
                rest = highlights.without_highlight(item.question, rationale.highlights)
            except ValueError as exc:
                out.failures.append(GenerationFailure(job=job, item=item, unit="", reason=f"highlights: {exc}",
                                                      raw_output=str(rationale.highlights)[:2000]))
                continue
            base = prompt_item(item)
            for name, text in (("full", item.question), ("highlight", h), ("without", rest)):
                passes[name].append(base.__class__(question=text, choices=base.choices, dataset=base.dataset))
            usable.append(rationale)
        probs = {name: scorer.probabilities(pitems) for name, pitems in passes.items()}
        rule = job.params.get("y_hat_from") or "highlight"  # jobs from before the rule was a choice
        method, prompt = method_text(scorer.backend), LABEL_PROMPTS[scorer.backend]
        # Which weights: the checkpoint the job was made on (it is cancelled once that is replaced),
        # and the device, dtype and library versions where the scorer reports them.
        made_with = {"checkpoint": recorded_model_checkpoint(job, "task_model"), **backend_run_info(scorer)}
        for index, rationale in enumerate(usable):
            deciding = probs[rule][index]
            y_hat = max(deciding, key=deciding.get)
            out.faithfulness[rationale.pk] = with_spans({
                "p_full": probs["full"][index][y_hat], "p_highlight": probs["highlight"][index][y_hat],
                "p_without": probs["without"][index][y_hat], "y_hat": y_hat, "y_hat_from": rule,
                "task_model": job.params["task_model"], "task_backend": job.params["task_backend"],
                "method": method, "prompt": prompt, "job_id": job.pk, **made_with,
            }, rationale.highlights)
        return out

    def store(self, job, output):
        # The job acts for the researcher who started it: a rationale that a study they may not
        # change uses is not theirs to change (its scores read the faithfulness), checked here
        # under a lock on those studies until this batch commits (studies.services.content); a
        # refused one keeps its faithfulness and is recorded as a failure with what was computed.
        not_yours, fixed = content_change_problems(
            user=job_actor(job), model=Rationale, changes=dict.fromkeys(output.faithfulness, ("faithfulness",)),
            lock=True)
        refused = {**fixed, **dict.fromkeys(not_yours, NOT_YOURS_TO_CHANGE.format(what="rationale"))}
        # What the task model gave is stored only where it follows the rule every write follows
        # (``studies.faithfulness_rules``: a NaN or out-of-range probability is not): the rest is
        # recorded as a failure with what was computed, and the rationale keeps what it had.
        refused.update({pk: f"faithfulness: {problem}" for pk, value in output.faithfulness.items()
                        if pk not in refused and (problem := faithfulness_problem_text(value))})
        now = timezone.now()
        rationales = list(Rationale.objects.filter(pk__in=output.faithfulness).order_by("item_id"))
        output.failures.extend(GenerationFailure(job=job, item_id=r.item_id, unit="", reason=refused[r.pk],
                                                 raw_output=json.dumps(output.faithfulness[r.pk]))
                               for r in rationales if r.pk in refused)
        rationales = [r for r in rationales if r.pk not in refused]
        for rationale in rationales:
            rationale.faithfulness = output.faithfulness[rationale.pk]
            rationale.updated_at = now
        Rationale.objects.bulk_update(rationales, ["faithfulness", "updated_at"])
        store_failures(job, output.failures)
