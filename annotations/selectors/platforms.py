"""Reads of the crowd-platform part: what a study costs and pays, bonus candidates, and the
overview the researcher's publish page shows."""
from __future__ import annotations

import json
from dataclasses import dataclass

from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Sum, Value
from django.db.models.functions import Concat

from annotations.models import (
    Annotation,
    Assignment,
    Bonus,
    FlagReview,
    ParticipantLink,
    PlatformCall,
    PlatformSubmission,
    Publication,
)
from annotations.platforms.base import money
from annotations.selectors import COUNTING_ASSIGNMENT_STATUSES, DONE_STATUSES, on_hold
from lab.pseudonyms import worker_pseudonym
from studies.models import Platform, Study

# Where a publication's external ids name the platform's own task: an MTurk HIT, a Prolific study.
TASK_ID_KEY = {Platform.MTURK: "hit_id", Platform.PROLIFIC: "study_id"}


def study_platform_task_ids(*, study: Study, platform: str) -> set[str]:
    """The platform's task ids (MTurk HIT ids, Prolific study ids) ``study`` was published as on
    ``platform`` (dry runs aside): the only ones whose work is this study's, so the only ones a
    worker may enter it with (``annotations.platforms.handoff.arrival_parse``) and money may move
    for (``annotations.services.platforms.common.platform_work_confirm``). One read, by the
    index of the study's publications."""
    key = TASK_ID_KEY.get(platform)
    ids: set[str] = set()
    if key is None:
        return ids
    for external_ids in Publication.objects.filter(
        study_id=study.pk, platform=platform, dry_run=False
    ).order_by().values_list("external_ids", flat=True):
        ids.update(str(entry[key]) for entry in external_ids or [] if entry.get(key))
    return ids


def study_prolific_study_ids(*, study: Study) -> set[str]:
    """The Prolific study ids ``study`` was published as (dry runs aside): a worker's
    ``STUDY_ID`` must be one of them, as a worker's MTurk ``hitId`` must be one of its HITs
    (``study_platform_task_ids``, which ``annotations.platforms.handoff.arrival_parse`` asks)."""
    return study_platform_task_ids(study=study, platform=Platform.PROLIFIC)


def publication_unlisted_work(*, study: Study, publication: Publication, listed: set[str],
                              started_before) -> list[Assignment]:
    """The submitted or approved tasks of ``study`` answered under one of ``publication``'s
    platform tasks (``TASK_ID_KEY``: a Prolific study) with a platform assignment id (a Prolific
    session) that is not in ``listed``, the ids the platform's complete listing of the
    publication just gave, and started here before ``started_before``: work the platform does
    not know, as a platform id invented at the entry URL gives. One read; ``listed`` is
    subtracted here, not sent to the database."""
    key = TASK_ID_KEY.get(publication.platform)
    task_ids = {str(entry[key]) for entry in publication.external_ids or [] if key and entry.get(key)}
    if not task_ids:
        return []
    tasks = (Assignment.objects.filter(study=study, platform_task_id__in=task_ids,
                                       status__in=COUNTING_ASSIGNMENT_STATUSES, created_at__lt=started_before)
             .exclude(platform_assignment_id="").select_related("participant").order_by("id"))
    return [task for task in tasks if task.platform_assignment_id not in listed]


def review_key(name: str, operation: str, assignment: Assignment) -> str:
    """The idempotency key of the approval or rejection (``operation``) of ``assignment``'s work on
    platform ``name``: one per platform assignment, whoever sends it (``review_sent`` reads it in
    the database)."""
    return f"{name}:{operation}:{assignment.platform_assignment_id}"


def review_sent(operation: str) -> Exists:
    """For a query of ``Assignment``: whether the approval or rejection (``operation``) of the task's
    platform work was sent from here, its call (``review_key``, on the platform of the task's
    participant) sent or confirmed: decided, or its outcome not known yet."""
    return Exists(PlatformCall.objects.filter(
        idempotency_key=Concat(OuterRef("participant__platform"), Value(f":{operation}:"),
                               OuterRef("platform_assignment_id")),
        status__in=[PlatformCall.Status.SENT, PlatformCall.Status.CONFIRMED]))


# Each review decision and the contrary one it waits on (``contrary_sent``).
CONTRARY_DECISION = {PlatformCall.Operation.APPROVE: PlatformCall.Operation.REJECT,
                     PlatformCall.Operation.REJECT: PlatformCall.Operation.APPROVE}


