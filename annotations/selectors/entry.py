"""Reads of the way in: who a worker is, which task they may resume, and what a study's page
should warn about how its workers arrive. Writes are in ``annotations.services.participants``
and ``annotations.services.entry``."""
from __future__ import annotations

from datetime import datetime

from django.db.models import Exists, Min, OuterRef, Subquery
from django.utils import timezone

from annotations.models import (
    Assignment,
    AttentionCheck,
    Claim,
    OpenLink,
    Participant,
    ParticipantLink,
    PlatformAssignmentBinding,
)
from annotations.models.core import LIVE_OR_FINISHED
from studies.models import Platform, Study

# The name under which ``study_for_entry`` reads whether single-person links were made for a study.
PERSONAL_LINKS_MADE = "personal_links_made"
# Gap between a task's unit positions, so its attention checks slot in between without
# renumbering (``services.assignment`` places units with it).
POSITION_GAP = 100
# The most attention checks one task holds: they fit in the places between two units.
MOST_ATTENTION_CHECKS_A_TASK = POSITION_GAP - 1


# What ``participant_by_platform_id`` reads of the task a browser's study cookie names, under these
# names (``held_task``).
HELD_TASK_FIELDS = {"held_task_created_at": "created_at", "held_task_expires_at": "expires_at",
                    "held_task_platform_assignment_id": "platform_assignment_id"}


def participant_by_platform_id(*, platform: str, external_id: str, study: Study | None = None,
                               held_task_id: int | None = None, now: datetime | None = None) -> Participant | None:
    """The platform worker, or None. With ``study`` and ``held_task_id`` (the task the browser's study
    cookie names), read in the same statement, that task if it is this worker's in ``study``, active
    and within its time: ``held_task`` gives it, with no statement of its own (a returning worker's
    browser names their finished task at every later consent)."""
    people = Participant.objects.filter(platform=platform, external_id=external_id)
    if study is not None and held_task_id is not None:
        held = Assignment.objects.filter(pk=held_task_id, study_id=study.pk, participant_id=OuterRef("pk"),
                                         status=Assignment.Status.ACTIVE, expires_at__gt=now or timezone.now())
        people = people.annotate(**{name: Subquery(held.values(field)[:1]) for name, field in HELD_TASK_FIELDS.items()})
    return people.first()


def held_task(*, participant: Participant, held_task_id: int) -> Assignment | None:
    """The task ``held_task_id`` as ``participant_by_platform_id`` read it with ``participant``: this
    worker's, active and within its time in the study (its start, deadline and platform assignment),
    else None. A participant read without it is a programming error (``ValueError``), never a silent
    "no task"."""
    if not hasattr(participant, "held_task_created_at"):
        raise ValueError(f"participant {participant.pk}: read without the held task "
                         "(participant_by_platform_id with study and held_task_id)")
    if participant.held_task_created_at is None:
        return None
    return Assignment(pk=held_task_id, participant_id=participant.pk, status=Assignment.Status.ACTIVE,
                      **{field: getattr(participant, name) for name, field in HELD_TASK_FIELDS.items()})


def platform_assignment_owner(*, platform: str, platform_assignment_id: str) -> int | None:
    """The participant id a platform assignment id is bound to, if it was seen before."""
    return (
        PlatformAssignmentBinding.objects.filter(platform=platform, platform_assignment_id=platform_assignment_id)
        .values_list("participant_id", flat=True)
        .first()
    )


def active_assignment(*, study: Study, participant: Participant | None,
                      now: datetime | None = None) -> Assignment | None:
    """The participant's task in progress in ``study`` (active and within its time), with its start
    (``created_at``: the landing page of a task moved to a new platform assignment states what is
    left of its time, ``worker_pages.time_allowed``)."""
    if participant is None or participant.pk is None:
        return None
    return (
        Assignment.objects.filter(study_id=study.pk, participant_id=participant.pk, status=Assignment.Status.ACTIVE,
                                  expires_at__gt=now or timezone.now())
        .only("token", "participant_id", "platform_assignment_id", "expires_at", "participant_link_id", "created_at")
        .first()
    )


