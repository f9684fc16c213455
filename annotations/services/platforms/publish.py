"""Publishing a study on its platform: MTurk HITs, a Prolific study, or participant links; a dry
run shows every request and sends nothing. Publishing opens the study through ``study_open``
(its units are built first), and extending an MTurk batch adds assignments for what is missing.

A study closed while it is being published (``close.study_close``, from another request or
task) stops the publish: before each call that opens places to workers (each MTurk HIT, the
Prolific draft and its publishing, the links) the publication is read again under a short lock
(``_publishing_goes_on``), and once it is closed nothing more is created. What a call already in
flight made after the close had stopped the rest (a HIT created after the close's expire, a
Prolific study published after its stop) is stopped through the same audited calls
(``publication_recruiting_stop``), by the publish that recorded it or by the close, whichever
comes second; the publish then returns the closed publication, without an error.

The acting user's right to publish is read afresh at the same points (and before each call that
adds assignments): a share revoked while a publish runs stops it with an error, recorded on the
publication, and nothing more is created."""
from __future__ import annotations

import logging
import math
from typing import NoReturn

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max, Sum, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from annotations.models import (
    MTurkQualificationType,
    OpenLink,
    ParticipantLink,
    PlatformCall,
    Publication,
    Unit,
)
from annotations.platforms import get_platform
from annotations.platforms.base import PlatformError, TaskSpec, money, to_minor_units
from annotations.platforms.handoff import study_entry_url
from annotations.platforms.mturk import (
    MTurkPlatform,
    answer_key_xml,
    external_question_xml,
    mturk_closed_reason,
    question_form_xml,
    split_assignments,
)
from annotations.selectors.cost import platform_minutes, study_cost_and_pay, study_task_count
from annotations.services.deadlines import assignment_duration
from annotations.services.links import links_generate, open_link_create
from annotations.services.opening import study_open
from annotations.services.payments import (
    CallOutcomeUnknown,
    CallSpec,
    PlatformServiceError,
    platform_call_execute,
)
from lab.ids import parse_id
from lab.transitions import TransitionError
from studies.design import tasks_for_places
from studies.models import Platform, Study
from studies.services.studies import StudyError

from .access import PUBLISH, PlatformAccessDenied, access_study
from .calls import reconciler
from .common import OP, access_study_now, actor, publish_platform
from .qualification import mturk_qualification_ensure, mturk_requirements, qualification_test_questions
from .tokens import publication_request_token

logger = logging.getLogger(__name__)
LINK_MODES = ("single", "open")  # single-person links, or one open link
# MTurk's AssignmentDurationInSeconds: 30 seconds to 365 days (API 2017-01-17, CreateHIT).
MTURK_MIN_DURATION_SECONDS, MTURK_MAX_DURATION_SECONDS = 30, 365 * 24 * 3600


def study_worker_url(*, study: Study, platform: str) -> str:
    """The URL a platform sends workers to (the questionnaire's entry view)."""
    return study_entry_url(study, platform=platform)


MAX_ASSIGNMENTS_PER_HIT_ASKED = 1_000_000  # the largest per-HIT size asked, as the API's cost quote reads it


def _asked_per_hit(options: dict) -> int | None:
    """The per-HIT size ``options`` ask for explicitly (``max_assignments_per_hit``), or None; a
    value that is not a whole number from 1 to 1000000 (0, a negative, a fraction, text) is refused
    (``PlatformServiceError`` naming the option and the value), read as the API's cost quote reads it
    (``lab.ids.parse_id``), never split into HITs of one or of the default."""
    asked = (options or {}).get("max_assignments_per_hit")
    if asked in (None, ""):
        return None
    text = str(asked) if isinstance(asked, int) and not isinstance(asked, bool) else asked
    per_hit = parse_id(text, maximum=MAX_ASSIGNMENTS_PER_HIT_ASKED)
    if not per_hit:
        raise PlatformServiceError(f"max_assignments_per_hit {str(asked)[:40]!r} is not a whole number from 1 to "
                                   f"{MAX_ASSIGNMENTS_PER_HIT_ASKED}: nothing was sent")
    return per_hit


def _per_hit(options: dict) -> int:
    asked = _asked_per_hit(options)
    return settings.RL_MTURK_MAX_ASSIGNMENTS_PER_HIT if asked is None else asked


def _hit_sizes_plan(*, name: str, n_tasks: int, options: dict) -> dict:
    """What a new MTurk batch records on its plan of its HITs, fixed for its life: the per-HIT size
    (``max_assignments_per_hit``: the option, else RL_MTURK_MAX_ASSIGNMENTS_PER_HIT now) and the
    assignments of each HIT in order (``hit_sizes``). A resume reads them back
    (``_mturk_batch_sizes``), never the options or setting of its own call. Other platforms: nothing."""
    if name != Platform.MTURK:
        return {}
    per_hit = _per_hit(options)
    return {"max_assignments_per_hit": per_hit, "hit_sizes": split_assignments(n_tasks, per_hit)}


def _mturk_hits_sent(publication: Publication) -> dict[int, int]:
    """{HIT index: assignments} of what ``publication`` made or may have made on MTurk: its recorded
    HITs and its create_hit calls not known to have failed (a failed call applied nothing)."""
    sent = {}
    calls = publication.calls.filter(operation=OP.CREATE_HIT).exclude(status=PlatformCall.Status.FAILED)
    for summary in calls.values_list("request_summary", flat=True):
        if "index" in summary and "max_assignments" in summary:
            sent.setdefault(int(summary["index"]), []).append(int(summary["max_assignments"]))
    for entry in publication.external_ids:
        if entry.get("hit_id") and "max_assignments" in entry:
            sent.setdefault(int(entry["index"]), []).append(int(entry["max_assignments"]))
    return {index: sizes[0] if len(set(sizes)) == 1 else -1 for index, sizes in sent.items()}


