"""Applying a question-validation study's verdicts: the crowd's judgement of generalization
questions (``results["question_validation"]``, ``score._question_validation``) becomes their
validation status, through the one writer of it (``studies.services.questions``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction

from scoring.errors import ScoringError
from scoring.models import ScoreRun
from scoring.selectors import score_run_latest
from scoring.services.score import UNDECIDED, VALIDATION_MAJORITY
from studies.models import GeneralizationQuestion, Study
from studies.services.questions import generalization_questions_set_validation


class VerdictsNotApplicable(ScoringError):
    """The run's verdicts may not be applied: not a question-validation study, or not the study's
    latest finished run."""


@dataclass(frozen=True)
class AppliedVerdicts:
    """What ``question_validation_apply`` did: questions whose status it changed, those already at
    their verdict (unchanged), those it left alone (no verdict: a tie or no counted verdicts), and
    the corrected answers the workers suggested ({question id: answer}), for the researcher: the
    action never changes an answer."""

    changed: int
    unchanged: int
    left: int
    suggested_corrections: dict[int, str] = field(default_factory=dict)

    def message(self) -> str:
        text = (f"{self.changed} generalization questions changed to the crowd's verdict, {self.unchanged} already "
                f"had it, {self.left} left as they are (a tie or no counted verdict).")
        if self.suggested_corrections:
            text += (f" {len(self.suggested_corrections)} have a corrected answer the workers suggested (see the "
                     "run's report); answers are not changed by this action.")
        return text


def question_validation_apply(*, run: ScoreRun, user) -> AppliedVerdicts:
    """Set each generalization question the run decided (``question_validation``'s default reading,
    ``VALIDATION_MAJORITY``) to its verdict, valid or invalid, for ``user`` (None: the operator);
    a question left undecided (a tie) keeps its status, and no answer is changed. Refuses
    (``VerdictsNotApplicable``) a run that is not of a question-validation study or not the study's
    latest finished run (``score_run_latest``). The rights are checked, and provenance recorded, by
    ``generalization_questions_set_validation``: its ``QuestionError`` and ``ContentNotYours``
    propagate, and then nothing is changed (one transaction)."""
    study = run.study
    if study.kind != Study.Kind.QUESTION_VALIDATION:
        raise VerdictsNotApplicable(f"Run {run.pk} scores {study.name!r}, not a question-validation study: it has "
                                    "no verdicts on questions to apply.")
    latest = score_run_latest(study=study)
    if latest is None or latest.pk != run.pk:
        raise VerdictsNotApplicable(f"Run {run.pk} is not the latest finished run of {study.name!r}: apply the "
                                    f"verdicts of its latest run ({latest.pk if latest else 'none yet'}).")
    rows = (run.results or {}).get("question_validation", {}).get("questions") or []
    decided: dict[str, list[int]] = {"valid": [], "invalid": []}
    for row in rows:
        if row.get(VALIDATION_MAJORITY) in decided:
            decided[row[VALIDATION_MAJORITY]].append(row["question_id"])
    left = sum(1 for row in rows if row.get(VALIDATION_MAJORITY) == UNDECIDED)
    changed = 0
    with transaction.atomic():
        for status in ("valid", "invalid"):
            if decided[status]:
                questions = GeneralizationQuestion.objects.filter(pk__in=decided[status])
                changed += len(generalization_questions_set_validation(questions=questions, status=status, user=user))
    n_decided = len(decided["valid"]) + len(decided["invalid"])
    corrections = {row["question_id"]: row["suggested_corrected_answer"] for row in rows
                   if row.get("suggested_corrected_answer")}
    return AppliedVerdicts(changed=changed, unchanged=n_decided - changed, left=left,
                           suggested_corrections=corrections)
