"""Reads of the questionnaire: what a worker's page may show right now.

The rule that protects every study lives here: a rationale is put into a page only once the
worker's "before" answer for that claim is stored (generalization: the original question too).
Pages read three small queries: the assignment, its claims (with units joined), its answers."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.core import signing
from django.utils import timezone

from annotations.models import (
    Annotation,
    Assignment,
    AssignmentUnit,
    QualificationGrant,
    QualificationTest,
)
from annotations.services.steps import (
    RATIONALE_PROPERTIES,
    VALIDATION_FIELDS,
    genq_choices,
    normalise_choices,
    steps_for,
)
from studies.models import RationaleSource, Study

_SHOWN_SALT = "annotations.shown"
Step = Annotation.Step


def assignment_by_token(token: str) -> Assignment | None:
    if not token or len(token) > 64:
        return None
    return Assignment.objects.select_related("study").filter(token=token).first()


# --- server-side timing -------------------------------------------------------------------------

def shown_token(*, claim_id: int, step: str, at: datetime | None = None) -> str:
    """A signed record of when the server showed this step (the page carries it back)."""
    at = at or timezone.now()
    return signing.dumps([claim_id, step, at.timestamp()], salt=_SHOWN_SALT, compress=False)


def shown_at_from_token(token: str, *, claim_id: int, step: str) -> datetime | None:
    try:
        c, s, ts = signing.loads(token, salt=_SHOWN_SALT, max_age=7 * 24 * 3600)
    except (signing.BadSignature, ValueError, TypeError):
        return None
    if c != claim_id or s != step:
        return None
    return datetime.fromtimestamp(ts, tz=UTC)


# --- pages --------------------------------------------------------------------------------------

@dataclass
class StepView:
    claim: AssignmentUnit
    step: str
    number: int
    total: int
    question: str
    choices: list[dict]
    is_attention: bool = False
    first_answer_text: str = ""
    rationale: str | None = None
    original_question: str = ""
    claimed_type: str = ""
    proposed_answer_text: str = ""
    predicted_answer_text: str = ""
    item_choices: list[dict] = field(default_factory=list)
    yes_no_questions: list[tuple[str, str]] = field(default_factory=list)
    shown: str = ""


@dataclass
class Page:
    state: str  # consent | qualification | step | finish | submitted | expired | returned | not_qualified
    assignment: Assignment
    step: StepView | None = None
    n_done: int = 0
    total: int = 0
    qualification: QualificationTest | None = None
    qualification_questions: list[dict] = field(default_factory=list)


def _choice_text(choices: list[dict], label: str) -> str:
    for choice in choices:
        if choice["label"] == label:
            return choice["text"]
    return label


def rationale_text(unit) -> str:
    if unit.rationale_id:
        return unit.rationale.text
    if unit.source_id and unit.source.kind == RationaleSource.Kind.GOLD:
        return unit.item.gold_rationale
    return ""


def _step_view(*, claim: AssignmentUnit, step: str, kind: str, answers: dict, number: int, total: int) -> StepView:
    shown = shown_token(claim_id=claim.pk, step=step)
    if claim.attention_check_id:
        check = claim.attention_check
        return StepView(claim=claim, step=step, number=number, total=total, question=check.question,
                        choices=normalise_choices(check.choices), is_attention=True, shown=shown)
    unit = claim.unit
    item = unit.item
    view = StepView(claim=claim, step=step, number=number, total=total, question=item.question,
                    choices=normalise_choices(item.choices), shown=shown)
    if kind == Study.Kind.UTILITY:
        if step == Step.AFTER:
            view.first_answer_text = _choice_text(view.choices, answers.get(Step.BEFORE, ""))
            view.rationale = rationale_text(unit)
    elif kind == Study.Kind.GENERALIZATION:
        genq = unit.generalization_question
        view.question = genq.text
        view.choices = genq_choices(genq, item)
        if step == Step.AFTER:
            view.first_answer_text = _choice_text(view.choices, answers.get(Step.BEFORE, ""))
            view.original_question = item.question
            view.item_choices = normalise_choices(item.choices)
            view.rationale = rationale_text(unit)
    elif kind == Study.Kind.QUESTION_VALIDATION:
        genq = unit.generalization_question
        view.question = genq.text
        view.original_question = item.question
        view.choices = genq_choices(genq, item)
        view.claimed_type = genq.get_qtype_display()
        view.proposed_answer_text = _choice_text(view.choices, genq.answer)
        view.yes_no_questions = list(VALIDATION_FIELDS)
    elif kind == Study.Kind.RATIONALE_PROPERTIES:
        view.rationale = rationale_text(unit)
        predicted = unit.rationale.predicted_answer if unit.rationale_id else item.gold_answer
        view.predicted_answer_text = _choice_text(view.choices, predicted) if predicted else ""
        view.yes_no_questions = list(RATIONALE_PROPERTIES)
    return view


def _claim_with_content(claim_id: int) -> AssignmentUnit:
    """One claim with exactly the columns a step page shows (wide JSON columns left out)."""
    return (
        AssignmentUnit.objects.select_related(
            "unit__item", "unit__rationale", "unit__source", "unit__generalization_question", "attention_check"
        )
        .only(
            "id", "assignment_id", "unit_id", "attention_check_id", "question_key", "position", "completed_at",
            "unit__id", "unit__item_id", "unit__rationale_id", "unit__source_id", "unit__generalization_question_id",
            "unit__item__id", "unit__item__question", "unit__item__choices", "unit__item__gold_answer",
            "unit__item__gold_rationale",
            "unit__rationale__id", "unit__rationale__text", "unit__rationale__predicted_answer",
            "unit__source__id", "unit__source__kind",
            "unit__generalization_question__id", "unit__generalization_question__text",
            "unit__generalization_question__answer", "unit__generalization_question__qtype",
            "unit__generalization_question__metadata",
            "attention_check__id", "attention_check__question", "attention_check__choices",
        )
        .get(pk=claim_id)
    )


def qualification_needed(*, assignment: Assignment) -> QualificationTest | None:
    """The study's test when this worker has not passed it yet."""
    test = QualificationTest.objects.filter(study_id=assignment.study_id).prefetch_related("questions").first()
    if test is None:
        return None
    if QualificationGrant.objects.filter(
        study_id=assignment.study_id, participant_id=assignment.participant_id, passed=True
    ).exists():
        return None
    return test