def _mturk_batch_sizes(*, publication: Publication, study: Study, options: dict) -> Publication:
    """Under the locks of ``_publication_claim``: the HIT sizes of ``publication`` (an MTurk batch
    still publishing, resumed now) read back from its plan (``_hit_sizes_plan``), and the
    publication returned with them on its plan.

    A resume whose options ask explicitly for a per-HIT size that splits its tasks otherwise is
    refused (``PlatformServiceError`` naming the batch, the size it was started with and the size
    asked): splitting again would skip HITs by index and publish more or fewer assignments than
    its tasks. Without the option, the recorded size is used, whatever the setting says now.

    A batch started before the sizes were recorded (its plan has no ``hit_sizes``) is read as
    its first attempt sent it: the ``max_assignments_per_hit`` option it was started with (kept
    in ``plan["options"]``), else its first HIT's assignments (every HIT but the last holds
    exactly the per-HIT size, and a first HIT that is also the last holds every task), else,
    when nothing was sent for it yet, this call's size. That reading is accepted only when every
    HIT it made or may have made has the size it gives that HIT; otherwise (or when it sent HITs
    but not its first: no reading) it is refused, nothing is sent, and the message says how to
    resume it: with the size it was started with, asked explicitly and checked against what it
    sent. Once read, the sizes are recorded on its plan."""
    plan = dict(publication.plan or {})
    n_tasks = publication.n_tasks
    sent = _mturk_hits_sent(publication)
    what = f"batch {publication.batch} of study {study.name!r} on MTurk"
    made = ", ".join(f"HIT {i + 1}: {s if s >= 0 else 'conflicting sizes'}" for i, s in sorted(sent.items()))
    asked = _asked_per_hit(options)
    if plan.get("hit_sizes") is not None:
        sizes, source = [int(size) for size in plan["hit_sizes"]], None
        per_hit = int(plan.get("max_assignments_per_hit") or max(sizes, default=0))
    else:
        started = _asked_per_hit(plan.get("options") or {})
        if started is not None:
            per_hit, source = started, "the max_assignments_per_hit option it was started with"
        elif 0 in sent and sent[0] > 0:
            per_hit, source = sent[0], "the assignments of its first HIT"
        elif not sent:
            per_hit, source = _per_hit(options), "this publish's (nothing was sent for it yet)"
        elif asked is not None:
            per_hit, source = asked, "the max_assignments_per_hit this publish asks for"
        else:
            raise PlatformServiceError(
                f"{what} was started before its HIT sizes were recorded, and they cannot be read back from what it "
                f"sent ({made}): nothing was sent now. Resume it with the per-HIT size it was started with "
                f"(manage.py publish_study {study.pk} --max-assignments-per-hit N; checked against what it sent), "
                "or close the study to stop it")
        sizes = split_assignments(n_tasks, per_hit)
    wrong = {i: s for i, s in sent.items() if i >= len(sizes) or sizes[i] != s}
    if sum(sizes) != n_tasks or wrong:
        raise PlatformServiceError(
            f"{what} cannot be resumed: HITs of {sizes} (at most {per_hit} assignments each"
            f"{', ' + source if source else ', as recorded'}) do not match its {n_tasks} tasks and what it sent "
            f"({made or 'nothing'}); nothing was sent now. Close the study to stop it")
    if asked is not None and split_assignments(n_tasks, asked) != sizes:
        raise PlatformServiceError(
            f"{what} was started with HITs of at most {per_hit} assignments ({sizes}); this publish asks for "
            f"max_assignments_per_hit {asked}, which would split its {n_tasks} tasks as "
            f"{split_assignments(n_tasks, asked)} and publish more or fewer assignments than its tasks: nothing was "
            f"sent. Publish again without max_assignments_per_hit (or with {per_hit}) to resume it")
    if source is not None:
        logger.warning("%s had no recorded HIT sizes: resumed with HITs of %s, from %s", what, sizes, source)
        plan.update(max_assignments_per_hit=per_hit, hit_sizes=sizes)
        publication.plan = plan
        publication.save(update_fields=["plan", "updated_at"])
    return publication


# The time a worker spends on the platform's clock outside the app's: between accepting the task
# there and the task starting here, and between submitting here and handing the code back there.
# The platform is given the app's deadline plus this, so a worker who finishes in the app's last
# minute is not timed out on the platform while returning.
PLATFORM_HANDOFF_SECONDS = 300


def platform_time_limit(*, study: Study, platform: str, options: dict) -> int:
    """The seconds a worker has on ``platform`` for one task (MTurk's AssignmentDurationInSeconds,
    Prolific's maximum_allowed_time, which its client rounds up to whole minutes): never less than
    the app's own deadline, ``deadlines.assignment_duration`` (the one owner of how long a task may
    take), rounded up to whole seconds, plus ``PLATFORM_HANDOFF_SECONDS`` (getting here from the
    platform and back), and at least MTurk's 30-second minimum. A shorter limit would
    time out on the platform, unpaid, a worker the app still tells "your answers are saved".

    An explicit ``assignment_duration_seconds`` option may be longer, never shorter: a shorter one
    is refused (``PlatformServiceError`` naming both values), before anything is opened or sent."""
    own = assignment_duration(study)
    needed = math.ceil(own.total_seconds()) + PLATFORM_HANDOFF_SECONDS
    asked = options.get("assignment_duration_seconds")
    if asked in (None, ""):
        seconds = needed
    else:
        try:
            seconds = math.ceil(float(asked))
        except (TypeError, ValueError, OverflowError):
            raise PlatformServiceError(
                f"assignment_duration_seconds {str(asked)[:40]!r} is not a number of seconds") from None
        if seconds < needed:
            raise PlatformServiceError(
                f"assignment_duration_seconds {seconds} is shorter than {needed} seconds, the app's own deadline "
                f"for a task of {study.name!r} ({own.total_seconds() / 60:g} minutes: RL_ASSIGNMENT_MINUTES, or four "
                f"times the estimated minutes, at least 30) plus {PLATFORM_HANDOFF_SECONDS} seconds to get here "
                "and back: the platform would time out, unpaid, workers the app still lets finish. Leave the "
                "option out, or give at least that.")
    if platform == Platform.MTURK:
        seconds = max(MTURK_MIN_DURATION_SECONDS, seconds)
        if seconds > MTURK_MAX_DURATION_SECONDS:
            raise PlatformServiceError(
                f"a task of {study.name!r} may take {seconds} seconds, more than MTurk's largest "
                f"AssignmentDurationInSeconds ({MTURK_MAX_DURATION_SECONDS}): lower RL_ASSIGNMENT_MINUTES or the option")
    return seconds


def _task_spec(*, study: Study, platform: str, request_token: str, n_tasks: int, completion_code: str,
               options: dict, time_limit: int) -> TaskSpec:
    """What is sent to the platform; ``time_limit``: ``platform_time_limit``'s seconds; the minutes a
    task takes: ``selectors.cost.platform_minutes``, the ones the quoted hourly pay is read from."""
    minutes = platform_minutes(study=study)
    description = (options.get("description") or study.instructions or "").strip()
    if not description:
        description = (
            "Answer short questions, read a model's explanation, and answer again. "
            f"About {minutes} minutes."
        )
    return TaskSpec(
        title=options.get("title") or study.name,
        description=description[:2000],
        reward=money(study.reward),
        n_tasks=n_tasks,
        estimated_minutes=minutes,
        request_token=request_token,
        worker_url=study_worker_url(study=study, platform=platform),
        lifetime_seconds=int(options.get("lifetime_seconds", 7 * 24 * 3600)),
        assignment_duration_seconds=time_limit,
        auto_approval_delay_seconds=int(options.get("auto_approval_delay_seconds", 3 * 24 * 3600)),
        max_assignments_per_hit=_per_hit(options),
        completion_code=completion_code,
    )


