"""Who may act on a study's workers: the one check every platform action makes where it writes.

Zulip's ``access_*`` pattern: publish, approve, reject, bonus, block and close each take the acting user
and the study and call ``access_study`` before anything else, so the admin, the per-worker
page, the Celery tasks (which carry the study id and the user id) and any later caller get the
same answer; none of them can forget it. The right itself is read from the one per-study access
definition, ``studies.selectors.studies_for_user`` (called here and nowhere else in these
services, so a change of what sharing grants changes every platform action at once)."""
from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Q, QuerySet

from annotations.models import Assignment
from annotations.services.payments import PlatformServiceError
from lab.ids import parse_id
from studies.models import ImportRecord, Study
from studies.selectors import CHANGE, PAY, import_record_study_id, studies_for_user


class _Operator:
    """The deployment's operator: a management command or the Django shell, run by whoever holds
    the database and the platform credentials anyway. It is a Python object, so no request, API
    call or Celery message can name it (tasks carry a user id and act as that user)."""

    pk = None
    is_superuser = True

    def __repr__(self) -> str:
        return "OPERATOR"


OPERATOR = _Operator()

# What each platform action needs: moving money or judging a worker needs PAY (publishing spends the
# study's budget, as the publish page's buttons always required); closing a study (stopping its
# recruitment) changes the study and needs CHANGE, as the study admin's action did.
PUBLISH = APPROVE = REJECT = BONUS = BLOCK = NOTIFY = PAY
CLOSE = CHANGE
# Deciding a worker's flag (accepting one makes the task eligible for the flagged-error bonus, which
# paying then needs PAY for) is reviewing the study's content, as the flags admin always required.
DECIDE_FLAG = CHANGE


class PlatformAccessDenied(PlatformServiceError):
    """The acting user may not do this to this study's workers (or did not say who they are)."""


def study_imported(study: Study) -> str:
    """Why ``study`` was run elsewhere ('' when it was run here): a study of imported outcomes
    (``Study.is_imported_outcome``) or a copy made from a study bundle (``bundle.bundle_import``
    records it in its ``ImportRecord``, kind ``bundle``, whose summary names the study). Such a
    study's workers are pseudonyms of another installation (``bundle-<study>:w_...``) who never
    worked here: nobody may review, pay, block, notify or recruit them (``access_study``, PAY), and
    its statuses stay those its results were scored from. The one rule; pages that hide these
    actions read it too, and sweeps over every study read its query form (``imported_studies``)."""
    if study.is_imported_outcome:
        return "its outcomes were imported (run elsewhere)"
    if bundle_copy_ids().filter(copy_id=study.pk).exists():
        return "it was imported from a study bundle (run elsewhere; its workers never worked here)"
    return ""


def bundle_copy_ids(*, original: int | None = None) -> QuerySet:
    """The ids (``copy_id``) of the studies copied from a study bundle, or only of those copied
    from study ``original`` here: each ``ImportRecord`` of kind ``bundle`` names its study in
    ``summary["study"]`` and the study the bundle was made from in ``summary["original_study"]``
    (``bundle.bundle_import``). Never NULL, so an ``exclude(..._in=...)`` on it is safe on
    PostgreSQL too."""
    records = ImportRecord.objects.filter(kind="bundle")
    if original is not None:
        records = records.filter(summary__original_study=original)
    return records.annotate(copy_id=import_record_study_id()).filter(copy_id__isnull=False).values("copy_id")


def imported_studies() -> Q:
    """``study_imported`` as a condition on ``Study`` (the same rule, for queries over every study):
    a study of imported outcomes or a copy made from a study bundle. A sweep that changes the rows
    of every study's tasks (``release.assignment_expire_stale``) leaves these studies out: their
    statuses stay those their results were scored from."""
    return Q(is_imported_outcome=True) | Q(pk__in=bundle_copy_ids())


def imported_study_ids() -> QuerySet:
    """The ids of the studies ``imported_studies`` names, as a subquery (``study_id__in=...``)."""
    return Study.objects.filter(imported_studies()).values("pk")


