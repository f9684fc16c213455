"""The annotation export: one row per recorded answer, with the worker pseudonymised and the unit's
scores joined. The column set is stable: columns are only ever added at the end, never renamed
or removed; ``worker_raw_id`` is appended only when a permitted user asks for it."""
from __future__ import annotations

import json
from collections.abc import Iterator

from django.db.models import Exists, OuterRef, QuerySet

from annotations.models import Annotation
from annotations.selectors import claims_that_count
from lab.api.streaming import Column
from lab.pseudonyms import PseudonymCache
from scoring.metrics.labels import UTILITY_NAMES
from scoring.models import UnitScore
from studies.models import Study

ANSWER_STEPS = {"before", "after", "attention"}  # steps whose answer has a gold label
_YES_NO = {"true": "yes", "yes": "yes", "false": "no", "no": "no"}

ANNOTATION_COLUMNS: list[Column] = [
    Column("annotation_id", "int", "Id of the answer (one row per answered step)."),
    Column("study_id", "int", "Study id."),
    Column("assignment_id", "int", "The worker's task (assignment) id."),
    Column("assignment_status", "str", "active, submitted, expired, approved, rejected or returned."),
    Column("worker", "str", "Pseudonymised worker id: `w_` + 16 hex digits of HMAC-SHA256(salt, platform:id)."),
    Column("position", "int", "Position of the unit in the task (0-based)."),
    Column("unit_id", "int", "Unit id; empty for attention checks."),
    Column("item_id", "int", "Item id; empty for attention checks."),
    Column("item_external_id", "str", "Item id in its dataset (e.g. StrategyQA qid)."),
    Column("split", "str", "Split of the item: train, dev, test or other."),
    Column("source_id", "int", "Rationale source id of the unit."),
    Column("source_name", "str", "Rationale source name of the unit."),
    Column("generalization_question_id", "int", "Generalization question answered (generalization studies)."),
    Column("generalization_type", "str", "rephrase, counterfactual or similar (generalization studies)."),
    Column("attention_check_id", "int", "Attention check id; empty for real units."),
    Column("step", "str", "before (no rationale), after (with rationale), validation, properties or attention."),
    Column("answer", "str", "The answer label given (yes/no, or a..d)."),
    Column("gold_answer", "str", "The correct label for this question (item, generalization question or check)."),
    Column("answer_correct", "bool", "answer == gold_answer for before/after/attention steps; empty otherwise."),
    Column("payload", "str", "JSON of the step's structured answer (validation and property marks)."),
    Column("shown_at", "datetime", "When the step was shown (UTC)."),
    Column("answered_at", "datetime", "When the answer was recorded (UTC)."),
    Column("duration_ms", "int", "Time spent on the step in milliseconds."),
    Column("utility", "int", "Utility of the (item, source) unit after scoring: 1 useful, 0 unsure, -1 not useful."),
    Column("utility_label", "str", "useful, unsure or not_useful; empty before scoring."),
    Column("task_correct", "bool", "Whether the source's own predicted answer was correct."),
    Column("gen_u", "int", "Gen-U of the unit's rationale (-1, 0, 1), when computed."),
    Column("similarity", "float", "BERTScore similarity of the rationale to the gold rationale, when computed."),
    Column("counts", "bool", "The answer counts: its claim is complete, not given back, and its task submitted or "
           "approved (what scoring reads; `annotations.selectors.claims_that_count`)."),
]
RAW_WORKER_COLUMN = Column("worker_raw_id", "str", "Raw platform id (only for staff with studies.view_raw_worker_ids).")

_FIELDS = [
    "id", "claim__study_id", "claim__assignment_id", "claim__assignment__status", "claim__participant_id",
    "claim__participant__platform", "claim__participant__external_id", "claim__position", "claim__unit_id",
    "claim__unit__item_id", "claim__unit__item__external_id", "claim__unit__item__split",
    "claim__unit__item__gold_answer", "claim__unit__source_id", "claim__unit__source__name",
    "claim__unit__generalization_question_id", "claim__unit__generalization_question__qtype",
    "claim__unit__generalization_question__answer", "claim__attention_check_id",
    "claim__attention_check__correct_answer", "step", "answer", "payload", "shown_at", "answered_at", "duration_ms",
    "counts",
]


def annotation_columns(*, raw_worker_ids: bool) -> list[Column]:
    return ANNOTATION_COLUMNS + ([RAW_WORKER_COLUMN] if raw_worker_ids else [])


def same_answer(answer: str, gold: str) -> bool:
    a, g = answer.strip().lower(), gold.strip().lower()
    return _YES_NO.get(a, a) == _YES_NO.get(g, g)


def unit_score_lookup(study_ids) -> dict[tuple[int, int, int], tuple]:
    """(study, item, source) -> (utility, task_correct, gen_u, similarity). Its size is the number
    of scored units, not of annotations."""
    return {
        (s, i, r): rest
        for s, i, r, *rest in UnitScore.objects.filter(study_id__in=study_ids)
        .values_list("study_id", "item_id", "source_id", "utility", "task_correct", "gen_u", "similarity")
        .iterator(chunk_size=5000)
    }


def annotation_rows(
    queryset: QuerySet[Annotation], *, study: Study, raw_worker_ids: bool, chunk_size: int = 5000
) -> Iterator[tuple]:
    """Rows in ``ANNOTATION_COLUMNS`` order, streamed from the database in ``chunk_size`` batches."""
    scores = unit_score_lookup([study.pk])
    pseudonyms = PseudonymCache()
    empty = (None, None, None, None)
    counted = queryset.annotate(counts=Exists(claims_that_count(study=study).filter(pk=OuterRef("claim_id"))))
    for (
        pk, study_id, assignment_id, assignment_status, participant_id, platform, external_id, position, unit_id,
        item_id, item_external_id, split, item_gold, source_id, source_name, genq_id, genq_type, genq_answer,
        check_id, check_answer, step, answer, payload, shown_at, answered_at, duration_ms, counts,
    ) in counted.order_by("id").values_list(*_FIELDS).iterator(chunk_size=chunk_size):
        if check_id is not None:
            gold = check_answer
        elif genq_id is not None:
            gold = genq_answer
        else:
            gold = item_gold
        correct = same_answer(answer, gold) if (step in ANSWER_STEPS and gold is not None and answer) else None
        utility, task_correct, gen_u, similarity = scores.get((study_id, item_id, source_id), empty)
        row = (
            pk, study_id, assignment_id, assignment_status, pseudonyms.get(participant_id, platform, external_id),
            position, unit_id, item_id, item_external_id, split, source_id, source_name, genq_id, genq_type, check_id,
            step, answer, gold, correct, json.dumps(payload, ensure_ascii=False) if payload else "", shown_at,
            answered_at, duration_ms, utility, UTILITY_NAMES.get(utility, ""), task_correct, gen_u, similarity, counts,
        )
        yield row + (external_id,) if raw_worker_ids else row