def _mturk_plan(*, spec: TaskSpec, platform: MTurkPlatform, strict: bool) -> list[dict]:
    plan = []
    for index, size in enumerate(split_assignments(spec.n_tasks, spec.max_assignments_per_hit)):
        if strict:
            params = platform.create_hit_params(spec=spec, index=index, max_assignments=size)
        else:
            try:
                params = platform.create_hit_params(spec=spec, index=index, max_assignments=size)
            except PlatformError:
                saved = spec.worker_url
                spec.worker_url = "https://" + saved.split("://", 1)[-1]
                params = platform.create_hit_params(spec=spec, index=index, max_assignments=size)
                spec.worker_url = saved
        plan.append({"operation": "create_hit", "params": params})
    return plan


def _priced_sizes(*, study: Study, name: str, n_tasks: int, options: dict) -> tuple[int, int]:
    """(per-HIT size, tasks) a publish is priced with: for an MTurk batch still publishing (resumed
    now, ``_mturk_batch_sizes``), the ``max_assignments_per_hit`` and tasks recorded on its plan
    (``_hit_sizes_plan``), as ``_publish_mturk`` sends them; else this call's (``_per_hit``)."""
    if name == Platform.MTURK:
        resumed = (Publication.objects.filter(study=study, platform=name, dry_run=False,
                                              status=Publication.Status.PUBLISHING).order_by("-batch").first())
        sizes = (resumed.plan or {}).get("hit_sizes") if resumed is not None else None
        if sizes is not None:
            sizes = [int(size) for size in sizes]
            return int(resumed.plan.get("max_assignments_per_hit") or max(sizes, default=1)), sum(sizes)
    return _per_hit(options), n_tasks


def _next_batch(study: Study, platform: str, dry_run: bool) -> int:
    latest = Publication.objects.filter(study=study, platform=platform, dry_run=dry_run).aggregate(m=Max("batch"))["m"]
    return (latest or 0) + 1


def _mturk_closed_refusal(*, study: Study, name: str) -> str:
    """Why a live publish of ``study`` on ``name`` is refused because MTurk is closed
    (``mturk.mturk_closed_reason``, the one rule), "" when it is not: another platform, MTurk
    treated as open, or a batch of the study still publishing or published on MTurk, which a publish
    resumes or returns (winding down what was made before the closure: nothing new is opened)."""
    if name != Platform.MTURK:
        return ""
    reason = mturk_closed_reason()
    if not reason or Publication.objects.filter(
            study=study, platform=name, dry_run=False,
            status__in=[Publication.Status.PUBLISHING, Publication.Status.PUBLISHED]).exists():
        return ""
    return reason


def _mturk_closed_refuse(*, study: Study, name: str) -> None:
    """Refuse (``PlatformServiceError``) a live publish of ``study`` on ``name`` that
    ``_mturk_closed_refusal`` refuses, saying nothing was sent and what the study still is."""
    closed = _mturk_closed_refusal(study=study, name=name)
    if closed:
        state = "a draft" if study.status == Study.Status.DRAFT else study.get_status_display().lower()
        raise PlatformServiceError(f"study {study.name!r} cannot be published on MTurk: {closed}. Nothing "
                                   f"was sent and the study is still {state}.")


def _study_open_on(*, study: Study, user, name: str) -> Study:
    """Open ``study`` (``study_open``) for a publish on ``name``, in one transaction under the
    study's row lock, taken first: the platform the publish means is checked against the locked row
    (``publish_platform``), and MTurk's closure for it (``_mturk_closed_refuse``), before its units
    are built. A draft switched to another platform (``study_update`` takes the same lock) since the
    publish read it is refused as it is, a draft with no units, never opened on a platform nothing
    will publish it on (its platform fixed at opening)."""
    with transaction.atomic():
        locked = Study.objects.select_for_update().get(pk=study.pk)
        publish_platform(study=locked, platform_name=name)
        _mturk_closed_refuse(study=locked, name=name)
        return study_open(study=study, user=user)


def study_publish(*, study: Study, user, dry_run: bool = False, platform_name: str | None = None,
                  n_tasks: int | None = None, options: dict | None = None) -> Publication:
    """Publish ``study`` on its platform, as ``user``, who needs PAY access to the study
    (``access.access_study``; a dry run too: it records a plan and a cost); a management command
    acts as ``access.OPERATOR``. ``platform_name`` is the platform the caller means (the publish
    page's button, ``publish_study --platform``): refused unless it is the study's own
    (``common.publish_platform``), read from the study's row, and again under its lock when the
    publication is made, so nothing is ever published on a platform the study does not name.

    Idempotent: while a publication of this study on this platform is published or still
    publishing, calling again resumes or returns it, with the same request tokens, so no second
    HIT / Prolific study / link set is made. A dry run builds and logs everything that would be
    sent, stores it on a dry-run publication, and sends nothing.

    A study closed while this runs (``close.study_close``) stops it: nothing more is created,
    what was made is stopped, and the publication is returned closed (status ``closed``, no
    error; a warning is logged saying what was created and stopped).

    ``options``: title, description, max_assignments_per_hit, locales, min_approval_rate,
    lifetime_seconds, assignment_duration_seconds (at least the app's own deadline, which is sent
    without it: ``platform_time_limit``; recorded on the publication's plan as
    ``assignment_duration_seconds``), auto_approval_delay_seconds, link_mode ("single" or "open"),
    require_qualification (default True when the study has a test)."""
    # The study read again is kept for its platform only: study_open changes the caller's object.
    current = access_study(user=user, study=study, access=PUBLISH)
    options = dict(options or {})
    if options.get("link_mode", "single") not in LINK_MODES:
        raise PlatformServiceError(f"link mode {str(options['link_mode'])[:40]!r}: use one of {', '.join(LINK_MODES)}")
    name = publish_platform(study=current, platform_name=platform_name)
    if not dry_run:
        # Before study_open: the study stays as it is (a draft stays a draft), nothing is sent; checked
        # again under the study's lock at the opening (``_study_open_on``).
        _mturk_closed_refuse(study=current, name=name)
    platform = get_platform(name)
    n_tasks = _tasks_to_publish(study=study, platform=platform, n_tasks=n_tasks)
    time_limit = platform_time_limit(study=study, platform=name, options=options)
    per_hit, priced_tasks = (_per_hit(options), n_tasks) if dry_run else _priced_sizes(
        study=study, name=name, n_tasks=n_tasks, options=options)
    cost = study_cost_and_pay(study=study, platform_name=name, max_assignments_per_hit=per_hit,
                              n_tasks=priced_tasks)
    if dry_run:
        return _publish_dry_run(study=study, user=user, name=name, platform=platform, n_tasks=n_tasks,
                                cost=cost, options=options, time_limit=time_limit)
    if study.status != Study.Status.OPEN:
        # The one way to open: units built first; a study that cannot run is refused before
        # anything is sent to a platform.
        try:
            study = _study_open_on(study=study, user=user, name=name)
        except StudyError as exc:
            raise PlatformServiceError(f"study {study.name!r} cannot be published: {exc}") from exc
        # The limit again from the minutes the opening fixed (checked above on the draft, so a refused
        # option opens nothing): what is sent is what the study's tasks get.
        time_limit = platform_time_limit(study=study, platform=name, options=options)
    publication = _publication_claim(study=study, user=user, name=name, platform=platform, n_tasks=n_tasks,
                                     estimate=cost.estimate, options=options)
    if publication.status == Publication.Status.PUBLISHED:
        return publication
    _publication_send(publication=publication, study=study, user=user, name=name, platform=platform,
                      options=options, time_limit=time_limit)
    return _publication_finish(publication=publication, study=study, user=user, name=name)


