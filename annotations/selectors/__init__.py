"""Reads of the questionnaire: what a worker's page may show right now.

The rule that protects every study lives here: a rationale is put into a page only once the
worker's "before" answer for that claim is stored (generalization: the original question too).
A step page reads three small precompiled queries (``annotations.precompiled``): the assignment with its
study, its claims with their first answers, and the shown claim's content."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.core import signing
from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Sum
from django.utils import timezone

from annotations import precompiled
from annotations.models import (
    Annotation,
    Assignment,
    Claim,
    Participant,
    PlatformSubmission,
    QualificationGrant,
    QualificationTest,
    Unit,
    Withdrawal,
    WorkerBlock,
)
from annotations.services.steps import (
    RATIONALE_PROPERTIES,
    VALIDATION_FIELDS,
    page_step,
    steps_for,
)
from lab.pseudonyms import withdrawal_digest, worker_pseudonym
from studies.choices import genq_choices, normalise_choices
from studies.models import RationaleSource, Study
from studies.selectors import questions_that_count

_SHOWN_SALT = "annotations.shown"
MAX_ID = 2**63 - 1  # BigAutoField
Step = Annotation.Step


# --- what counts ---------------------------------------------------------------------------------

# Assignments whose completed, unreleased claims count. Active work does not count yet; expired,
# returned and rejected work never does (its claims are released).
COUNTING_ASSIGNMENT_STATUSES = (Assignment.Status.SUBMITTED, Assignment.Status.APPROVED)

# Tasks their worker handed in (submitted, and reviewed since or not): their page is the done page,
# with the completion code and the hand-back (``assignment_page``), and a Finish sent again is
# answered with it (``services.answers.assignment_submit``), never "not saved".
DONE_STATUSES = (Assignment.Status.SUBMITTED, Assignment.Status.APPROVED, Assignment.Status.REJECTED)


# The flags of sync that hold work: the platform's worker is not the participant who answered
# (``WORKER_MISMATCH``), the platform does not list the work at all (``NOT_ON_PLATFORM``: a
# platform id invented at the entry URL), or the platform lists as submitted work whose task here
# is active, returned or expired (``NOT_SUBMITTED_HERE``: a completion code used without
# submitting here), which its auto-approval would otherwise pay unseen, or the platform lists work
# submitted here as timed out or returned (``ENDED_ON_PLATFORM``: the platform does not pay it).
HOLDING_FLAGS = (PlatformSubmission.Flag.WORKER_MISMATCH, PlatformSubmission.Flag.NOT_ON_PLATFORM,
                 PlatformSubmission.Flag.NOT_SUBMITTED_HERE, PlatformSubmission.Flag.ENDED_ON_PLATFORM)


def on_hold(assignment_ref: str = "pk") -> Exists:
    """True for an assignment (``assignment_ref`` names its id in the outer query) that sync held
    (``HOLDING_FLAGS``: answered by someone other than the platform's worker, or under a platform
    id the platform does not list) and that no researcher cleared: its work is not scored,
    approved or paid until one decides."""
    return Exists(PlatformSubmission.objects.filter(
        assignment_id=OuterRef(assignment_ref), flag__in=HOLDING_FLAGS, cleared_at__isnull=True))


def claims_that_count(*, study: Study) -> QuerySet[Claim]:
    """The one definition of "this answer counts". A claim counts when it is

    - a claim of a unit (not an attention check),
    - not released (its slot was not given back: expiry, return, rejection),
    - completed (every step of its question answered), and
    - part of an assignment that is submitted or approved (not active, expired, returned or
      rejected), and
    - not on hold (``on_hold``: sync found the platform's worker is not the participant who
      answered, or found the work unknown to the platform, and no researcher has cleared it yet).

    The answers that count are the annotations of these claims. Scoring, the exports, the progress
    counts and the unit counters read this (scoring of a generalization study also leaves out the
    answers to questions marked invalid since: ``claim_scored``, which the exports read) (``Unit.n_completed`` is, per unit, the number of these
    claims, work on hold left out as everywhere else; ``annotations.services.release`` keeps it so;
    work on hold still holds its slot, ``n_claimed``, until the researcher clears or rejects it)."""
    return claims_that_count_in_any_study().filter(study_id=study.pk)


def claims_that_count_in_any_study() -> QuerySet[Claim]:
    """``claims_that_count`` across studies, for counts read on many studies at once (the unit
    counters ``annotations.services.release`` keeps)."""
    return Claim.objects.filter(claim_counts())


def claim_counts(path: str = "") -> Q:
    """The rule of ``claims_that_count`` as a condition on a claim that ``path`` leads to from the
    queried model (``""`` on ``Claim`` itself, ``"claim__"`` from an ``Annotation``): the definition
    lives here and only here. The export reads it on the claim its answers are already joined to,
    rather than looking each claim up again in a subquery."""
    return Q(**{
        f"{path}unit__isnull": False,
        f"{path}released": False,
        f"{path}completed_at__isnull": False,
        f"{path}assignment__status__in": COUNTING_ASSIGNMENT_STATUSES,
    }) & ~on_hold(f"{path}assignment_id")


# The study kinds whose scoring reads only the answers to generalization questions that count now
# (``studies.selectors.QUESTION_RULE``, Gen-U's rule: ``scoring.services.score._generalization``).
# A question-validation study's units name generalization questions too, but it is there to judge
# them: its answers to a question marked invalid are read as any other.
QUESTION_RULE_KINDS = (Study.Kind.GENERALIZATION,)


def claim_scored(path: str = "", *, study: Study | None = None) -> Q:
    """The one definition of "an answer scoring reads", as a condition on a claim that ``path`` leads
    to (``""`` on ``Claim``, ``"claim__"`` from an ``Annotation``): ``claim_counts`` and, in a study of
    ``QUESTION_RULE_KINDS`` (a generalization study), a unit whose generalization question counts now
    (``studies.selectors.questions_that_count``: not marked invalid). An answer that counts to a
    question marked invalid is still paid for and still fills its unit (``claim_counts`` is that
    rule); scoring leaves it out and says how many (``answers_invalid_left_out``). The export's
    ``counts`` column, the API's ``counts`` of an answer and a study's ``n_annotations`` read this.

    ``study``: the one study every queried claim belongs to, when the caller knows it: its kind is
    then read here rather than joined on every row."""
    question = questions_that_count(f"{path}unit__generalization_question__")
    if study is None:
        kind_rule = ~Q(**{f"{path}study__kind__in": QUESTION_RULE_KINDS}) | question
    elif study.kind in QUESTION_RULE_KINDS:
        kind_rule = question
    else:
        return claim_counts(path)
    return claim_counts(path) & kind_rule


def assignment_by_token(token: str) -> Assignment | None:
    """``Assignment.objects.select_related("study").filter(token=token).first()``, precompiled."""
    if not token or len(token) > 64:
        return None
    return precompiled.ASSIGNMENT_BY_TOKEN.first(token)


# --- server-side timing -------------------------------------------------------------------------

def shown_token(*, claim_id: int, step: str, at: datetime | None = None) -> str:
    """A signed record of when the server showed this step (the page carries it back). Its payload
    (readable: signed, not encrypted) is ``[claim id, time]``; the step is bound by the signature
    alone (its salt), never written in it, so the token of an attention check (step ``attention``)
    reads as a question's first step does, and is still refused for any other claim or step."""
    at = at or timezone.now()
    return signing.dumps([claim_id, at.timestamp()], salt=_shown_salt(step), compress=False)