def contrary_sent(operation: str) -> Exists:
    """For a query of ``Assignment``: whether the decision contrary to ``operation`` (an approval's
    rejection, a rejection's approval: ``CONTRARY_DECISION``) on the task's platform work was sent
    from here and is not settled as not applied (``review_sent``: its answer lost, or confirmed and
    not taken over here yet). The one rule by which a decision waits on the contrary one:
    ``services.platforms.review._contrary_refusal`` refuses to send it, under the task's row lock;
    the publish page's "Approve all" lists and prices only the tasks it would not refuse
    (``study_approve_all_tasks``); and a bonus, which pays as an approval does, waits on a rejection
    the same way (``assignments_bonusable``)."""
    return review_sent(CONTRARY_DECISION[operation])


def ended_on_platform_cleared(*, study: Study) -> dict[int, str]:
    """The tasks of ``study`` whose platform session sync found timed out or returned
    (``ENDED_ON_PLATFORM``) and a researcher cleared since, each with its platform: the platform pays
    nothing for them and may refuse an approval, so "Approve all" never approves them
    (``services.platforms.review.study_approve_all`` refuses them, and ``study_approve_all_tasks``
    lists them apart: one rule). Held (not cleared) they are refused as on hold. One query."""
    return dict(PlatformSubmission.objects.filter(
        publication__study=study, publication__dry_run=False, assignment__isnull=False,
        platform_assignment_id=F("assignment__platform_assignment_id"),
        flag=PlatformSubmission.Flag.ENDED_ON_PLATFORM, cleared_at__isnull=False,
    ).values_list("assignment_id", "publication__platform"))


@dataclass(frozen=True)
class ApproveAllTasks:
    """What the publish page's "Approve all" lists, prices and carries (``study_approve_all_tasks``):
    ``ids``, the submitted tasks it acts on (the click approves those still among them); ``held``,
    how many of them sync holds (``assignments_on_hold``: the click refuses and names them, so they
    are not priced); ``rejecting``, the submitted tasks left out because a rejection of their work
    was sent and its outcome is not recorded here (``contrary_sent``: an approval would be refused),
    shown apart so that nothing is hidden; ``ended``, the submitted tasks left out because their
    platform session ended there and a researcher cleared that hold (``ended_on_platform_cleared``:
    the click refuses them, so they are neither counted nor priced), shown apart too."""

    ids: list[int]
    held: int
    rejecting: list[int]
    ended: list[int]

    @property
    def payable(self) -> int:
        """How many tasks the click pays: those listed and not on hold (what the page prices)."""
        return len(self.ids) - self.held


def study_approve_all_tasks(*, study: Study) -> ApproveAllTasks:
    """The one reading of what "Approve all" lists and prices on the publish page and what its
    click takes as still waiting (``admin.platforms._approve_all``): the submitted tasks of
    ``study`` by id, less those a rejection of which was sent and is not settled
    (``contrary_sent(APPROVE)``, the rule the approval itself refuses them by: its answer lost, or
    confirmed and not taken over yet; the next sync settles them), which are listed apart; with how
    many listed are on hold (``on_hold``); and less those whose platform session ended there and
    whose hold was cleared (``ended_on_platform_cleared``, which the click refuses), listed apart
    too. Two queries."""
    rows = (Assignment.objects.filter(study=study, status=Assignment.Status.SUBMITTED)
            .annotate(rejecting=contrary_sent(PlatformCall.Operation.APPROVE), held=on_hold("pk"))
            .order_by("id").values_list("id", "rejecting", "held"))
    ended_there = ended_on_platform_cleared(study=study)
    ids, held, rejecting, ended = [], 0, [], []
    for pk, is_rejecting, is_held in rows:
        if is_rejecting:
            rejecting.append(pk)
        elif pk in ended_there and not is_held:
            ended.append(pk)
        else:
            ids.append(pk)
            held += int(is_held)
    return ApproveAllTasks(ids=ids, held=held, rejecting=rejecting, ended=ended)


# The task statuses a bonus goes to: submitted or approved work (``assignments_bonusable``).
BONUS_STATUSES = (Assignment.Status.SUBMITTED, Assignment.Status.APPROVED)


def assignments_bonusable(*, study: Study | None = None) -> QuerySet[Assignment]:
    """The tasks a bonus may go to: the one rule of the publish page's candidates
    (``study_bonus_candidates``), of the payment (``services.platforms.bonus._pay``, read again under
    the task's row lock) and of what a withdrawal waits for (``services.withdrawal``). A task in
    ``BONUS_STATUSES`` whose work no rejection was sent for (``contrary_sent``, as an approval waits
    on one: a rejection on its way, not recorded on the task yet, refuses it too, and the publish
    page's "Approve all" leaves the same tasks out). A hold (``assignments_on_hold``) is checked
    apart: held work is paid once a researcher clears it."""
    tasks = Assignment.objects.filter(status__in=BONUS_STATUSES).filter(~contrary_sent(PlatformCall.Operation.APPROVE))
    return tasks.filter(study=study) if study is not None else tasks