def _publication_finish(*, publication: Publication, study: Study, user, name: str) -> Publication:
    """Under a lock on ``publication``, after its calls: published, while it is still publishing
    and its study open. Closed meanwhile (or its study closed before the publication was made:
    it is closed with it), the publish stops there: whatever it made that the close did not stop
    is stopped (``publication_recruiting_stop``) and the closed publication is returned.

    An MTurk batch whose HITs' assignments do not add up to its tasks (``_assignments_short``) is
    not marked published: it stays publishing, the reason is kept on its ``error`` and raised."""
    short = ""
    with transaction.atomic():
        locked = Publication.objects.select_for_update().get(pk=publication.pk)
        if locked.status == Publication.Status.PUBLISHED:  # a concurrent publish of this batch finished first
            return locked
        if locked.status == Publication.Status.PUBLISHING:
            if Study.objects.filter(pk=study.pk, status=Study.Status.OPEN).exists():
                short = _assignments_short(locked, study)
                if not short:
                    Publication.STATUS.move(locked, Publication.Status.PUBLISHED, error="")
                    logger.info("published %s on %s (batch %s): %s", study, name, locked.batch, locked.external_ids)
                    return locked
                locked.error = short[:2000]  # kept publishing: never published with more or fewer places
                locked.save(update_fields=["error", "updated_at"])
            else:
                Publication.STATUS.move(locked, Publication.Status.CLOSED, closed_at=timezone.now())
    if short:
        raise PlatformServiceError(short)
    stopped = publication_recruiting_stop(publication=locked, user=user)
    logger.warning(
        "publishing %s on %s (batch %s) stopped: the study was closed meanwhile; the publication is closed, "
        "nothing more was created. Made: %s; stopped now: %s", study, name, locked.batch,
        locked.external_ids or "nothing on the platform", stopped or "nothing more to stop")
    return locked


def _assignments_short(publication: Publication, study: Study) -> str:
    """Why ``publication`` (MTurk) may not be marked published: the assignments of its HITs do not
    add up to its tasks ("" when they do; other platforms: ""). Too few would leave tasks unoffered
    under a batch called published; too many pay for work its tasks do not need."""
    if publication.platform != Platform.MTURK:
        return ""
    hits = [entry for entry in publication.external_ids if entry.get("hit_id")]
    total = sum(int(entry.get("max_assignments", 0)) for entry in hits)
    if total == publication.n_tasks:
        return ""
    made = ", ".join(f"{e['hit_id']} ({e.get('max_assignments', '?')})" for e in hits) or "no HIT"
    then = ("publish again to make the missing HITs, or close the study to stop it" if total < publication.n_tasks
            else "close the study to stop it if the extra assignments are not wanted")
    return (f"batch {publication.batch} of study {study.name!r} on MTurk is not marked published: its HITs hold "
            f"{total} assignments for its {publication.n_tasks} tasks ({made}); {then}")


def _publishing_goes_on(publication: Publication, study: Study, user, *, before: str) -> bool:
    """Before a call that opens places to workers (``before`` names it): True while
    ``publication`` is still publishing and its study open, read under a lock on the publication
    row that is released before the call (never held across a request), and ``user`` may still
    publish the study. False: the study was closed meanwhile, and nothing more may be created
    (``_publication_finish`` ends the publish).

    The right is read afresh each time (``common.access_study_now``: a publish makes one HIT after
    another for minutes, and a share revoked, the permission removed or the account deactivated
    meanwhile stops it before the next call): refused, ``PlatformAccessDenied`` says what was not
    made and why, and ``_publication_send`` records it on the publication's ``error``. What was
    made stays on the publication, as it is after any failed call: it was made while the user had
    the right, and the study's owner decides whether to close the study (which stops it) or to
    publish again (which resumes the batch with the same tokens)."""
    with transaction.atomic():
        locked = Publication.objects.select_for_update().get(pk=publication.pk)
        study_open = Study.objects.filter(pk=study.pk, status=Study.Status.OPEN).exists()
    if locked.status != Publication.Status.PUBLISHING or not study_open:
        return False
    try:
        access_study_now(user=user, study=study, access=PUBLISH)
    except PlatformAccessDenied as exc:
        made = ", ".join(str(e.get("hit_id") or e.get("study_id")) for e in locked.external_ids) or "nothing"
        raise PlatformAccessDenied(
            f"publishing batch {locked.batch} of study {study.pk} stopped before {before}: {exc.message}. Nothing "
            f"more was sent; what it made before ({made}) stays on the batch: someone who may publish the study "
            "resumes it by publishing again, or closes the study to stop it") from exc
    return True


def _tasks_to_publish(*, study: Study, platform, n_tasks: int | None) -> int:
    """The tasks to publish (``n_tasks``, or what the study collects: ``selectors.cost.study_collects``,
    its design while a draft, the units built at opening once open), refused when there are none or
    when the platform moves money and the study has no reward."""
    _, default_tasks = study_task_count(study=study)
    n_tasks = int(n_tasks if n_tasks is not None else default_tasks)
    if n_tasks < 1:
        raise PlatformServiceError(
            f"study {study.name!r} has nothing to publish: add items (and sources) or build its units first"
        )
    if platform.moves_money and study.reward <= 0:
        raise PlatformServiceError(f"study {study.name!r} has no reward: set a reward per task before publishing")
    return n_tasks


def _publication_claim(*, study: Study, user, name: str, platform, n_tasks: int, estimate,
                       options: dict) -> Publication:
    """Under a lock on the study: the publication this publish works on. One published or still
    publishing is returned as it is (resumed, or nothing left to do; an MTurk batch resumed keeps
    the HIT sizes it was made with: ``_mturk_batch_sizes``); else a batch that failed
    before anything was sent is reused, or a new batch is made. ``name`` is checked again against
    the locked row (a draft's platform may have changed since it was read; open now, it is fixed)."""
    with transaction.atomic():
        locked = Study.objects.select_for_update().get(pk=study.pk)
        publish_platform(study=locked, platform_name=name)
        publication = (
            Publication.objects.select_for_update()
            .filter(study=study, platform=name, dry_run=False,
                    status__in=[Publication.Status.PUBLISHING, Publication.Status.PUBLISHED])
            .order_by("-batch").first()
        )
        if publication is not None:
            if publication.status == Publication.Status.PUBLISHING and name == Platform.MTURK:
                return _mturk_batch_sizes(publication=publication, study=locked, options=options)
            return publication
        publication = _failed_batch_reuse(study=study, name=name, platform=platform, n_tasks=n_tasks,
                                          estimate=estimate, options=options)
        if publication is not None:
            return publication
        batch = _next_batch(study, name, dry_run=False)
        return Publication.objects.create(
            study=study, platform=name, batch=batch, dry_run=False,
            request_token=publication_request_token(study=study, platform=name, batch=batch),
            endpoint=platform.endpoint, n_tasks=n_tasks, reward=money(study.reward),
            currency=estimate.currency, estimated_cost=estimate.total, created_by=actor(user),
            plan={"options": options, "estimate": estimate.as_dict(),
                  **_hit_sizes_plan(name=name, n_tasks=n_tasks, options=options)},
        )