def _shown_salt(step: str) -> str:
    return f"{_SHOWN_SALT}:{step}"


def shown_at_from_token(token: str, *, claim_id: int, step: str) -> datetime | None:
    """When the page showed ``step`` of the claim, from its ``shown_token``; None for a token
    altered, too old, or made for another claim or step (its signature does not match)."""
    try:
        c, ts = signing.loads(token, salt=_shown_salt(step), max_age=7 * 24 * 3600)
    except (signing.BadSignature, ValueError, TypeError):
        return None
    if c != claim_id:
        return None
    return datetime.fromtimestamp(ts, tz=UTC)


# --- pages --------------------------------------------------------------------------------------

@dataclass
class StepView:
    claim: Claim
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
    # The step the page names (its form's ``step``, the heading it shows): ``step`` itself, but an
    # attention check's is its study's first step (``steps.page_step``), as a question's first is.
    form_step: str = ""


@dataclass
class Page:
    # consent | qualification | step | finish | submitted | expired | returned | ended_by_researcher
    # | not_qualified
    state: str
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


def step_view(*, claim: Claim, step: str, kind: str, answers: dict, number: int, total: int,
              current_since: datetime | None = None) -> StepView:
    """The page of ``step`` of the claim. ``current_since``: when the step became the one the task
    asks (``step_current_since``); its ``shown`` token carries that time rather than now, so a reload
    does not restart the question's clock (None: now, for a step whose start is not read here)."""
    now = timezone.now()
    shown = shown_token(claim_id=claim.pk, step=step,
                        at=now if current_since is None else min(current_since, now))
    if claim.attention_check_id:  # shown as its study's first step (``page_step``), told apart by nothing
        check = claim.attention_check
        return StepView(claim=claim, step=step, number=number, total=total, question=check.question,
                        choices=normalise_choices(check.choices), is_attention=True, shown=shown,
                        form_step=page_step(kind=kind, step=step))
    unit = claim.unit
    item = unit.item
    view = StepView(claim=claim, step=step, number=number, total=total, question=item.question,
                    choices=normalise_choices(item.choices), shown=shown, form_step=step)
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
        view.item_choices = normalise_choices(item.choices)
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