def access_study(*, user, study: Study | int, access: str) -> Study:
    """``study`` read again if ``user`` may act on it with ``access``; ``PlatformAccessDenied``
    otherwise. A study the user may not reach is "not found or not yours", whether it exists or
    not. Every PAY action (publish, approve, reject, bonus, block, notify, the publish page's sync)
    is refused, for the operator too, on a study run elsewhere (``study_imported``): its workers
    never worked here. CHANGE stays: opening refuses a closed study itself, closing a closed copy
    changes nothing, a withdrawal must still erase a worker's data, and a flag decision moves no
    money (the bonus it allows needs PAY)."""
    study_id = study if isinstance(study, int) and not isinstance(study, bool) else getattr(study, "pk", None)
    if user is OPERATOR:
        found = Study.objects.filter(pk=study_id).first()
    elif user is None or not getattr(user, "pk", None):
        raise PlatformAccessDenied("nobody is acting: every platform action names the user who does it")
    else:
        found = studies_for_user(user=user, access=access).filter(pk=study_id).first()
    if found is None:
        need = "studies.pay_workers" if access == PAY else "studies.change_study"
        raise PlatformAccessDenied(
            f"study {study_id}: not found or not yours to act on ({need} on a study you own or that is shared "
            "with you)")
    if access == PAY:
        why = study_imported(found)
        if why:
            raise PlatformAccessDenied(
                f"study {found.pk} ({found.name!r}): {why}; nothing was done: its tasks cannot be reviewed, paid, "
                "published, synced, blocked or notified here")
    return found


def studies_handing_out_links(*, user) -> QuerySet[Study]:
    """The studies whose link addresses and completion codes ``user`` may be shown: those they may
    pay the workers of (PAY, as making links and paying need), less those run elsewhere
    (``study_imported``: their codes are another installation's). A single-person link's address
    is its holder's key (opening it unused makes you that participant) and a completion code is
    what a worker is paid against, so handing either out is a PAY action: a VIEW or CHANGE share
    reads a study's links (label, state, task, worker, review) without them. The one rule; every
    page that shows link addresses, link tokens or completion codes reads it
    (``may_hand_out_links`` for one study)."""
    if user is OPERATOR:
        found = Study.objects.all()
    elif user is None or not getattr(user, "pk", None):
        return Study.objects.none()
    else:
        found = studies_for_user(user=user, access=PAY)
    return found.exclude(imported_studies())


def may_hand_out_links(*, user, study: Study) -> bool:
    """Whether ``user`` may be shown ``study``'s link addresses and completion codes
    (``studies_handing_out_links``)."""
    return study.pk is not None and studies_handing_out_links(user=user).filter(pk=study.pk).exists()


def study_assignments(*, study: Study, ids: Iterable[int]) -> tuple[list[Assignment], list[str]]:
    """The assignments ``ids`` of ``study``, in id order, and an error line per id that no longer
    exists anywhere. An id of another study's task is refused: ``PlatformServiceError`` naming
    every such id, and nothing is done to any of them (no batch may reach another study's
    workers). An id that names no task at all is an error of its row only, in the batch
    services' per-row form (``common.each_assignment``): a queued approve batch of a link study
    whose participant withdrew meanwhile (``participant_withdraw`` erases a task with no platform
    submission and nothing paid; on MTurk and Prolific it waits for the review) still approves the
    others."""
    ids = list(ids)
    for i in ids:
        whole = isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 2**63
        if not (whole or parse_id(i) is not None):
            raise PlatformServiceError(f"assignment id {str(i)[:40]!r} is not a whole number; nothing was done")
    wanted = sorted({i if isinstance(i, int) else parse_id(i) for i in ids})
    found = list(Assignment.objects.filter(study=study, pk__in=wanted).select_related("participant", "study")
                 .order_by("id"))
    missing = sorted(set(wanted) - {a.pk for a in found})
    foreign = list(Assignment.objects.filter(pk__in=missing).order_by("id").values_list("pk", flat=True))
    if foreign:
        shown = ", ".join(str(i) for i in foreign[:20]) + (" ..." if len(foreign) > 20 else "")
        raise PlatformServiceError(
            f"assignment(s) {shown}: not found in study {study.pk}; nothing was done")
    return found, [f"assignment {i}: not found in study {study.pk} (its worker withdrew or it was deleted); "
                   "nothing was done to it" for i in missing]


def assignment_of(*, study: Study, assignment: Assignment | int) -> Assignment:
    """``assignment`` read again, if it is a task of ``study``; ``PlatformServiceError`` otherwise."""
    found, gone = study_assignments(study=study, ids=[assignment if isinstance(assignment, int) else assignment.pk])
    if gone:
        raise PlatformServiceError(gone[0])
    return found[0]