def _failed_batch_reuse(*, study: Study, name: str, platform, n_tasks: int, estimate,
                        options: dict) -> Publication | None:
    """A batch that failed before anything was sent (no credentials, low balance) is reused, so
    failed attempts do not pile up batch numbers: moved back to publishing; None when the latest
    batch is not such a one. Call under the study's lock."""
    latest = (Publication.objects.select_for_update()
              .filter(study=study, platform=name, dry_run=False).order_by("-batch").first())
    if (latest is None or latest.status != Publication.Status.FAILED or latest.external_ids
            or latest.calls.exclude(status=PlatformCall.Status.FAILED).exists()):
        return None
    Publication.STATUS.move(latest, Publication.Status.PUBLISHING, n_tasks=n_tasks,
                            reward=money(study.reward), currency=estimate.currency,
                            estimated_cost=estimate.total, endpoint=platform.endpoint,
                            plan={"options": options, "estimate": estimate.as_dict(),
                                  **_hit_sizes_plan(name=name, n_tasks=n_tasks, options=options)})
    return latest


def _publication_send(*, publication: Publication, study: Study, user, name: str, platform, options: dict,
                      time_limit: int) -> None:
    """Create on the platform what ``publication`` still lacks, with ``time_limit`` (seconds,
    ``platform_time_limit``) as each task's limit there, recorded first on its plan
    (``assignment_duration_seconds``; a resumed publish records what it sends now); a failure is
    recorded on it (``_publication_error``) and raised as a ``PlatformServiceError``."""
    try:
        if name == Platform.MTURK:
            _plan_time_limit(publication, time_limit)
            _publish_mturk(publication=publication, study=study, user=user, platform=platform, options=options,
                           time_limit=time_limit)
        elif name == Platform.PROLIFIC:
            _plan_time_limit(publication, time_limit)
            _publish_prolific(publication=publication, study=study, user=user, platform=platform, options=options,
                              time_limit=time_limit)
        else:
            _publish_links(publication=publication, study=study, user=user, options=options)
    except PlatformError as exc:
        _publication_error(publication, exc.message)
        raise PlatformServiceError(f"publishing {study.name!r} on {name} failed: {exc.message}") from exc
    except PlatformServiceError as exc:
        _publication_error(publication, exc.message)
        raise
    except TransitionError as exc:
        # A creation's answer came after sync had settled its call as not applied (a request
        # slower than ``calls.REQUEST_IN_FLIGHT``): what it created is not this publication's,
        # and the error is recorded rather than leaving it "publishing" with none.
        message = (f"publishing {study.name!r} on {name}: a call answered after sync had settled it as not "
                   f"applied ({exc}); what that answer created (a Prolific draft, an MTurk HIT) is not "
                   "this publication's: check the platform for it, then publish again")
        _publication_error(publication, message)
        raise PlatformServiceError(message) from exc


def _plan_time_limit(publication: Publication, seconds: int) -> None:
    """Record on ``publication``'s plan the time limit its platform is sent."""
    with transaction.atomic():
        locked = Publication.objects.select_for_update().get(pk=publication.pk)
        locked.plan = {**(locked.plan or {}), "assignment_duration_seconds": seconds}
        locked.save(update_fields=["plan", "updated_at"])
    publication.plan = locked.plan


def _publication_error(publication: Publication, message: str) -> None:
    """Nothing created yet: the publication failed (a later publish starts a new batch). Something
    created: it stays "publishing" so the next publish resumes with the same tokens. Closed
    meanwhile (``close.study_close``): it stays closed, with the error."""
    with transaction.atomic():
        locked = Publication.objects.select_for_update().get(pk=publication.pk)
        started = locked.external_ids or locked.calls.exclude(status=PlatformCall.Status.FAILED).exists()
        if started or locked.status != Publication.Status.PUBLISHING:
            locked.error = message[:2000]
            locked.save(update_fields=["error", "updated_at"])
        else:
            Publication.STATUS.move(locked, Publication.Status.FAILED, error=message[:2000])


def _publish_dry_run(*, study, user, name, platform, n_tasks, cost, options, time_limit: int) -> Publication:
    estimate = cost.estimate
    batch = _next_batch(study, name, dry_run=False)
    token = publication_request_token(study=study, platform=name, batch=batch)
    completion_code = Publication._meta.get_field("completion_code").default()
    spec = _task_spec(study=study, platform=name, request_token=token, n_tasks=n_tasks,
                      completion_code=completion_code, options=options, time_limit=time_limit)
    warnings: list[str] = []
    requests: list[dict] = []
    if name == Platform.MTURK:
        closed = _mturk_closed_refusal(study=study, name=name)
        if closed:
            warnings.append(f"A live publish of this study on MTurk would be refused: {closed}.")
        if not spec.worker_url.startswith("https://"):
            warnings.append(f"RL_PUBLIC_URL is not https ({settings.RL_PUBLIC_URL}); MTurk would refuse the HIT.")
        test = qualification_test_questions(study)
        qualification = None
        if test is not None and options.get("require_qualification", True):
            instructions, questions, min_score = test
            requests.append({"operation": "create_qualification_type", "params": {
                "Test": question_form_xml(instructions=instructions, questions=questions),
                "AnswerKey": answer_key_xml(questions=questions), "min_score": min_score}})
            qualification = MTurkQualificationType(qualification_type_id="<created on publish>", min_score=min_score)
        spec.qualification_requirements = mturk_requirements(study=study, options=options, qualification=qualification)
        requests.append({"operation": "get_account_balance", "params": {}})
        requests.extend(_mturk_plan(spec=spec, platform=platform, strict=False))
    elif name == Platform.PROLIFIC:
        requests.append({"operation": "POST studies/", "json": platform.study_payload(spec=spec)})
        requests.append({"operation": "POST studies/<id>/transition/", "json": {"action": "PUBLISH"}})
    else:
        mode = options.get("link_mode", "single")
        requests.append({"operation": "make_links", "mode": mode, "count": n_tasks if mode == "single" else 1})
    warnings.extend(cost.warnings)
    plan = {"requests": requests, "estimate": estimate.as_dict(), "warnings": warnings,
            "cost": cost.as_dict(), "endpoint": platform.endpoint, "options": options}
    if name in (Platform.MTURK, Platform.PROLIFIC):
        plan["assignment_duration_seconds"] = time_limit
    with transaction.atomic():
        publication, _ = Publication.objects.update_or_create(
            study=study, platform=name, batch=batch, dry_run=True,
            defaults={"request_token": token, "status": Publication.Status.DRY_RUN, "endpoint": platform.endpoint,
                      "n_tasks": n_tasks, "reward": money(study.reward), "currency": estimate.currency,
                      "estimated_cost": estimate.total, "plan": plan, "created_by": actor(user)},
        )
    logger.info("DRY RUN publish %s on %s: %d request(s) not sent; estimate %s %s", study, name, len(requests),
                estimate.total, estimate.currency)
    return publication