def _claim_with_content(claim_id: int, *, is_attention_check: bool) -> Claim:
    """One claim with exactly the columns a step page shows (wide JSON columns left out)."""
    claim = (precompiled.CLAIM_WITH_CHECK if is_attention_check else precompiled.CLAIM_WITH_UNIT).first(claim_id)
    if claim is None:
        raise Claim.DoesNotExist(f"No claim {claim_id}.")
    unit = claim.unit if claim.unit_id else None
    if unit is not None and unit.generalization_question_id:
        Unit.generalization_question.field.set_cached_value(
            unit, precompiled.GENERALIZATION_QUESTION.first(unit.generalization_question_id)
        )
    return claim


@dataclass
class TaskClaims:
    """A task's claims in order, as ``(id, completed_at, attention check id)``, and the answers so
    far of the claims not completed, by claim and step (``task_claims``). A claim that is not
    completed has at most its first step answered: its last step completes it, in the same
    transaction (``services.answers.annotation_submit``), and no kind has more than two steps.
    ``answered_at``: when that first step was answered (its ``answered_at``), by claim: the moment
    the claim's later step became current (``step_current_since``)."""

    rows: list[tuple[int, datetime | None, int | None]]
    answered: dict[int, dict[str, str]]
    answered_at: dict[int, datetime] = field(default_factory=dict)

    def stored_steps(self, claim_id: int, steps: tuple[str, ...]) -> tuple[str, ...]:
        """The steps of ``steps`` (the claim's own) that have an answer stored."""
        for pk, completed_at, _check_id in self.rows:
            if pk == claim_id:
                return steps if completed_at is not None else tuple(s for s in steps if s in self.answered.get(pk, {}))
        return ()

    def record(self, *, claim_id: int, step: str, answer: str, answered_at: datetime,
               completed_at: datetime | None) -> None:
        """What an answer just stored changes (``answered_at``: the stored answer's, so the page sent
        with it shows its later step from the time a reload reads; ``completed_at``: its claim's, set
        by a last step)."""
        if completed_at is None:
            self.answered.setdefault(claim_id, {})[step] = answer
            self.answered_at[claim_id] = answered_at
            return
        self.answered.pop(claim_id, None)
        self.answered_at.pop(claim_id, None)
        self.rows = [(pk, completed_at if pk == claim_id else done, check_id) for pk, done, check_id in self.rows]


def task_claims(assignment_id: int) -> TaskClaims:
    """The task's claims and their first answers (``TaskClaims``). One query: each claim's row
    carries its ``before`` answer and that answer's time (index lookups per claim; a join of the two
    tables is planned as a scan of every answer when the planner's statistics are stale)."""
    rows = precompiled.CLAIMS_OF_ASSIGNMENT.values("id", "completed_at", "attention_check_id", "before_answer",
                                                   "before_answered_at", value=assignment_id)
    claims = [(claim_id, completed_at, check_id) for claim_id, completed_at, check_id, _before, _at in rows]
    open_answered = [(claim_id, before, at) for claim_id, completed_at, _check_id, before, at in rows
                     if before is not None and completed_at is None]
    return TaskClaims(claims, {claim_id: {Step.BEFORE: before} for claim_id, before, _at in open_answered},
                      {claim_id: at for claim_id, _before, at in open_answered})


