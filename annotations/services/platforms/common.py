"""Small pieces every platform service uses."""
from __future__ import annotations

from django.contrib.auth import get_user_model

from annotations.models import Assignment, PlatformCall, PlatformSubmission
from annotations.platforms import get_platform
from annotations.platforms.base import PlatformError, PlatformNotFound, PlatformTransientError
from annotations.selectors.platforms import study_platform_task_ids
from annotations.services.payments import CallOutcomeUnknown, PlatformServiceError
from lab.pseudonyms import worker_pseudonym
from studies.models import Platform, Study
from studies.services.studies import study_locked_changes

from .access import OPERATOR, PAY, PlatformAccessDenied, access_study

OP = PlatformCall.Operation


def actor(user):
    """The user to record on an audit row: a saved user, or None (a task, the shell)."""
    return user if getattr(user, "pk", None) else None


def publish_platform(*, study: Study, platform_name: str | None = None) -> Platform:
    """The platform ``study`` is published on: its own, ``Study.platform``. ``platform_name``, when
    a caller names one (the publish page's button, ``publish_study --platform``), is refused unless
    it is that one, with the same ``PlatformServiceError`` for every caller.

    A study runs on one platform: its entry reads the ids that platform sends
    (``annotations.platforms.handoff.arrival_parse``), its hand-back, fee and pay follow it, and the
    field is fixed once the study opens (``studies.services.studies.LOCKED_FIELDS``, whose reason
    the error quotes). A draft changes its platform on the study page first; an open study is
    copied to run elsewhere."""
    for value in (study.platform, platform_name or study.platform):
        if value not in Platform.values:
            raise PlatformServiceError(f"platform {str(value)[:40]!r} is not one of {', '.join(Platform.values)}")
    own = Platform(study.platform)
    if not platform_name or platform_name == own:
        return own
    why = study_locked_changes(study=study, changes={"platform": platform_name}).get("platform") or (
        "It is a draft: change its platform on the study page first, then publish.")
    raise PlatformServiceError(
        f"study {study.name!r} cannot be published on {Platform(platform_name).label}: its platform (the study's "
        f"platform field) is {own.label}, and a study is published only on its own platform, the one its workers "
        f"arrive from, are handed back to and are paid through. {why}")


def assignment_platform(assignment: Assignment) -> Platform:
    return Platform(assignment.participant.platform)


class NotThisTasksWork(PlatformServiceError):
    """``platform_work_confirm``'s refusal when the platform answers that the assignment id is not
    this task's work: no work of this study at all (``NotThisStudysWork``), or this study's work of
    another worker (``AnotherWorkersWork``). Nothing of this task's worker is there to act on
    (``review.assignment_reject`` rejects such work, when sync holds it for the platform's listing,
    here only)."""


class NotThisStudysWork(NotThisTasksWork):
    """The platform has no such assignment / submission (not found), or files it under another
    researcher's or another study's task."""


class AnotherWorkersWork(NotThisTasksWork):
    """The platform files the assignment id under this study, as another worker's work: the task's
    worker entered with a session (or assignment id) the platform gave someone else (a worker of the
    study, or one who withdrew from it)."""