def publication_add_external_id(publication: Publication, entry: dict, key: str, *, user=None) -> Publication:
    """Record one thing created on the platform (a HIT, a Prolific study) on ``publication``; the
    row read under the lock is returned, so its status is the one the record was made under.

    Closed already (the close read the publication before this record: a HIT created while the
    close ran): recorded all the same, then stopped (``publication_recruiting_stop``, as
    ``user``). Recorded before the close moved the publication: the close stops it."""
    with transaction.atomic():
        locked = Publication.objects.select_for_update().get(pk=publication.pk)
        entries = [e for e in locked.external_ids if e.get(key) != entry[key] and e.get("index") != entry.get("index")]
        entries.append(entry)
        locked.external_ids = sorted(entries, key=lambda e: e.get("index", 0))
        locked.save(update_fields=["external_ids", "updated_at"])
    publication.external_ids = locked.external_ids
    if locked.status == Publication.Status.CLOSED:
        publication_recruiting_stop(publication=locked, user=user)
    return locked


# Prolific study statuses in which it recruits no one (and will not by itself).
PROLIFIC_STOPPED = {"UNPUBLISHED", "AWAITING REVIEW", "COMPLETED"}


def publication_recruiting_stop(*, publication: Publication, user) -> list[str]:
    """Stop what was made for ``publication`` (closed) that its close did not stop, as ``user``:
    a publish in flight while the close ran may have made it after the close had read the
    publication. Called by the close once the publication is closed, and by a publish that finds
    it closed (``publication_add_external_id``, ``_publication_finish``): together they stop
    whatever was made, whichever comes second. Idempotent; returns what was stopped now.

    MTurk: each HIT it has (``publication_hits_on_platform``: recorded, or made by a confirmed
    create_hit call the publication never recorded) that the close's expire call (``mturk:close:<request token>``,
    confirmed) did not list as expired is expired on its own audited call,
    ``mturk:expire_hit:<HIT id>`` (sent once). Prolific: its study, when publishing it was ever
    attempted, is asked for its status, and stopped (``prolific:stop_study:<study id>``) unless
    it is already stopped: a stop sent before the publish arrived does not count, so the study's
    status, not the close's call, decides. Links: the publication's unused links are withdrawn
    (its open links deactivated), as ``links.links_close`` does for the study.

    A refusal by the platform is kept on the publication's ``error`` (the admin shows it) and
    raised as a ``PlatformServiceError`` naming what may still be live; closing the study again
    tries once more (``close.study_close``), and the error goes once nothing is left live."""
    stopped = _recruiting_stop(publication=publication, user=user)
    Publication.objects.filter(pk=publication.pk, error__contains=STILL_RECRUITING).update(error="")
    return stopped


# What a failed stop's message says (``_recruiting_stop_failed``): a later stop that succeeds clears it.
STILL_RECRUITING = "may still be recruiting"


def _recruiting_stop(*, publication: Publication, user) -> list[str]:
    publication = Publication.objects.get(pk=publication.pk)
    if publication.status != Publication.Status.CLOSED:
        return []
    if publication.platform == Platform.LINK:
        with transaction.atomic():
            revoked = ParticipantLink.objects.filter(publication=publication, participant__isnull=True,
                                                     revoked=False).update(revoked=True)
            closed = OpenLink.objects.filter(publication=publication, active=True).update(active=False)
        return [f"{n} {what}" for n, what in ((revoked, "link(s) withdrawn"), (closed, "open link(s) closed")) if n]
    platform = get_platform(publication.platform)
    if publication.platform == Platform.MTURK:
        close = PlatformCall.objects.filter(idempotency_key=f"{Platform.MTURK}:close:{publication.request_token}",
                                            status=PlatformCall.Status.CONFIRMED).first()
        expired = set((close.response or {}).get("expired", [])) if close is not None else set()
        todo = [(OP.EXPIRE_HIT, f"{Platform.MTURK}:expire_hit:{hit_id}", {"hit_id": hit_id})
                for hit_id in (entry["hit_id"] for entry in publication_hits_on_platform(publication))
                if hit_id not in expired]
    else:
        study_id = publication.prolific_study_id
        attempted = PlatformCall.objects.filter(
            idempotency_key=f"{Platform.PROLIFIC}:publish_study:{publication.request_token}").exists()
        if not study_id or not attempted:
            return []  # a draft at most: it recruits no one
        try:
            status = platform.get_study(study_id=study_id).get("status", "")
        except PlatformError as exc:
            _recruiting_stop_failed(publication, f"Prolific study {study_id} of {publication} {STILL_RECRUITING}: "
                                                 f"its status could not be read ({exc.message})")
        if status in PROLIFIC_STOPPED:
            return []
        todo = [(OP.STOP_STUDY, f"{Platform.PROLIFIC}:stop_study:{study_id}", {"study_id": study_id})]
    stopped = []
    for operation, key, entry in todo:
        try:
            platform_call_execute(
                spec=CallSpec(platform=publication.platform, operation=operation, idempotency_key=key,
                              request_summary={"external_ids": [entry], "reason": "made while the study was closing"},
                              user=actor(user), study=publication.study, publication=publication),
                send=lambda entry=entry: platform.close(external_ids=[entry]),
                reconcile=reconciler(platform),
            )
        except CallOutcomeUnknown as exc:  # another attempt (the close, or the publish) is sending it now
            logger.info("not stopping %s again: %s", entry, exc.message)
            continue
        except PlatformError as exc:
            what = entry.get("hit_id") or entry.get("study_id")
            _recruiting_stop_failed(publication, f"{what} of {publication} was made while the study was closing "
                                                 f"and {STILL_RECRUITING}: stopping it failed ({exc.message})")
        stopped.append(entry.get("hit_id") or entry.get("study_id"))
    if stopped:
        logger.warning("%s: stopped %s, made while the study was closing", publication, stopped)
    return stopped


def _recruiting_stop_failed(publication: Publication, message: str) -> NoReturn:
    with transaction.atomic():
        locked = Publication.objects.select_for_update().get(pk=publication.pk)
        locked.error = message[:2000]
        locked.save(update_fields=["error", "updated_at"])
    raise PlatformServiceError(message)