def step_current_since(*, assignment: Assignment, task: TaskClaims, claim_id: int) -> datetime | None:
    """When the step the claim's page asks (the task's first claim not completed) became current,
    the time its ``shown`` token carries on every display (``step_view``), so that a reload (a phone
    restoring a tab) does not restart the answer's ``duration_ms``. For its later step (the
    explanation's), the moment its first step was answered (``TaskClaims.answered_at``: read with
    the claims, or recorded by the answer whose reply sends the page). For its first step, the
    moment the claim before it was completed (its last answer stored, the next page sent with it or
    right after), or, for the task's first, the consent or, later, the qualification test passed.
    No query but for the task's first question while nothing is answered (the worker's grant: the
    test's pages come between the consent and the first question; a task still marked to wait for
    the test, whose page read the test instead, was not let in by a pass of its own)."""
    if task.answered.get(claim_id):
        return task.answered_at.get(claim_id)
    done = [completed_at for _pk, completed_at, _check in task.rows if completed_at is not None]
    if done:
        return max(done)
    if assignment.consented_at is None or assignment.qualification_pending:
        return assignment.consented_at
    passed_at = (QualificationGrant.objects.filter(study_id=assignment.study_id,
                                                   participant_id=assignment.participant_id, passed=True)
                 .values_list("created_at", flat=True).first())
    return max(assignment.consented_at, passed_at) if passed_at is not None else assignment.consented_at


def qualification_needed(*, assignment: Assignment) -> QualificationTest | None:
    """The study's test when this worker has not passed it yet."""
    if precompiled.QUALIFICATION_TEST_OF_STUDY.first(assignment.study_id) is None:  # most studies have none: one cheap query
        return None
    test = QualificationTest.objects.filter(study_id=assignment.study_id).prefetch_related("questions").first()
    if test is None:
        return None
    if QualificationGrant.objects.filter(
        study_id=assignment.study_id, participant_id=assignment.participant_id, passed=True
    ).exists():
        return None
    return test


def qualification_page_questions(test: QualificationTest) -> list[dict]:
    """The questions of ``test`` as its page (``qualification.html``) shows them, in order: ``{"id",
    "number", "question", "choices"}``. The worker's page and the researcher's preview both show
    these (``views.preview``). No query when the questions are prefetched."""
    return [{"id": q.pk, "number": i, "question": q.question, "choices": normalise_choices(q.choices)}
            for i, q in enumerate(test.questions.all(), start=1)]


def assignment_page(*, assignment: Assignment, now: datetime | None = None, claims: TaskClaims | None = None) -> Page:
    """What the worker's page shows now, from the stored state only (so a reload resumes).
    ``claims``: the task's claims as an answer just left them, read under the task's row lock
    (``services.answers.annotation_submit_with_task``); read here when not given."""
    now = now or timezone.now()
    status = assignment.status
    if status in DONE_STATUSES:
        return Page(state="submitted", assignment=assignment)
    if status == Assignment.Status.EXPIRED or (status == Assignment.Status.ACTIVE and assignment.expires_at <= now):
        return Page(state="expired", assignment=assignment)
    if status == Assignment.Status.RETURNED:
        if assignment.ended_by_researcher:  # a block ended it: the worker did not leave it
            return Page(state="ended_by_researcher", assignment=assignment)
        # Failed in this very task: the grant's attempt, or one set aside since (``voids``: another
        # browser took the test again), which stays true of this task whatever the retake gives.
        grant = (QualificationGrant.objects.filter(study_id=assignment.study_id,
                                                   participant_id=assignment.participant_id)
                 .only("passed", "assignment_id", "voids").first())
        failed = grant is not None and grant.failed_in(assignment.pk)
        return Page(state="not_qualified" if failed else "returned", assignment=assignment)
    if assignment.consented_at is None:
        return Page(state="consent", assignment=assignment)

    # Light rows for the whole task; the full join only for the one claim the page shows.
    task = task_claims(assignment.pk) if claims is None else claims
    claims, answered = task.rows, task.answered
    total = len(claims)
    n_done = sum(1 for _, completed_at, _ in claims if completed_at is not None)
    # The test stands before a task marked to wait for it (``qualification_pending``: started while
    # the study had one, or not yet consented to when one was added); a task consented to before
    # the test existed goes on as its worker was told (``services.qualification.qualification_tasks_hold``).
    if assignment.qualification_pending and not answered and not n_done:
        test = qualification_needed(assignment=assignment)
        if test is not None:
            return Page(state="qualification", assignment=assignment, total=total,
                        qualification=test, qualification_questions=qualification_page_questions(test))
    kind = assignment.study.kind
    for number, (claim_id, completed_at, check_id) in enumerate(claims, start=1):
        if completed_at is not None:
            continue
        given = answered.get(claim_id, {})
        steps = steps_for(kind=kind, is_attention_check=bool(check_id))
        step = next(s for s in steps if s not in given)
        claim = _claim_with_content(claim_id, is_attention_check=bool(check_id))
        view = step_view(claim=claim, step=step, kind=kind, answers=given, number=number, total=total,
                         current_since=step_current_since(assignment=assignment, task=task, claim_id=claim_id))
        return Page(state="step", assignment=assignment, step=view, n_done=n_done, total=total)
    return Page(state="finish", assignment=assignment, n_done=n_done, total=total)