def link_active_task(*, link: ParticipantLink, now: datetime | None = None) -> Assignment | None:
    """The task in progress started through single-person ``link`` (its participant may hold
    other links of the study: their tasks are not this link's)."""
    return (
        Assignment.objects.filter(participant_link_id=link.pk, status=Assignment.Status.ACTIVE,
                                  expires_at__gt=now or timezone.now())
        .only("token", "participant_id", "platform_assignment_id", "expires_at", "participant_link_id")
        .first()
    )


def latest_assignment(*, study: Study, participant_id: int, link: ParticipantLink | None = None) -> Assignment | None:
    """The participant's latest task in ``study`` that is in progress or finished (an expired or
    returned one gave its questions back and counts as not taken); with ``link``, of the tasks
    started through that single-person link."""
    tasks = Assignment.objects.filter(study_id=study.pk, participant_id=participant_id)
    if link is not None:
        tasks = tasks.filter(participant_link_id=link.pk)
    return (
        tasks.exclude(status__in=[Assignment.Status.EXPIRED, Assignment.Status.RETURNED])
        .order_by("-created_at", "-id")
        .only("token", "status", "expires_at")
        .first()
    )


def link_by_token(model: type[ParticipantLink] | type[OpenLink], token: str):
    """The link with this token (and its study), or None. Tokens are URL-safe base64; anything
    else cannot be one and is not looked up."""
    if not token or len(token) > 64 or not token.replace("-", "").replace("_", "").isalnum() or not token.isascii():
        return None
    return model.objects.select_related("study").filter(token=token).first()


def plain_link_starts_tasks(*, study: Study) -> bool:
    """Whether the plain study link of ``study`` (``/w/s/<study token>/``) may start new tasks for
    anyone who opens it: only in a link study for which no single-person link was ever made.

    Once the researcher makes single-person links (``services.links.links_generate``, or a link
    publication in "single" mode), the study takes part by personal link only: withdrawing them
    (``link_revoke``, ``links_close``), even all of them, does not reopen the plain link, whose
    address may have circulated (a pilot). A task already started through the plain link still
    opens in the browser that holds it, and its done page still shows (``views.entry``). To admit
    anonymous workers again, make an open link (``open_link_create``, link mode "open"). The entry
    view and the study page's warning (``study_entry_warnings``) both read this. A study read by
    ``study_for_entry`` carries the answer already: no statement is sent."""
    if study.platform != Platform.LINK:
        return False
    made = getattr(study, PERSONAL_LINKS_MADE, None)
    if made is None:
        made = ParticipantLink.objects.filter(study_id=study.pk).exists()
    return not made


def study_for_entry(*, entry_token: str) -> Study | None:
    """The study whose ``/w/s/<token>/`` entry ``entry_token`` is (``Study.entry_token``, stored
    and indexed; None for any other), read in the same statement with whether single-person links
    were ever made for it (for ``plain_link_starts_tasks``): the worker pages' statements are
    counted, and the landing page and the consent send no more for it. A token longer than the
    column holds cannot be one and is not looked up."""
    if not entry_token or len(entry_token) > Study._meta.get_field("entry_token").max_length:
        return None
    made = Exists(ParticipantLink.objects.filter(study_id=OuterRef("pk")))
    return Study.objects.filter(entry_token=entry_token).annotate(**{PERSONAL_LINKS_MADE: made}).first()


def study_entry_warnings(*, study: Study) -> list[str]:
    """What the study page should say about workers who arrive without an identity.

    An open link, or the plain study link of a link study while it starts tasks
    (``plain_link_starts_tasks``: no single-person links were made for it), admits anyone, and a
    fresh browser there is a new participant: "each question once per worker" then holds per
    browser only, unless the worker enters a participant identifier on the landing page."""
    open_link = OpenLink.objects.filter(study_id=study.pk, active=True).exists()
    plain_link = plain_link_starts_tasks(study=study)
    if not (open_link or plain_link):
        return []
    where = "an open link" if open_link else "its plain study link"
    return [
        f"This study takes anonymous workers through {where}: a worker who opens it in a new browser "
        "is a new participant and may get questions they already answered. Workers who enter a "
        "participant identifier (a lab id or e-mail, stored only as a keyed hash) are recognised "
        "across browsers; single-person links avoid the problem."
    ]