def assignments_bonus_offered(*, study: Study) -> QuerySet[Assignment]:
    """The tasks a page offers a bonus for: those a bonus may go to (``assignments_bonusable``) and
    not on hold (``assignments_on_hold``), so the publish page's candidates and a worker's page offer
    only what ``bonus_pay`` pays."""
    return assignments_bonusable(study=study).exclude(pk__in=assignments_on_hold(study=study).values("pk"))


def assignments_on_hold(*, study: Study | None = None) -> QuerySet[Assignment]:
    """Assignments that sync held (``annotations.selectors.on_hold``: the platform's worker id
    differs from the local participant's, or the platform does not list the work) and that no
    researcher cleared: they are not scored, approved or paid until one decides."""
    held = Assignment.objects.filter(on_hold("pk"))
    return held.filter(study=study) if study is not None else held


@dataclass(frozen=True)
class GoodWorkMeasure:
    """What good work is in one study kind (``study_bonus_candidates``): the step whose answer is
    held against a right answer (the item's gold answer, or a generalization question's own), or,
    for a kind whose answers have no right answer, no step and the reason the publish page shows
    in place of a list of candidates."""

    scored_step: str | None
    not_judged: str = ""


# Each study kind's good-work measure. A question-validation answer is a verdict on a question
# ("valid"/"invalid" and its fields) and a rationale-properties answer is a set of marks on an
# explanation: neither has a right answer, so neither is scored (never as 0% correct). A measure
# for them (agreement with the other annotators, say) is a decision for the SPEC, not made here.
GOOD_WORK_MEASURES: dict[str, GoodWorkMeasure] = {
    Study.Kind.UTILITY: GoodWorkMeasure(scored_step=Annotation.Step.AFTER),
    Study.Kind.GENERALIZATION: GoodWorkMeasure(scored_step=Annotation.Step.AFTER),
    Study.Kind.QUESTION_VALIDATION: GoodWorkMeasure(
        scored_step=None,
        not_judged="question-validation answers are verdicts on a question and have no right answer; "
                   "good work is not judged for this kind"),
    Study.Kind.RATIONALE_PROPERTIES: GoodWorkMeasure(
        scored_step=None,
        not_judged="rationale-properties answers are marks on an explanation and have no right answer; "
                   "good work is not judged for this kind"),
}


def study_good_work_not_judged(*, study: Study) -> str:
    """Why ``study``'s kind has no good-work candidates at all (``GOOD_WORK_MEASURES``), or "" for
    a kind whose answers are scored: the publish page shows it in place of the list."""
    return GOOD_WORK_MEASURES[study.kind].not_judged


def study_bonus_candidates(*, study: Study, min_accuracy: float = 0.8) -> dict[str, list[int]]:
    """Assignment ids that earn the SPEC's bonuses: ``flagged_error`` (a flag the worker raised on
    a question or explanation and a researcher accepted: ``annotations.services.flags``; a flag
    alone earns nothing) and ``good_work`` (its worker failed no attention check in the study, and
    the final answers match the right answer at least ``min_accuracy`` of the time). The checks are
    the worker's, not the task's: each check is asked once per worker
    (``annotations.services.assignment``), so a check answered wrong in any of their tasks of the
    study, returned, expired or rejected included, rules out every task of theirs, and a task with
    no check of its own is judged by the ones its worker answered elsewhere. What a final answer is
    and what it is held against is the study kind's ``GOOD_WORK_MEASURES``: a kind with no right
    answer (question validation, rationale properties) has no good-work candidates, and
    ``study_good_work_not_judged`` says why. Only work a bonus may go to (``assignments_bonusable``:
    submitted or approved, no rejection of it sent) is a candidate, and work held by sync and not
    cleared (``assignments_on_hold``) is none. One read of the answers, whatever the number of
    tasks."""
    done = assignments_bonusable(study=study)
    measure = GOOD_WORK_MEASURES[study.kind]
    flagged = set(FlagReview.objects.filter(annotation__claim__assignment__in=done,
                                            decision=FlagReview.Decision.ACCEPTED)
                  .values_list("annotation__claim__assignment", flat=True))
    held = set(assignments_on_hold(study=study).values_list("pk", flat=True))
    flagged -= held
    if measure.scored_step is None:
        return {"flagged_error": sorted(flagged), "good_work": []}
    good = []
    stats: dict[int, dict[str, int]] = {}
    # A task's worker is never a candidate when they failed a check in any of their tasks of the
    # study: the submitted and approved tasks' answers, and every attention answer of the study.
    failed_workers: set[int] = set()
    rows = Annotation.objects.filter(
        Q(claim__assignment__in=done) | Q(claim__study_id=study.pk, step=Annotation.Step.ATTENTION)
    ).values_list("claim__assignment", "claim__assignment__participant_id", "step", "answer", "payload",
                  "claim__unit__item__gold_answer", "claim__unit__generalization_question__answer").order_by()
    worker_of: dict[int, int] = {}
    for assignment_id, participant_id, step, answer, payload, gold, genq_answer in rows:
        if step == Annotation.Step.ATTENTION:  # any task's: a wrong one rules out all of the worker's
            if not (payload or {}).get("correct"):
                failed_workers.add(participant_id)
            continue
        # Every other row is a submitted or approved task's.
        worker_of[assignment_id] = participant_id
        entry = stats.setdefault(assignment_id, {"answers": 0, "correct": 0})
        if step == measure.scored_step and (genq_answer or gold):
            entry["answers"] += 1
            entry["correct"] += int(answer == (genq_answer or gold))
    for assignment_id, entry in sorted(stats.items()):
        if assignment_id in held or worker_of[assignment_id] in failed_workers:
            continue
        if entry["answers"] and entry["correct"] / entry["answers"] >= min_accuracy:
            good.append(assignment_id)
    return {"flagged_error": sorted(flagged), "good_work": good}