def claim_for_answer(*, token: str, claim_id: int) -> tuple[Assignment | None, Claim | None]:
    """The assignment of ``token`` (as ``assignment_by_token``) and the claim a POSTed answer is
    for, with what validation needs joined. One query when the claim is the assignment's own
    (the usual case); the claim may belong to another assignment: the answer service refuses
    that (``ForeignClaim``)."""
    # An id out of the column's range matches nothing, as in the ORM.
    claim = precompiled.CLAIM_FOR_ANSWER.first(claim_id) if 0 < claim_id <= MAX_ID else None
    if claim is not None and claim.attention_check_id:
        Claim.attention_check.field.set_cached_value(
            claim, precompiled.CHECK_FOR_ANSWER.first(claim.attention_check_id)
        )
    elif claim is not None and claim.unit.generalization_question_id:
        Unit.generalization_question.field.set_cached_value(
            claim.unit, precompiled.GENERALIZATION_QUESTION_FOR_ANSWER.first(claim.unit.generalization_question_id)
        )
    if claim is not None and token and claim.assignment.token == token:
        return claim.assignment, claim
    return assignment_by_token(token), claim


# --- blocks --------------------------------------------------------------------------------------
def blocks_covering(*, study: Study, owner_id: int | None = None) -> QuerySet[WorkerBlock]:
    """The blocks that refuse workers in ``study``: made on it, made by its owner (a
    researcher's block covers the studies they own), or everywhere (a superuser's). The same rule
    read from a block: ``studies_covered_by``. ``owner_id``: the owner read from the study's row
    later than ``study`` was (a start's locked read: ``assignment._qualification_pending``); None:
    ``study.owner_id``."""
    owner_id = study.owner_id if owner_id is None else owner_id
    covers = Q(study_id=study.pk) | Q(everywhere=True)
    if owner_id is not None:
        covers |= Q(researcher_id=owner_id)
    return WorkerBlock.objects.filter(covers)


def worker_blocked_in(*, study: Study, participant_ref: str = "participant_id") -> Q:
    """Whether a row's worker (``participant_ref`` names their id in the outer query) is blocked in
    ``study``, as a condition: blocked everywhere (``Participant.blocked``) or by a block that covers
    it (``blocks_covering``), the rule ``participant_blocked`` reads of one worker, withdrawals aside
    (a withdrawal erases the worker's answers). Scoring reads it of the counted tasks: a block ends
    the worker's tasks in progress, not their submitted or approved work, which counts until rejected."""
    covered = blocks_covering(study=study).filter(participant_id=OuterRef(participant_ref))
    return Q(Exists(Participant.objects.filter(pk=OuterRef(participant_ref), blocked=True))) | Q(Exists(covered))


def studies_covered_by(block: WorkerBlock) -> Q:
    """The rule of ``blocks_covering`` read the other way, as a condition on a row's ``study``: the
    studies ``block`` covers (its study, the studies its researcher owns, or every study)."""
    if block.everywhere:
        return Q()
    covered = Q(study_id=block.study_id)
    if block.researcher_id is not None:
        covered |= Q(study__owner_id=block.researcher_id)
    return covered


