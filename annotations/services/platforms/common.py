"""Small pieces every platform service uses."""
from __future__ import annotations

from annotations.models import Assignment, PlatformCall
from annotations.platforms.base import PlatformError, PlatformTransientError
from annotations.services.payments import CallOutcomeUnknown, PlatformServiceError
from lab.pseudonyms import worker_pseudonym
from studies.models import Platform, Study

OP = PlatformCall.Operation
DONE_STATUSES = (Assignment.Status.SUBMITTED, Assignment.Status.APPROVED, Assignment.Status.REJECTED)


def actor(user):
    """The user to record on an audit row: a saved user, or None (a task, the shell)."""
    return user if getattr(user, "pk", None) else None


def resolve_platform(study: Study, name: str | None) -> Platform:
    """``name`` (or the study's platform) as a ``Platform`` member; a clear error otherwise."""
    value = name or study.platform
    if value not in Platform.values:
        raise PlatformServiceError(f"platform {value!r} is not one of {', '.join(Platform.values)}")
    return Platform(value)


def assignment_platform(assignment: Assignment) -> Platform:
    return Platform(assignment.participant.platform)


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


def each_assignment(assignments, act) -> tuple[int, list[str], list[int]]:
    """Run ``act(assignment)`` on each of a batch: a row that fails does not stop the others.
    Returns (how many succeeded, an error line per failed row, the ids whose outcome is not
    settled: a transient error or a lost answer, which a retry of the batch may settle)."""
    done, errors, unsettled = 0, [], []
    for assignment in assignments:
        try:
            act(assignment)
            done += 1
        except (PlatformTransientError, CallOutcomeUnknown) as exc:
            errors.append(f"assignment {assignment.pk}: {getattr(exc, 'message', '') or exc}")
            unsettled.append(assignment.pk)
        except (PlatformError, PlatformServiceError) as exc:
            errors.append(f"assignment {assignment.pk}: {getattr(exc, 'message', '') or exc}")
    return done, errors, unsettled