def _publish_mturk(*, publication, study, user, platform: MTurkPlatform, options, time_limit: int) -> None:
    external_question_xml(study_worker_url(study=study, platform=Platform.MTURK))  # HTTPS, before anything is sent
    qualification = None
    if options.get("require_qualification", True):
        qualification = mturk_qualification_ensure(study=study, user=user, platform=platform)
    # The batch's HIT sizes as it recorded them when it was made (``_hit_sizes_plan``, read back on a
    # resume by ``_mturk_batch_sizes``), never this call's options or setting: HITs are skipped by index.
    plan = publication.plan or {}
    if plan.get("hit_sizes") is None:
        raise PlatformServiceError(f"batch {publication.batch} of study {study.name!r} on MTurk has no recorded HIT "
                                   "sizes: nothing was sent. Publish again to resume it")
    sizes = [int(size) for size in plan["hit_sizes"]]
    per_hit = int(plan.get("max_assignments_per_hit") or max(sizes, default=1))
    spec = _task_spec(study=study, platform=Platform.MTURK, request_token=publication.request_token,
                      n_tasks=publication.n_tasks, completion_code=publication.completion_code,
                      options={**options, "max_assignments_per_hit": per_hit},
                      time_limit=time_limit)
    spec.qualification_requirements = mturk_requirements(study=study, options=options, qualification=qualification)
    done = {entry["index"] for entry in publication.external_ids if entry.get("hit_id")}
    pending = [(index, size) for index, size in enumerate(sizes) if index not in done]
    if not pending:
        return
    remaining = sum(size for _, size in pending)
    cost = platform.estimate_cost(spec_reward=spec.reward, n_tasks=remaining,
                                  max_assignments_per_hit=spec.max_assignments_per_hit)
    available = platform.balance()
    if available is not None and available < cost.total:
        raise PlatformServiceError(
            f"MTurk balance {available} USD is below the cost of the HITs still to create ({cost.total} USD, fees "
            "included): add funds to the requester account, then publish again"
        )
    for index, size in pending:
        if not _publishing_goes_on(publication, study, user, before=f"HIT {index + 1} of {len(sizes)}"):
            return
        token = platform.hit_token(spec.request_token, index)
        fee = platform.estimate_cost(spec_reward=spec.reward, n_tasks=size, max_assignments_per_hit=size).total
        call = platform_call_execute(
            spec=CallSpec(platform=Platform.MTURK, operation=OP.CREATE_HIT,
                          idempotency_key=f"{Platform.MTURK}:create_hit:{token}",
                          platform_token=token, amount=fee, currency="USD",
                          request_summary={"index": index, "max_assignments": size, "reward": str(spec.reward),
                                           "endpoint": platform.endpoint, "title": spec.title[:128],
                                           "assignment_duration_seconds": spec.assignment_duration_seconds},
                          user=actor(user), study=study, publication=publication),
            send=lambda index=index, size=size: _hit_response(platform.publish(spec=spec, index=index,
                                                                               max_assignments=size)),
            reconcile=reconciler(platform),
        )
        hit_id = _call_hit_id(call)
        if not hit_id:
            found = platform.was_published(spec_token=token)
            if found is None:
                raise PlatformServiceError(f"HIT {index} of {study.name!r} was confirmed but its id is unknown")
            hit_id = found.external_id
        recorded = publication_add_external_id(
            publication, {"index": index, "hit_id": hit_id, "max_assignments": size}, "hit_id", user=user)
        if recorded.status != Publication.Status.PUBLISHING:
            return  # closed while this HIT was being made: it was expired on recording


def _call_hit_id(call: PlatformCall) -> str:
    """The HIT id a confirmed create_hit ``call`` holds: its response's ``HITId`` (``_hit_response``,
    or what a reconciliation recovered, ``calls.reconcile_call``); "" when its answer named none."""
    return (call.response or {}).get("HITId") or ""


def publication_hits_on_platform(publication: Publication) -> list[dict]:
    """Every HIT ``publication`` (MTurk) has on the platform, as ``external_ids`` entries: the HITs it
    recorded, then the HIT of each of its confirmed create_hit calls that was never recorded (the
    process died between MTurk's answer and ``publication_add_external_id``: the HIT is live, the
    publication lists none). What a close expires (``close.study_close``, ``publication_recruiting_stop``)."""
    entries = [entry for entry in publication.external_ids if entry.get("hit_id")]
    known = {entry["hit_id"] for entry in entries}
    calls = publication.calls.filter(operation=OP.CREATE_HIT, status=PlatformCall.Status.CONFIRMED).order_by("pk")
    for call in calls:
        entry = call_hit_entry(call)
        if entry["hit_id"] and entry["hit_id"] not in known:
            known.add(entry["hit_id"])
            entries.append({**entry, "unrecorded": True})
    return entries


def call_hit_entry(call: PlatformCall) -> dict:
    """The publication's ``external_ids`` entry for the HIT a confirmed create_hit ``call`` made:
    its batch index and size (the call's request summary) and its HIT id (``_call_hit_id``; "" when
    the answer named none). What a reconciliation records (``sync``) and a close expires."""
    summary = call.request_summary or {}
    return {"index": summary.get("index", 0), "hit_id": _call_hit_id(call),
            "max_assignments": summary.get("max_assignments", 0)}


def _hit_response(task) -> dict:
    return {"HITId": task.external_id, "recovered": task.recovered, "max_assignments": task.max_assignments,
            **task.response}


def _publish_prolific(*, publication, study, user, platform, options, time_limit: int) -> None:
    spec = _task_spec(study=study, platform=Platform.PROLIFIC, request_token=publication.request_token,
                      n_tasks=publication.n_tasks, completion_code=publication.completion_code, options=options,
                      time_limit=time_limit)
    with transaction.atomic():
        locked = Publication.objects.select_for_update().get(pk=publication.pk)
        locked.plan = {**(locked.plan or {}), "completion_code": publication.completion_code}
        locked.save(update_fields=["plan", "updated_at"])
    if not _publishing_goes_on(publication, study, user, before="its Prolific study's draft"):
        return
    create = platform_call_execute(
        spec=CallSpec(platform=Platform.PROLIFIC, operation=OP.CREATE_STUDY,
                      idempotency_key=f"{Platform.PROLIFIC}:create_study:{publication.request_token}",
                      request_summary={k: v for k, v in platform.study_payload(spec=spec).items() if k != "description"},
                      user=actor(user), study=study, publication=publication),
        send=lambda: {"id": platform.create_study(spec=spec).external_id},
        reconcile=reconciler(platform),
    )
    prolific_id = create.response["id"]
    publication_add_external_id(publication, {"index": 0, "study_id": prolific_id}, "study_id", user=user)
    if not _publishing_goes_on(publication, study, user, before=f"publishing Prolific study {prolific_id}"):
        return  # a draft only: it recruits no one
    estimate = platform.estimate_cost(spec_reward=spec.reward, n_tasks=spec.n_tasks)
    platform_call_execute(
        spec=CallSpec(platform=Platform.PROLIFIC, operation=OP.PUBLISH_STUDY,
                      idempotency_key=f"{Platform.PROLIFIC}:publish_study:{publication.request_token}",
                      amount=estimate.total, currency=estimate.currency,
                      request_summary={"study_id": prolific_id, "action": "PUBLISH", "places": spec.n_tasks,
                                       "reward_minor_units": to_minor_units(spec.reward)},
                      user=actor(user), study=study, publication=publication),
        send=lambda: platform.publish_study(study_id=prolific_id),
        reconcile=reconciler(platform),
    )