# What a confirmed platform call's amount is, for the publish page's totals
# (``study_platform_overview``). Committing calls put money aside on the platform when the study
# is published: a Prolific study's publication takes the rewards of all its places with the fee from
# the workspace balance, an MTurk HIT (and assignments added to it) is priced at its rewards with the
# fee. Payout calls are what workers were paid: an approved task's reward, a bonus (each without the
# fee). Approved rewards come out of what was committed (bonuses are paid on top of it), so the two
# are never added up. Every other
# operation (create a draft, set up a bonus, reject, block, expire, stop, notify, qualify) records
# no amount.
_OP = PlatformCall.Operation
COMMITTING_OPERATIONS = frozenset({_OP.CREATE_HIT, _OP.ADD_ASSIGNMENTS, _OP.PUBLISH_STUDY})
PAYOUT_OPERATIONS = frozenset({_OP.APPROVE, _OP.BONUS})


def study_places(*, study: Study) -> tuple[int, int, int | None]:
    """Places: the tasks (Prolific places, HIT assignments) the study's real publications put on a
    platform; taken: its tasks a worker holds or will be paid for (active, submitted, approved; a
    returned, expired or rejected one frees its place); released: once the study is closed, the
    rest (no worker takes them, and what publishing committed for them is not spent), None before."""
    places = (Publication.objects.filter(study=study, dry_run=False).exclude(platform=Platform.LINK)
              .aggregate(n=Sum("n_tasks"))["n"] or 0)
    taken = Assignment.objects.filter(study=study, status__in=(
        Assignment.Status.ACTIVE, Assignment.Status.SUBMITTED, Assignment.Status.APPROVED)).count()
    released = max(0, places - taken) if places and study.status == Study.Status.CLOSED else None
    return places, taken, released


def study_platform_overview(*, study: Study) -> dict:
    """What the admin page shows: publications, submissions by flag, audit totals. The totals are
    of confirmed calls, kept apart (``COMMITTING_OPERATIONS``, ``PAYOUT_OPERATIONS``):
    ``committed``, what publishing committed on the platform (rewards of every place or HIT
    assignment, fees included), and ``paid_out``, what workers were paid (approved rewards and
    bonuses, fees not included); ``currency`` names the currency of the calls counted (comma-joined
    should there be more than one, "" when none); ``places_published``, ``tasks_taken`` and, once
    the study is closed, ``places_released`` (places no worker took) and ``released`` (their share
    of ``committed``)."""
    calls = PlatformCall.objects.filter(study=study)
    counted = calls.filter(status=PlatformCall.Status.CONFIRMED,
                           operation__in=COMMITTING_OPERATIONS | PAYOUT_OPERATIONS)
    totals = counted.aggregate(committed=Sum("amount", filter=Q(operation__in=COMMITTING_OPERATIONS)),
                               paid_out=Sum("amount", filter=Q(operation__in=PAYOUT_OPERATIONS)))
    committed = money(totals["committed"] or 0)
    places, taken, released = study_places(study=study)
    return {
        "publications": list(Publication.objects.filter(study=study).order_by("-created_at")),
        "assignments": dict(Assignment.objects.filter(study=study).values_list("status").annotate(n=Count("id"))),
        "flagged": PlatformSubmission.objects.filter(publication__study=study).exclude(flag="").count(),
        "calls": dict(calls.values_list("status").annotate(n=Count("id"))),
        # In cents: SQLite sums decimals as floats (37.3300000000000, 9.5).
        "committed": committed,
        "places_published": places,
        "tasks_taken": taken,
        "places_released": released,  # None while the study is not closed
        "released": money(committed * released / places) if released else money(0),
        "paid_out": money(totals["paid_out"] or 0),
        "currency": ", ".join(sorted(set(counted.order_by().values_list("currency", flat=True)))),
        "bonuses": Bonus.objects.filter(assignment__study=study).count(),
    }