def task_of_platform_assignment(*, study: Study, platform_assignment_id: str) -> Assignment | None:
    """The local task of a platform assignment (MTurk assignmentId, Prolific SESSION_ID) in
    ``study`` that is in progress or finished; an expired or returned one counts as not taken.
    At most one (constraint ``assignment_one_task_per_platform_assignment``)."""
    if not platform_assignment_id:
        return None
    return (
        Assignment.objects.filter(study_id=study.pk, platform_assignment_id=platform_assignment_id,
                                  status__in=LIVE_OR_FINISHED)
        .only("token", "status", "participant_id", "platform_assignment_id", "expires_at")
        .first()
    )


def platform_assignment_first_start(*, study: Study, platform_assignment_id: str) -> datetime | None:
    """When the clock of the first local task of a platform assignment (MTurk assignmentId,
    Prolific SESSION_ID) in ``study`` started: the earliest ``created_at`` of its tasks in any
    status, an expired or returned one too (for a platform arrival, its landing:
    ``deadlines.task_clock_start``), else None. The platform's clock started at the accept and did
    not restart when the app gave a task back, so a re-entry's clock counts from it
    (``deadlines.platform_clock_start``)."""
    if not platform_assignment_id:
        return None
    return (
        Assignment.objects.filter(study_id=study.pk, platform_assignment_id=platform_assignment_id)
        .aggregate(first=Min("created_at"))["first"]
    )


def attention_checks_to_give(*, study: Study, participant_id: int | None,
                             now: datetime | None = None) -> tuple[list[int], set[int]]:
    """The one owner of which attention checks a new task of ``participant_id`` in ``study`` shows:
    (the checks it shows, in order, at most ``MOST_ATTENTION_CHECKS_A_TASK``; the checks given to
    the worker before). The claim places the first among the task's units
    (``services.assignment._add_attention_checks``) and the landing page counts them
    (``selectors.cost.questions_per_task``), so a worker is told what their task will ask. A worker
    not known yet (None: a first landing) has seen none: all of them, and no claim is read.

    Shown: the study's checks the worker has not seen. Seen: held by a task in progress or by work
    that counts (a claim not released), or answered in any task (a check answered in a task left,
    expired or rejected is known to the worker: asking it again tests nothing) but one ended as an
    impostor's (``ended_as_impostor``: someone else answered it under the worker's id; the worker
    never saw it). A check held unanswered by a task that ended without counting is given back, as
    that task's units are (``release.assignments_release``); a unit goes back to the pool for other
    workers, a check, which every worker answers, to this worker's next task. A task still active
    past its deadline (``now``) counts as ended so: the start expires it before it claims
    (``assignment.assignment_start``), and the landing page, which expires nothing, counts as that
    start will. One read of the
    study's checks, and one of the worker's claims of them (on the worker's claims in the study:
    the constraint's index), as before the checks could come again."""
    checks = list(AttentionCheck.objects.filter(study_id=study.pk).order_by("id").values_list("id", flat=True))
    given: set[int] = set()
    seen: set[int] = set()
    if checks and participant_id is not None:
        now = now or timezone.now()
        for check_id, released, completed_at, by_impostor, status, expires_at in Claim.objects.filter(
            study_id=study.pk, participant_id=participant_id, attention_check_id__in=checks
        ).order_by().values_list("attention_check_id", "released", "completed_at", "assignment__ended_as_impostor",
                                 "assignment__status", "assignment__expires_at"):
            given.add(check_id)
            released = released or (status == Assignment.Status.ACTIVE and expires_at <= now)
            if not released or (completed_at is not None and not by_impostor):
                seen.add(check_id)
    return [check_id for check_id in checks if check_id not in seen][:MOST_ATTENTION_CHECKS_A_TASK], given