def _publish_links(*, publication, study, user, options) -> None:
    """The publication's links (single-person ones, or one open link), made once: every
    concurrent publish works on the same publication (``_publication_claim``), so they are made in
    one transaction that holds the publication's row locked, after checking again under that lock
    that it has none and that the publish goes on (``_publishing_goes_on``: still publishing, the
    study open, ``user`` still may publish). A publish that comes second waits, then finds the
    links and makes none. The study row is locked first (FOR NO KEY UPDATE: consents and claims,
    which hold it FOR KEY SHARE, go on), in ``_publication_claim``'s order, study then
    publication: the links' inserts take a key-share lock on the study, which would otherwise
    deadlock with a publish holding the study in ``_publication_claim`` while it waits for the
    publication. No request leaves the app while the locks are held."""
    mode = options.get("link_mode", "single")
    if publication.participant_links.exists() or publication.open_links.exists():
        return  # made already (a resumed publish): no lock needed to know it
    with transaction.atomic():
        Study.objects.select_for_update(no_key=True).filter(pk=study.pk).values_list("pk").first()
        locked = Publication.objects.select_for_update().get(pk=publication.pk)
        if locked.participant_links.exists() or locked.open_links.exists():
            return  # a concurrent publish made them while this one waited
        if not _publishing_goes_on(publication, study, user, before="its links"):
            return
        if mode == "open":
            open_link_create(study=study, user=user, publication=publication,
                             completion_code=publication.completion_code,
                             max_participants=options.get("max_participants") or publication.n_tasks)
        else:
            links_generate(study=study, n=publication.n_tasks, user=user, publication=publication)


def study_add_assignments(*, study: Study, user) -> dict:
    """MTurk: add assignments to the study's HITs for units still short of their quota, as
    ``user`` (PAY access: it spends the study's budget, ``access.access_study``).

    Needed tasks = the tasks the places still open in units need under the assignment rule (a
    task holds at most one unit of each question: ``studies.design.tasks_for_places``) minus
    assignments still available on the HITs. HITs created with fewer than 10 assignments stay below 10 (MTurk
    refuses to cross that line); what does not fit is reported for a new batch.

    The user's right is read afresh before each call that adds assignments (``common.access_study_now``):
    lost meanwhile, ``PlatformAccessDenied`` names what was added and what was not; nothing more is sent.

    Refused (``PlatformServiceError``) while MTurk is closed (``mturk.mturk_closed_reason``, the one
    rule), read before anything is sent and again before each call: more assignments are new paid work,
    not the winding down of a published batch (syncing, reviewing, paying and stopping it go on)."""
    access_study(user=user, study=study, access=PUBLISH)
    _mturk_closed_no_more_work(study=study, calls=[])
    publication = (Publication.objects.filter(study=study, platform=Platform.MTURK, dry_run=False,
                                              status=Publication.Status.PUBLISHED).order_by("-batch").first())
    if publication is None:
        raise PlatformServiceError(f"study {study.name!r} has no published MTurk batch to extend")
    platform = get_platform(Platform.MTURK)
    places = dict(Unit.objects.filter(study=study).values_list("question_key")
                  .annotate(open=Sum(Greatest(F("quota") - F("n_claimed"), Value(0)))).order_by())
    needed = tasks_for_places(places=places, units_per_task=study.units_per_task)
    hits = [(entry, platform.get_hit(hit_id=entry["hit_id"])) for entry in publication.external_ids
            if entry.get("hit_id")]
    available = sum(hit.get("NumberOfAssignmentsAvailable", 0) for _, hit in hits)
    to_add = needed - available
    added, calls = 0, []
    for entry, hit in hits:
        if to_add <= 0:
            break
        current = hit.get("MaxAssignments", 0)
        cap = 9 if current < 10 else 10_000
        room = cap - current
        if room <= 0:
            continue
        n = min(room, to_add)
        target = current + n
        token = f"{publication.request_token}-x{entry['index']}-{target}"[:64]
        try:
            access_study_now(user=user, study=study, access=PUBLISH)
        except PlatformAccessDenied as exc:
            raise PlatformAccessDenied(
                f"adding assignments to study {study.pk} stopped before HIT {entry['hit_id']}: {exc.message}. "
                f"Nothing more was sent; added before: {calls or 'nothing'}") from exc
        _mturk_closed_no_more_work(study=study, calls=calls)
        platform_call_execute(
            spec=CallSpec(platform=Platform.MTURK, operation=OP.ADD_ASSIGNMENTS,
                          idempotency_key=f"{Platform.MTURK}:add_assignments:{entry['hit_id']}:to{target}",
                          platform_token=token,
                          amount=platform.estimate_cost(spec_reward=study.reward, n_tasks=n,
                                                        max_assignments_per_hit=target).total,
                          request_summary={"hit_id": entry["hit_id"], "n": n, "target_max_assignments": target},
                          user=actor(user), study=study, publication=publication),
            send=lambda hit_id=entry["hit_id"], n=n, token=token: platform.add_assignments(
                hit_id=hit_id, n=n, token=token),
            reconcile=reconciler(platform),
        )
        added += n
        to_add -= n
        calls.append({"hit_id": entry["hit_id"], "added": n})
    return {"needed": needed, "available": available, "added": added, "not_placed": max(0, to_add), "hits": calls}


def _mturk_closed_no_more_work(*, study: Study, calls: list[dict]) -> None:
    """Refuse (``PlatformServiceError``) adding assignments to ``study``'s HITs while MTurk is closed
    (``mturk_closed_reason``), naming what was added before (``calls``) and that nothing more is sent."""
    closed = mturk_closed_reason()
    if closed:
        raise PlatformServiceError(
            f"study {study.name!r} cannot get more MTurk assignments: {closed}. Nothing more was sent; added "
            f"before: {calls or 'nothing'}. Its published HITs are still synced, reviewed, paid and stopped.")


def platform_balance(*, user, study: Study, platform_name: str):
    """The balance of the lab's account on ``platform_name`` (None: the platform has no balance
    call), for ``user`` on ``study``'s publish page: only for one who may publish it (``PUBLISH``,
    checked here: ``PlatformAccessDenied`` otherwise), as the money it names is what they would
    spend. Before, anyone with a view share had the page ask the platform and show the shared
    account's balance. ``PlatformError`` from the platform as it comes."""
    access_study(user=user, study=study, access=PUBLISH)
    return get_platform(platform_name).balance()
