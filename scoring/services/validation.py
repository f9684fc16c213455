"""Applying a question-validation study's verdicts: the crowd's judgement of generalization
questions (``results["question_validation"]``, ``score._question_validation``) becomes their
validation status, through the one writer of it (``studies.services.questions``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from scoring.errors import ScoringError
from scoring.models import ScoreRun
from scoring.selectors import score_run_latest, score_run_read_at_recorded
from scoring.services.bundle.export import scores_staleness
from scoring.services.score import UNDECIDED, VALIDATION_MAJORITY
from studies.models import GeneralizationQuestion, Study
from studies.services.content import content_change_check
from studies.services.questions import (
    QuestionError,
    generalization_questions_set_validation,
    validation_change_problem,
)


class VerdictsNotApplicable(ScoringError):
    """The run's verdicts may not be applied: not a question-validation study, not the study's
    latest finished run, or stale (the answers that count changed after it began reading them)."""


@dataclass(frozen=True)
class KeptQuestion:
    """A decided question ``question_validation_apply`` left as it is because its status was
    changed after the run scored it: its current ``status``, and who set it and when, as its
    ``metadata["validation"]`` records them (``validation_provenance``)."""

    question_id: int
    status: str
    by: str
    at: str

    def describe(self) -> str:
        return f"question {self.question_id} ({self.status}, by {self.by} at {self.at})"


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
    kept: tuple[KeptQuestion, ...] = ()
    # questions with a verdict judged by fewer workers than the study asks (``short_questions``):
    # left as they are by default, applied only when ``include_short`` was asked for
    short: tuple[int, ...] = ()
    include_short: bool = False
    judges_asked: int = 0

    def message(self) -> str:
        text = (f"{self.changed} generalization questions changed to the crowd's verdict, {self.unchanged} already "
                f"had it, {self.left} left as they are (a tie or no counted verdict).")
        if self.short and self.include_short:
            text += (f" Short questions applied on request: {len(self.short)} of these verdicts rest on fewer "
                     f"judges than the {self.judges_asked} the study asks per question (questions "
                     f"{', '.join(map(str, self.short))}).")
        elif self.short:
            text += (f" {len(self.short)} questions left as they are: judged by fewer workers than the "
                     f"{self.judges_asked} the study asks per question (questions {', '.join(map(str, self.short))}), "
                     "so their verdict is not yet the crowd's; apply them when their judges are complete, or "
                     "apply short questions too explicitly.")
        if self.kept:
            text += (f" {len(self.kept)} questions left as they are: their status was changed after this run ("
                     f"{'; '.join(kept.describe() for kept in self.kept)}); score the study again to judge them "
                     "by their status now, or set them by hand.")
        if self.suggested_corrections:
            text += (f" {len(self.suggested_corrections)} have a corrected answer the workers suggested (see the "
                     "run's report); answers are not changed by this action.")
        return text


def question_validation_apply(*, run: ScoreRun, user, include_short: bool = False) -> AppliedVerdicts:
    """Set each generalization question the run decided (``question_validation``'s default reading,
    ``VALIDATION_MAJORITY``) to its verdict, valid or invalid, for ``user`` (None: the operator);
    a question left undecided (a tie) keeps its status, and no answer is changed. A question judged
    by fewer workers than the study asks (``short_questions``, ``score.VALIDATION_SHORT_RULE``; for a
    run from before that was recorded, fewer counted verdicts than the study's ``annotators_per_unit``)
    keeps its status too, named in ``short``, unless ``include_short`` (e.g. for a study closed short):
    then it is applied and named in the message as a short question applied on request. Refuses
    (``VerdictsNotApplicable``) a run that is not of a question-validation study, not the study's
    latest finished run (``score_run_latest``), or stale: the answers that count changed after it
    began reading them, or counted answers were withdrawn since (``scores_staleness``, the one rule
    of a run's staleness), checked under the writer's locks in the transaction that writes, so a
    rejection committed before the locks is seen. A decided question whose status was changed after
    the run scored it (its status now is not the run's ``status_when_scored``, or its ``metadata["validation"]["at"]`` is later than
    the run's ``finished_at``: a researcher's decision, or another validation study's verdicts) is
    left as it is and named in ``kept``, so a later decision is never replaced; they are read under
    the locks the writer takes, in its order (``_lock_as_the_writer``). The rights are checked, and
    provenance recorded, by ``generalization_questions_set_validation``: its ``QuestionError`` and
    ``ContentNotYours`` propagate, and then nothing is changed (one transaction)."""
    study = run.study
    if study.kind != Study.Kind.QUESTION_VALIDATION:
        raise VerdictsNotApplicable(f"Run {run.pk} scores {study.name!r}, not a question-validation study: it has "
                                    "no verdicts on questions to apply.")
    latest = score_run_latest(study=study)
    if latest is None or latest.pk != run.pk:
        raise VerdictsNotApplicable(f"Run {run.pk} is not the latest finished run of {study.name!r}: apply the "
                                    f"verdicts of its latest run ({latest.pk if latest else 'none yet'}).")
    rows = (run.results or {}).get("question_validation", {}).get("questions") or []
    verdicts = {row["question_id"]: row[VALIDATION_MAJORITY] for row in rows
                if row.get(VALIDATION_MAJORITY) in ("valid", "invalid")}
    by_id = {row["question_id"]: row for row in rows}
    short = tuple(pk for pk in sorted(verdicts) if _short(by_id[pk], study))
    if not include_short:
        verdicts = {pk: verdict for pk, verdict in verdicts.items() if pk not in short}
    scored_as = {row["question_id"]: row.get("status_when_scored") for row in rows}
    left = sum(1 for row in rows if row.get(VALIDATION_MAJORITY) == UNDECIDED)
    changed = 0
    kept: list[KeptQuestion] = []
    with transaction.atomic():
        _lock_as_the_writer(ids=sorted(verdicts), user=user)
        _check_not_stale(run, user=user)  # after the locks: the check and the writes see the same answers
        decided: dict[str, list[GeneralizationQuestion]] = {"valid": [], "invalid": []}
        for question in (GeneralizationQuestion.objects.select_for_update().filter(pk__in=verdicts)
                         .only("id", "validation_status", "metadata").order_by("pk")):
            verdict = verdicts[question.pk]
            if question.validation_status == verdict:
                continue  # already at its verdict: nothing to replace
            later = _changed_after(question, run=run, status_when_scored=scored_as.get(question.pk))
            if later is not None:
                kept.append(later)
            else:
                decided[verdict].append(question)
        for status in ("valid", "invalid"):
            if decided[status]:
                changed += len(generalization_questions_set_validation(questions=decided[status], status=status,
                                                                       user=user))
    corrections = {row["question_id"]: row["suggested_corrected_answer"] for row in rows
                   if row.get("suggested_corrected_answer")}
    return AppliedVerdicts(changed=changed, unchanged=len(verdicts) - changed - len(kept), left=left,
                           suggested_corrections=corrections, kept=tuple(kept), short=short,
                           include_short=include_short, judges_asked=study.annotators_per_unit)


def _short(row: dict, study: Study) -> bool:
    """Whether a question's row was judged by fewer workers than the study asks: as the run recorded
    it (``short``), or, for a run from before that was recorded, fewer counted verdicts than the
    study's workers per unit (one unit per question in a question-validation study)."""
    if "short" in row:
        return bool(row["short"])
    return int(row.get("n_verdicts") or 0) < study.annotators_per_unit


def _check_not_stale(run: ScoreRun, *, user) -> None:
    """Refuse (``VerdictsNotApplicable``) ``run`` when its verdicts no longer match the study's answers,
    by the one staleness rule of a run (``scores_staleness``: the answers that count changed after
    it began reading them, ``study_counting_changed_at`` against ``score_run_read_at``, or counted
    answers were withdrawn since). The message names the time the rule compared with: when the run
    began reading, or when it finished for a run from before that was recorded."""
    stale = scores_staleness(run.study, run, user=user)
    if not stale or not stale["stale"]:
        return
    withdrawn = stale["withdrawn_since_run"]["counted_answers"]
    since = f"; {withdrawn} counted answers were withdrawn since" if withdrawn else ""
    read_at = score_run_read_at_recorded(run)
    after = (f"after it began reading them ({read_at.isoformat()}" if read_at is not None else
             f"after it finished ({stale['finished_at']}, a run from before the time it began reading was recorded")
    raise VerdictsNotApplicable(
        f"Run {run.pk} of {run.study.name!r} is stale: the answers that count changed {after}: work submitted, "
        f"rejected, put on hold or cleared{since}), so its verdicts may no longer be the crowd's. Score the study "
        "again first, then apply the new run's verdicts.")


def _lock_as_the_writer(*, ids: list[int], user) -> None:
    """The checks ``generalization_questions_set_validation`` makes first, made here before the
    question rows are read for update: the rights (``validation_change_problem``, a
    ``QuestionError``) and the CHANGE share with its lock on the studies using the questions
    (``content_change_check``), so the locks are taken in the writer's order (studies, then
    questions) and a researcher's change at the same time waits rather than deadlocks. Call inside
    the transaction that then calls the writer."""
    problem = validation_change_problem(user)
    if problem:
        raise QuestionError(problem)
    if ids:
        content_change_check(user=user, model=GeneralizationQuestion,
                             changes={pk: {"validation_status"} for pk in ids}, lock=True)


def _changed_after(question: GeneralizationQuestion, *, run: ScoreRun, status_when_scored: str | None
                   ) -> KeptQuestion | None:
    """The change that makes ``question`` one to leave as it is (``KeptQuestion``), None when its
    status is still the one ``run`` scored it with and was last set before the run finished."""
    record = question.metadata.get("validation") if isinstance(question.metadata, dict) else None
    record = record if isinstance(record, dict) else {}
    at = parse_datetime(record["at"]) if isinstance(record.get("at"), str) else None
    if at is not None and timezone.is_naive(at):
        at = timezone.make_aware(at, UTC)
    later = at is not None and (run.finished_at is None or at > run.finished_at)
    if question.validation_status == status_when_scored and not later:
        return None
    by = record.get("username") or record.get("set_by") or "an unrecorded writer"
    when = at.isoformat(timespec="seconds") if isinstance(at, datetime) else "an unrecorded time"
    return KeptQuestion(question_id=question.pk, status=question.validation_status, by=by, at=when)