def assignment_page(*, assignment: Assignment, now: datetime | None = None) -> Page:
    """What the worker's page shows now, from the stored state only (so a reload resumes)."""
    now = now or timezone.now()
    status = assignment.status
    if status in (Assignment.Status.SUBMITTED, Assignment.Status.APPROVED, Assignment.Status.REJECTED):
        return Page(state="submitted", assignment=assignment)
    if status == Assignment.Status.EXPIRED or (status == Assignment.Status.ACTIVE and assignment.expires_at <= now):
        return Page(state="expired", assignment=assignment)
    if status == Assignment.Status.RETURNED:
        failed = QualificationGrant.objects.filter(
            study_id=assignment.study_id, participant_id=assignment.participant_id, passed=False
        ).exists()
        return Page(state="not_qualified" if failed else "returned", assignment=assignment)
    if assignment.consented_at is None:
        return Page(state="consent", assignment=assignment)

    # Light rows for the whole task; the full join only for the one claim the page shows.
    # One query: the claims in order, each joined with its answers so far (LEFT JOIN).
    claims: list[tuple] = []
    answered: dict[int, dict[str, str]] = {}
    rows = (
        AssignmentUnit.objects.filter(assignment_id=assignment.pk)
        .order_by("position", "annotations__id")
        .values_list("id", "completed_at", "attention_check_id", "annotations__step", "annotations__answer")
    )
    for claim_id, completed_at, check_id, step, answer in rows:
        if not claims or claims[-1][0] != claim_id:
            claims.append((claim_id, completed_at, check_id))
        if step is not None:
            answered.setdefault(claim_id, {})[step] = answer
    total = len(claims)
    n_done = sum(1 for _, completed_at, _ in claims if completed_at is not None)
    if not answered:
        test = qualification_needed(assignment=assignment)
        if test is not None:
            questions = [
                {"id": q.pk, "number": i, "question": q.question, "choices": normalise_choices(q.choices)}
                for i, q in enumerate(test.questions.all(), start=1)
            ]
            return Page(state="qualification", assignment=assignment, total=total,
                        qualification=test, qualification_questions=questions)
    kind = assignment.study.kind
    for number, (claim_id, completed_at, check_id) in enumerate(claims, start=1):
        if completed_at is not None:
            continue
        given = answered.get(claim_id, {})
        steps = steps_for(kind=kind, is_attention_check=bool(check_id))
        step = next(s for s in steps if s not in given)
        claim = _claim_with_content(claim_id)
        view = _step_view(claim=claim, step=step, kind=kind, answers=given, number=number, total=total)
        return Page(state="step", assignment=assignment, step=view, n_done=n_done, total=total)
    return Page(state="finish", assignment=assignment, n_done=n_done, total=total)


def claim_for_answer(*, assignment: Assignment, claim_id: int) -> AssignmentUnit | None:
    """The claim a POSTed answer is for, with what validation needs joined. It may belong to
    another assignment: the answer service refuses that (``ForeignClaim``)."""
    return (
        AssignmentUnit.objects.select_related("unit__item", "unit__generalization_question", "attention_check")
        .only(
            "id", "assignment_id", "unit_id", "attention_check_id", "completed_at", "released",
            "unit__id", "unit__item_id", "unit__generalization_question_id", "unit__item__id", "unit__item__choices",
            "unit__generalization_question__id", "unit__generalization_question__metadata",
            "attention_check__id", "attention_check__choices", "attention_check__correct_answer",
        )
        .filter(pk=claim_id)
        .first()
    )


def active_assignment_for(*, study_id: int, provider: str, external_id: str) -> Assignment | None:
    """The worker's active (or last submitted) assignment, to resume from an entry link."""
    return (
        Assignment.objects.filter(
            study_id=study_id, participant__provider=provider, participant__external_id=external_id,
            status=Assignment.Status.ACTIVE,
        )
        .only("token")
        .first()
    )
