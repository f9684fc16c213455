"""Faithfulness jobs (SPEC section 6): for each rationale of a highlight source, a task model
scores the item's answer labels three times, on the full question x, on the highlight alone h
and on the question without the highlight x \\ h. y_hat is the label predicted from h (the
documented deviation from ERASER, which takes it from x); the job stores p(y_hat | x),
p(y_hat | h) and p(y_hat | x \\ h) on the rationale (``Rationale.faithfulness``), which is where
scoring reads them.

``params``: ``task_model`` (a folder, hub name or ``.gguf`` file) and ``task_backend``
(``classifier`` for a sequence-classification model whose classes name the choice labels;
``seq2seq`` or ``causal`` to score the label words; see :mod:`studies.lm.label_scoring`).
A rationale whose highlight does not fit its question is recorded as a failure."""
from __future__ import annotations

from django.utils import timezone

from studies.lm import highlights
from studies.lm.label_scoring import TASK_BACKENDS
from studies.models import GenerationFailure, GenerationJob, Item, Rationale

from .common import (
    BatchOutput,
    GenerationError,
    ItemHandler,
    Prepared,
    failed_item_ids,
    ordered_item_ids,
    prompt_item,
    store_failures,
)


class FaithfulnessHandler(ItemHandler):
    kind = GenerationJob.Kind.FAITHFULNESS
    params_accepted = frozenset({"task_model", "task_backend"})

    def prepare(self, *, source, generator, dataset, split, item_ids, limit, params):
        if source is None:
            raise GenerationError("choose the highlight source")
        if not source.has_highlights:
            raise GenerationError(f"source {source.name!r} has no highlights: tick 'has highlights' on it and "
                                  "import its rationales with a highlights column")
        if params.get("task_backend") not in TASK_BACKENDS:
            raise GenerationError(f"task_backend must be one of {', '.join(TASK_BACKENDS)}")
        if not str(params.get("task_model") or "").strip():
            raise GenerationError("task_model is required: the folder (or .gguf file) of the task model")
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
        from studies.lm.label_scoring import LabelScorer

        scorer = LabelScorer(job.params["task_backend"], job.params["task_model"])
        rationales = list(Rationale.objects.filter(source_id=job.source_id, item_id__in=item_ids)
                          .select_related("item__dataset").order_by("item_id"))
        out = BatchOutput(units=len(item_ids))
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
        for index, rationale in enumerate(usable):
            from_highlight = probs["highlight"][index]
            y_hat = max(from_highlight, key=from_highlight.get)
            out.faithfulness[rationale.pk] = {
                "p_full": probs["full"][index][y_hat], "p_highlight": from_highlight[y_hat],
                "p_without": probs["without"][index][y_hat], "y_hat": y_hat,
                "task_model": job.params["task_model"], "task_backend": job.params["task_backend"],
                "job_id": job.pk,
            }
        return out

    def store(self, job, output):
        now = timezone.now()
        rationales = list(Rationale.objects.filter(pk__in=output.faithfulness))
        for rationale in rationales:
            rationale.faithfulness = output.faithfulness[rationale.pk]
            rationale.updated_at = now
        Rationale.objects.bulk_update(rationales, ["faithfulness", "updated_at"])
        store_failures(job, output.failures)