def platform_work_confirm(assignment: Assignment) -> None:
    """Refuse (``PlatformServiceError``) to move money for ``assignment`` unless its platform
    assignment id is this study's work on the platform: an MTurk assignment of one of the study's
    own HITs, a Prolific submission of its own Prolific study, held by the task's worker. A worker
    sends that id at the entry and nothing there can prove it (an assignment id of another
    researcher's HIT is as well formed as one of ours), while approving, rejecting or paying acts on
    that id across the whole requester account. Sync lists the study's own work (a
    ``PlatformSubmission`` under its publication, whose worker it compares: a mismatch is a hold),
    so a row the platform listed with the task's worker as its worker is the proof. A row of
    another worker (``WORKER_MISMATCH``, or a worker who withdrew: their id is gone from it) proves
    the id is someone else's work; a row sync made itself for work the listing lacks
    (``NOT_ON_PLATFORM``: built from the worker's own id, with no platform status) proves nothing:
    that id may be another study's submission. Otherwise the platform is asked whose it is (a read,
    before anything is sent); its answer that the id is no work of this study (not found, or
    another task's) is ``NotThisStudysWork``, that it is another worker's ``AnotherWorkersWork``
    (both ``NotThisTasksWork``). Links move no money and need none."""
    name = assignment_platform(assignment)
    if name == Platform.LINK:
        return
    platform_assignment_id = assignment.platform_assignment_id
    platform = get_platform(name)
    if platform.assignment_id_error(platform_assignment_id):
        return  # no platform's id: the call itself refuses it before sending, on its audit row
    worker_id = assignment.participant.external_id
    if worker_id and PlatformSubmission.objects.filter(
            publication__study_id=assignment.study_id, publication__platform=name, publication__dry_run=False,
            platform_assignment_id=platform_assignment_id, worker_id=worker_id).exclude(
            flag__in=[PlatformSubmission.Flag.NOT_ON_PLATFORM, PlatformSubmission.Flag.WORKER_MISMATCH]).exclude(
            platform_status="").exists():
        return  # the platform listed it under this study's publication, as this task's worker's work
    own = study_platform_task_ids(study=assignment.study, platform=name)
    task = "HIT" if name == Platform.MTURK else "study"
    if not own:
        raise PlatformServiceError(
            f"assignment {assignment.pk}: this study has no published {name} {task}, so no work on {name} is this "
            "study's: nothing is sent")
    try:
        owner = platform.assignment_owner(platform_assignment_id=platform_assignment_id)
    except PlatformNotFound as exc:
        raise NotThisStudysWork(
            f"assignment {assignment.pk}: {name} has no work under its assignment id ({exc.message}): nothing is "
            "sent (the worker entered with an id the platform never gave)") from exc
    except PlatformError as exc:
        raise PlatformServiceError(
            f"assignment {assignment.pk}: {name} could not say whose work its assignment id is ({exc.message}); "
            "nothing is sent: sync the study, then try again") from exc
    task_id, owner_id = owner or ("", "")
    if task_id not in own:
        raise NotThisStudysWork(
            f"assignment {assignment.pk}: {name} files its assignment id under a {task} that is not this study's: "
            "nothing is sent (the worker entered with another study's id)")
    if owner_id != worker_id:
        raise AnotherWorkersWork(
            f"assignment {assignment.pk}: on {name} another worker holds its assignment id: nothing is sent; sync "
            "the study (the work is then on hold until a researcher clears or rejects it)")


def participant_pseudonym(participant) -> str:
    """What an audit row (idempotency key, request summary) names a worker by: the pseudonym
    (``lab.pseudonyms``), never the raw platform id, which only holders of
    ``studies.view_raw_worker_ids`` may see."""
    return worker_pseudonym(participant.platform, participant.external_id)


def participant_redaction(participant) -> dict[str, str]:
    """``CallSpec.redact`` for a call about ``participant``: their raw id -> their pseudonym."""
    return {participant.external_id: participant_pseudonym(participant)}


def redacted(text: str, participant) -> str:
    """``text`` (a platform's error, say) with ``participant``'s raw id replaced by the pseudonym."""
    raw = participant.external_id
    return text.replace(raw, participant_pseudonym(participant)) if raw else text


def access_study_now(*, user, study: Study | int, access: str) -> Study:
    """``access.access_study`` with ``user``'s rights read afresh: the user's row is read again
    (Django caches permissions on a user instance, and the account may have been deactivated or
    deleted since), so long work that checks again before each call that takes effect sees a share
    revoked, a permission removed or an account closed meanwhile. ``PlatformAccessDenied``
    otherwise; the operator is the operator."""
    if user is not OPERATOR and getattr(user, "pk", None):
        fresh = get_user_model().objects.filter(pk=user.pk).first()
        if fresh is None:
            raise PlatformAccessDenied(f"user {user.pk}, who is acting, was deleted: nobody may act for them")
        user = fresh
    return access_study(user=user, study=study, access=access)


def each_assignment(assignments, act, *, user=None, access: str = PAY) -> tuple[int, list[str], list[int]]:
    """Run ``act(assignment)`` on each of a batch: a row that fails does not stop the others.
    Returns (how many succeeded, an error line per failed row, the ids whose outcome is not
    settled: a transient error or a lost answer, which a retry of the batch may settle).

    With ``user`` (the acting user; APPROVE and BONUS are ``access``), their right to the row's
    study is checked again before each row (:func:`access_study_now`), where the money moves: a
    share revoked during a batch stops it there, and every row not yet acted on gets an error line
    saying why (nothing is sent for it). One check costs a few indexed reads, beside the row's own
    reads, audit writes and platform request."""
    done, errors, unsettled = 0, [], []
    assignments = list(assignments)
    for position, assignment in enumerate(assignments):
        if user is not None:
            try:
                access_study_now(user=user, study=assignment.study_id, access=access)
            except PlatformAccessDenied as exc:
                errors.extend(f"assignment {rest.pk}: nothing was done: the right to act was lost during the "
                              f"batch ({exc.message})" for rest in assignments[position:])
                break
        try:
            act(assignment)
            done += 1
        except (PlatformTransientError, CallOutcomeUnknown) as exc:
            errors.append(f"assignment {assignment.pk}: {getattr(exc, 'message', '') or exc}")
            unsettled.append(assignment.pk)
        except (PlatformError, PlatformServiceError) as exc:
            errors.append(f"assignment {assignment.pk}: {getattr(exc, 'message', '') or exc}")
    return done, errors, unsettled