LINK_UNUSED, LINK_USED, LINK_SUBMITTED, LINK_REVOKED = "unused", "used", "submitted", "revoked"
LINK_APPROVED, LINK_REJECTED = "approved", "rejected"
_LINK_STATE = {Assignment.Status.SUBMITTED: LINK_SUBMITTED, Assignment.Status.APPROVED: LINK_APPROVED,
               Assignment.Status.REJECTED: LINK_REJECTED}


@dataclass
class LinkRow:
    """A single-person link and what it became: its task, the worker's pseudonym, the review."""

    link: ParticipantLink
    state: str
    task_id: int | None = None
    participant_id: int | None = None
    worker: str = ""
    review: str = ""  # the task's status as the researcher reads it ("Submitted", "Rejected", ...)


def study_link_rows(*, study: Study) -> list[LinkRow]:
    """Each single-person link of ``study`` with its state: ``unused`` (nobody opened it), ``used``
    (opened, nothing submitted yet), ``submitted`` (its task awaits review), ``approved`` or
    ``rejected`` (reviewed: a lab paying by completion code withholds a rejected one's), or
    ``revoked`` (withdrawn and never used); and its latest task with the worker's pseudonym."""
    links = list(ParticipantLink.objects.filter(study=study).select_related("participant").order_by("id"))
    latest: dict[int, Assignment] = {}
    # A link's tasks are the ones started through it (its participant may hold other links too).
    for assignment in (Assignment.objects.filter(study=study, participant_link__isnull=False)
                       .order_by("created_at", "id")):
        done = latest.get(assignment.participant_link_id)
        # The latest finished task speaks for the link; one still in progress only when none finished.
        if done is None or assignment.status in DONE_STATUSES or done.status not in DONE_STATUSES:
            latest[assignment.participant_link_id] = assignment
    out = []
    for link in links:
        if link.participant_id is None:
            out.append(LinkRow(link=link, state=LINK_REVOKED if link.revoked else LINK_UNUSED))
            continue
        task = latest.get(link.pk)
        participant = link.participant
        out.append(LinkRow(
            link=link, state=_LINK_STATE.get(task.status, LINK_USED) if task else LINK_USED,
            task_id=task.pk if task else None, participant_id=participant.pk,
            worker=worker_pseudonym(participant.platform, participant.external_id),
            review=task.get_status_display() if task else "",
        ))
    return out


def study_links_status(*, study: Study) -> list[tuple[ParticipantLink, str]]:
    """Each single-person link of ``study`` with its state (``study_link_rows``)."""
    return [(row.link, row.state) for row in study_link_rows(study=study)]


@dataclass
class DryRunShown:
    """A dry run as the publish page shows it: each request that would be sent, its operation and
    its parameters as indented JSON (never a Python dict's repr)."""

    publication: Publication
    requests: list[tuple[str, str]]


def study_dry_runs_shown(*, study: Study, limit: int = 3) -> list[DryRunShown]:
    """The study's latest dry runs made since its latest real publication (a dry run is a preview of
    a publication: once the study is published for real, the preview is history, not news)."""
    runs = Publication.objects.filter(study=study, dry_run=True)
    real = Publication.objects.filter(study=study, dry_run=False).order_by("-created_at").first()
    if real is not None:
        runs = runs.filter(created_at__gt=real.created_at)
    out = []
    for publication in runs.order_by("-created_at")[:limit]:
        requests = [r for r in (publication.plan or {}).get("requests", []) if isinstance(r, dict)]
        out.append(DryRunShown(publication=publication, requests=[
            (str(r.get("operation", "request")),
             json.dumps({k: v for k, v in r.items() if k != "operation"}, indent=2, ensure_ascii=False, default=str))
            for r in requests]))
    return out