def participant_blocked(*, participant, study: Study, lock: bool = False) -> bool:
    """Whether ``participant`` is blocked in ``study`` (``blocks_covering``), or withdrew from it
    (``participant_withdrawn``): a withdrawn participant is given no task there again.

    ``lock``: read it under a lock of the worker's row, for a start that creates a task (call first
    in its transaction: ``assignment.assignment_start``). The row is locked ``FOR NO KEY UPDATE``
    (PostgreSQL; SQLite serialises writes) until that transaction ends, which conflicts with the
    ``FOR UPDATE`` a withdrawal (``withdrawal.participant_withdraw``) takes on it before it erases
    the worker's tasks: a withdrawal that locked first makes the start wait, and its ``Withdrawal``
    is then read by a statement of its own, begun after the lock (a statement reads what was
    committed when it began, so the locking one would not see it): the start is refused. One that
    comes after waits for the start's task and erases it. The lock does not wait for the worker's
    tasks being written (their foreign keys take ``FOR KEY SHARE``), only for another start or
    change of the same worker's row; a row gone counts as blocked. A block (``platforms.blocks``)
    locks the same row before it writes, so it and a start cannot cross in either order: the
    locking statement reads only the row's own ``blocked`` (its latest version, once the lock is
    had), and the study's blocks and withdrawals are read by the next statement, begun after the
    lock, which sees a block or withdrawal that committed while the start waited. Two statements
    either way. The owner whose blocks count is ``study.owner_id`` as the caller read it: a start
    reads it again under its lock of the study's row (``assignment._qualification_pending``) and
    is refused there when a handover made the study another owner's, whose blocks cover it."""
    if lock:
        blocked = (Participant.objects.select_for_update(no_key=True).filter(pk=participant.pk)
                   .values_list("blocked", flat=True).first())
        if blocked is None or blocked:
            return True
        digest = participant_withdrawal_digest(platform=participant.platform, external_id=participant.external_id,
                                               study=study)
        flags = (Participant.objects.filter(pk=participant.pk).annotate(
            covered=Exists(blocks_covering(study=study).filter(participant_id=OuterRef("pk"))),
            withdrawn=Exists(Withdrawal.objects.filter(study_id=study.pk, digest=digest)))
            .values_list("covered", "withdrawn").first())
        return flags is None or any(flags)
    if participant.blocked or blocks_covering(study=study).filter(participant_id=participant.pk).exists():
        return True
    return participant_withdrawn(participant=participant, study=study)


# --- withdrawals -----------------------------------------------------------------------------------
def participant_withdrawal_digest(*, platform: str, external_id: str, study: Study | int) -> str:
    """The digest a withdrawal of this worker from ``study`` is recorded under
    (``lab.pseudonyms.withdrawal_digest`` of their pseudonym)."""
    study_id = study if isinstance(study, int) else study.pk
    return withdrawal_digest(study_id, worker_pseudonym(platform, external_id))


def study_withdrawal_digests(*, study: Study) -> set[str]:
    """The digests of every participant withdrawn from ``study``."""
    return set(Withdrawal.objects.filter(study_id=study.pk).values_list("digest", flat=True))


def participant_withdrawn(*, participant, study: Study) -> bool:
    """Whether ``participant`` withdrew from ``study`` (a ``Withdrawal`` under their digest)."""
    return worker_withdrawn(platform=participant.platform, external_id=participant.external_id, study=study)


def worker_withdrawn(*, platform: str, external_id: str, study: Study) -> bool:
    """Whether the worker ``external_id`` of ``platform`` withdrew from ``study``, participant here
    or known only from the platform's rows (a ``Withdrawal`` under their digest)."""
    digest = participant_withdrawal_digest(platform=platform, external_id=external_id, study=study)
    return Withdrawal.objects.filter(study_id=study.pk, digest=digest).exists()


@dataclass
class WithdrawalSummary:
    """How many participants withdrew from a study and how many answers were erased with them
    (of those, how many had counted): what the score run reports."""

    participants: int = 0
    answers: int = 0
    counted_answers: int = 0

    def as_dict(self) -> dict:
        return {"participants": self.participants, "answers": self.answers, "counted_answers": self.counted_answers}

    @property
    def note(self) -> str:
        if not self.participants:
            return ""
        return (f"{self.participants} participant(s) withdrew from this study: their {self.answers} answer(s) "
                f"({self.counted_answers} of which had counted) were erased and are not in these results.")


def study_withdrawals_summary(*, study: Study, since: datetime | None = None) -> WithdrawalSummary:
    """The withdrawals of ``study`` in numbers (``WithdrawalSummary``), or only those recorded after
    ``since`` (a score run's end: what it did not see)."""
    withdrawals = Withdrawal.objects.filter(study_id=study.pk)
    if since is not None:
        withdrawals = withdrawals.filter(withdrawn_at__gt=since)
    totals = withdrawals.aggregate(
        participants=Count("id"), answers=Sum("n_answers"), counted=Sum("n_counted_answers"))
    return WithdrawalSummary(participants=totals["participants"] or 0, answers=totals["answers"] or 0,
                             counted_answers=totals["counted"] or 0)
