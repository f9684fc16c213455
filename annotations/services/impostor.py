"""A task someone else started with a Prolific worker's id, ended when the worker arrives.

Prolific's entry URL (``PROLIFIC_PID``, ``STUDY_ID``, ``SESSION_ID``) is unauthenticated. Anyone who
knows a worker's Prolific id can enter first with it and an invented ``SESSION_ID``; the real
worker, arriving from Prolific with their real one, then meets a task in progress bound to
another platform assignment and is refused (``entry.task_in_progress``) until it expires.

"Verify on conflict": only then, and only on Prolific, the platform is asked (two reads of
``GET submissions/<id>/``, moving nothing) before the refusal. The task is ended only when
Prolific both

- confirms the entry's session (B) as a submission of one of this study's Prolific studies
  (``study_platform_task_ids``) by this very participant, and
- denies the task's session (A): not found (``PlatformNotFound``), or filed under another
  participant or a study that is not this study's.

Anything else keeps the refusal: Prolific cannot be asked (no token, network trouble, throttling,
another error, no Prolific study published), B is not the participant's submission of this study,
or A is theirs too (they returned and took the study again on Prolific: the task is theirs). So an
impostor cannot end a genuine worker's task through this path: it needs Prolific to vouch for the
session they came with. B is asked first; a B Prolific does not vouch for costs one read, never
two. The usual entry sends no request to Prolific and no statement more.

The platform is asked outside any transaction (no row lock is held over a network call); the
task is then locked and ended only if it is still that participant's active task bound to A
(the impostor may have moved it meanwhile, another entry of the worker may have ended it). It
ends ``returned`` through the release rules (``release.assignments_end_in_progress``: its claimed slots
go back, its answers never count), marked ``ended_as_impostor`` so its researchers see why.

The qualification test is the same hole, worse: it is graded once per worker and study, and a
failed grant refuses the worker every task of the study (``assignment.assignment_start``), so an
impostor who fails it on purpose would shut the worker out for good. A consent refused because
the participant failed the test (``NotQualified``) is checked the same way
(``impostor_grant_void``): the grant records the task it was taken in, and when Prolific confirms
the entry's session and denies that task's, the failed grant is deleted (the study's one attempt
was not the worker's) and the task, returned when the test was failed, is marked
``ended_as_impostor``; the entry then goes on, and the worker takes the test themselves. A passed
grant, a grant that records no task (taken before tasks were recorded) or one taken under the
entry's own session is never touched. Nor is a failed grant voided when the entering browser
proves it held the task the test was failed in (its study cookie names that task: the same browser
failed it, so no impostor did), nor a second time for one participant of a study: a worker could
otherwise fail the test under an invented session, void it with their real one, and take it again
as often as they like. The record of a void is the task it marked (``ended_as_impostor`` while its
test was still pending, ``qualification_pending``; no migration). A task ended at the entry
(``impostor_task_end``) before its test was taken reads the same, so after one the next failed
test stands too: Prolific's word sets aside at most one attempt per participant and study. Both
checks ask Prolific through one rule (``prolific_vouches``).

The entry is anonymous, so these reads are bounded (``_session_verdict``), or anyone could spend the
researcher's Prolific rate limit (which sync, approval and bonuses need) and hold a web worker up to
the API's timeout on each request, by entering again and again with a worker's id, an invented
session each time, while a task of that id is in progress. A definite answer (THEIRS, NOT_THEIRS;
never UNKNOWN) is remembered in Django's cache for ``VERDICT_SECONDS`` (10 minutes), keyed by study,
participant and session, so the worker reloading the page asks nothing again (whoever asks: a
session's owner does not depend on who asks). Reads that reach Prolific are counted per participant,
study and client address (the request's, as ``lab.clientip.client_ip`` computes it, honouring
``RL_TRUSTED_PROXIES``; the views pass it as ``client``): at most ``CHECKS_MAX`` (6) from one address
in ``CHECKS_WINDOW_SECONDS`` (10 minutes, a fixed window from the first read, counted atomically:
``cache.add`` then ``cache.incr``); beyond that the answer is UNKNOWN without asking, so nothing is
vouched for and nothing ends, and that address's entry keeps its refusal until its window ends. The
budget is the address's own, not the participant's: counted per participant alone, an impostor who
spent the six reads with invented sessions at the start of each window kept the real worker's entry,
from anywhere, from ever being checked, their task from ever ending and a failed test they took on
purpose from ever being voided. One address still asks at most six times per participant and
window; the real worker, from their own address, has a budget no one else spends (sharing an
address with the impostor, they share its budget). A caller that passes no client (a script, a
test) counts under ``NO_CLIENT``, one budget of its own. An address is counted by its network
(an IPv6 /64, which one host holds whole, so it cannot multiply its budget by its addresses). There
is no ceiling across networks: an impostor's few networks could spend it and hold the real worker's
entry back, the lockout the per-network count exists to prevent; an attacker with many IPv4 networks
gets six reads from each. A worker's own checks take two reads (B,
then A), and two or three more if a failed test is to be voided; six leave room for a retry after
network trouble. With ``REDIS_URL`` set the cache is Redis (``config/settings``), so every
gunicorn process counts together; in process memory otherwise (each process counts its own).

MTurk and typed participant identifiers have no platform to ask, and the lockout is the same: anyone
may enter with a worker's MTurk id (an invented ``assignmentId``, the public ``hitId``) or type a
participant's identifier on a plain or open link (``alice@lab.org``), fail the test on purpose, and
the participant would be refused every task of the study. A failed grant taken under such an
identity (``participants.identity_unauthenticated``) therefore refuses only the browser that took
it: the one whose signed study cookie names the task the test was failed in (``held_task_id``, the
proof the worker pages go by: ``worker_pages.browser_holds``; the rule is
``participants.failed_grant_refuses_browser``, which a typed identifier goes by too). An entry from
a browser whose cookie does not name that task (another browser, a private window, cleared cookies)
sets the attempt aside and takes the test again (``grant_for_retake``, then ``grant_retake_start``
in the transaction that starts the new task, so a refused start sets nothing aside). The attempt is
not lost: the grant keeps it in ``QualificationGrant.voids`` (its task, grade and answers, when it
was set aside, the task given to retake it), and stays failed until the retake is graded
(``qualification.qualification_submit`` then replaces its result). The researcher sees every
attempt (the grant's admin page). The app cannot tell the worker from an impostor, so the worker
may use this too: at most ``participants.RETAKES_MAX`` failed attempts are set aside per participant
and study; the next failed one refuses every browser (``RETAKES_USED``). A grant that records no
task (from before tasks were recorded, or imported) names no browser, and its refusal stands.
Prolific keeps the rule above; a single-person link's participant and an anonymous browser's are
proved by the link or the browser itself, and a failed test refuses them whatever the browser.
"""
from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from annotations.models import Assignment, Participant, QualificationGrant
from annotations.platforms import get_platform
from annotations.platforms.base import PlatformError, PlatformNotFound
from annotations.selectors import participant_blocked
from annotations.selectors.platforms import study_platform_task_ids
from annotations.services.errors import NotQualified, ParticipantBlocked
from annotations.services.participants import (
    NOT_AVAILABLE,
    RETAKES_MAX,
    failed_grant_refuses_browser,
    participant_lock,
    retakes_used,
)
from annotations.services.release import assignments_end_in_progress, deadline_passed
from studies.models import Platform, Study

logger = logging.getLogger(__name__)

# What Prolific says about a session: the participant's submission of this study, someone else's
# (not found, another participant, another study), or nothing we can rely on.
THEIRS, NOT_THEIRS, UNKNOWN = "theirs", "not theirs", "unknown"

# How long a definite answer about a session is remembered, and how many reads of Prolific the
# entries of one participant from one client address may make in one study per window (the
# module's docstring says why). A caller with no client address (a script, a test) counts under
# NO_CLIENT, a budget of its own.
VERDICT_SECONDS = 10 * 60
CHECKS_MAX = 6
CHECKS_WINDOW_SECONDS = 10 * 60
NO_CLIENT = "no-client"

RETAKES_USED = (
    "This study's qualification test was taken under your identity {attempts} times (from different browsers) "
    "without reaching the pass mark: that is as often as it may be taken, so it cannot offer you tasks. "
    "Thank you for your time."
)


def impostor_task_end(*, study: Study, participant: Participant, task: Assignment,
                      platform_assignment_id: str, client: str = NO_CLIENT) -> bool:
    """Whether ``task``, ``participant``'s task in progress in ``study``, no longer stands in the
    way of this entry because it was started by an impostor: the entry came with
    ``platform_assignment_id`` (a validated Prolific ``SESSION_ID``, B) while the task is bound to
    another (A), and the entry may not resume it (``entry.may_resume`` said no). Returns False,
    changing nothing, unless Prolific confirms B as the participant's submission of this study and
    denies A (the module's rule). Then the task is ended (``returned``, ``ended_as_impostor``) if it
    is still active and bound to A under its row lock, and True is returned; also when it ended
    meanwhile (another entry of the worker ended it first), so the caller goes on as if there were
    no task in progress. A task moved to another session meanwhile is left alone (False).
    ``client``: the entry's client address (``lab.clientip.client_ip``), whose read budget the
    reads spend (``prolific_vouches``). Makes network calls: call outside any transaction, holding
    no row lock."""
    denied = task.platform_assignment_id
    if task.participant_id != participant.pk:
        return False
    if not prolific_vouches(study=study, participant=participant, session=platform_assignment_id, denied=denied,
                            client=client):
        return False
    return _task_end(study=study, participant=participant, task_id=task.pk, platform_assignment_id=denied)


def prolific_vouches(*, study: Study, participant: Participant, session: str, denied: str,
                     client: str = NO_CLIENT) -> bool:
    """Whether Prolific confirms ``session`` (B, the entry's validated ``SESSION_ID``) as
    ``participant``'s submission of one of ``study``'s Prolific studies and denies ``denied`` (A,
    the session a task was started with): the module's rule, the one answer both checks here
    give. False, asking nothing, unless the participant is a Prolific worker, both sessions are
    given and differ, and the study has a Prolific study published. B is asked first, so a B
    Prolific does not vouch for costs one read. The reads spend ``client``'s budget (the entry's
    client address, ``lab.clientip.client_ip``; ``NO_CLIENT`` when there is none:
    ``_prolific_read_allowed``), never another address's. Makes network calls: call outside any
    transaction, holding no row lock."""
    if participant.platform != Platform.PROLIFIC or not session or not denied or denied == session:
        return False
    own = {study_id.lower() for study_id in study_platform_task_ids(study=study, platform=Platform.PROLIFIC)}
    if not own:
        return False  # no Prolific study published: no session is this study's
    if _session_verdict(session, study=study, participant=participant, own=own, client=client) != THEIRS:
        return False
    return _session_verdict(denied, study=study, participant=participant, own=own, client=client) == NOT_THEIRS


def impostor_grant_void(*, study: Study, participant: Participant, platform_assignment_id: str,
                        held_task_id: int | None = None, client: str = NO_CLIENT) -> bool:
    """Whether ``participant``'s failed qualification grant in ``study`` no longer stands in the
    way of this entry (which ``assignment_start`` refused with ``NotQualified``) because an impostor
    took the test: the entry came with ``platform_assignment_id`` (a validated Prolific
    ``SESSION_ID``, B), the grant was taken in a task of the participant bound to another session
    (A), and Prolific confirms B and denies A (``prolific_vouches``). Returns False, changing
    nothing, otherwise: not Prolific, no failed grant, a grant that records no task (taken before
    tasks were recorded) or one taken under B, a grant taken in the task this browser's study cookie
    names (``held_task_id``: this browser failed it, no impostor did), or a participant whose failed
    test was voided before in this study (``_voided_before``: at most one void each). Then the
    failed grant is deleted, if it is still that grant (failed, taken in that task), and its task
    (returned when the test was failed) is marked ``ended_as_impostor``, and True is returned; also
    when the failed grant went meanwhile (another entry of the worker voided it first), asking
    nothing, so the caller decides the entry again (also when a withdrawal erased it: the start
    then refuses the withdrawn worker). The worker's row is locked (``participant_lock``) before the
    grant is deleted, in a withdrawal's order. A passed grant is never touched. ``client``: the
    entry's client address, whose read budget the reads spend (``prolific_vouches``). Reads two rows,
    then makes network calls: call outside any transaction, holding no row lock. An identity the app
    cannot authenticate (an MTurk worker id, a typed identifier) has no platform to ask: its failed
    test is set aside by ``grant_for_retake`` and ``grant_retake_start``."""
    if participant.platform != Platform.PROLIFIC or not platform_assignment_id:
        return False
    grant = (QualificationGrant.objects.filter(study_id=study.pk, participant_id=participant.pk, passed=False)
             .values_list("pk", "assignment_id", "assignment__study_id", "assignment__participant_id",
                          "assignment__platform_assignment_id").first())
    if grant is None:
        return True  # the failed grant that refused the entry went meanwhile (another entry voided it)
    grant_id, task_id, task_study_id, task_participant_id, denied = grant
    if task_id is None or (task_study_id, task_participant_id) != (study.pk, participant.pk):
        return False  # taken in no recorded task (before tasks were recorded): the refusal stands
    if held_task_id is not None and held_task_id == task_id:
        return False  # this browser was sent to the task the test was failed in: the attempt was its own
    if _voided_before(study=study, participant=participant, task_id=task_id):
        logger.warning("study %s: the failed qualification test taken in task %s stands: a failed test of its "
                       "participant was voided in this study before", study.pk, task_id)
        return False
    if not prolific_vouches(study=study, participant=participant, session=platform_assignment_id, denied=denied,
                            client=client):
        return False
    with transaction.atomic():
        # The worker's row first, in the withdrawal's order (it locks them, their tasks, then deletes
        # their grants): a void holding the grant while waiting for the task deadlocked with it.
        participant_lock(participant.pk)
        voided, _by_model = QualificationGrant.objects.filter(pk=grant_id, passed=False, assignment_id=task_id).delete()
        if not voided:
            return True  # voided meanwhile (the worker's other entry, or their withdrawal): decide the entry again
        Assignment.objects.filter(pk=task_id, status=Assignment.Status.RETURNED).update(ended_as_impostor=True)
    logger.warning("study %s: the failed qualification test taken in task %s was voided at its participant's "
                   "entry: Prolific denied the session that task was started with and confirmed the one the "
                   "participant came with", study.pk, task_id)
    return True


def grant_for_retake(*, study: Study, participant: Participant, held_task_id: int | None,
                     refusal: NotQualified) -> QualificationGrant | None:
    """The failed qualification grant of ``participant`` (an identity the app cannot authenticate:
    ``participants.identity_unauthenticated``) in ``study`` that this entry sets aside to take the
    test again (``grant_retake_start``), the browser's study cookie naming ``held_task_id``; None when
    no failed grant is left (it went meanwhile: the entry is decided afresh). Raises ``refusal`` (the
    start's ``NotQualified``) when the grant refuses this browser (``participants.failed_grant_refuses_browser``:
    its cookie names the task the test was failed in, or the grant records no task), and
    ``NotQualified`` (``RETAKES_USED``) when ``RETAKES_MAX`` failed attempts were set aside already.
    Writes nothing. One read."""
    grant = QualificationGrant.objects.filter(study_id=study.pk, participant_id=participant.pk, passed=False).first()
    if grant is None:
        return None
    if failed_grant_refuses_browser(participant=participant, grant=grant, held_task_id=held_task_id):
        if grant.assignment_id is not None and held_task_id != grant.assignment_id and retakes_used(grant):
            raise NotQualified(RETAKES_USED.format(attempts=len(grant.voids) + 1))
        raise refusal
    return grant


def grant_retake_start(*, study: Study, participant: Participant, grant: QualificationGrant,
                       start: Callable[[], Assignment]) -> Assignment:
    """The task ``start()`` gives ``participant`` to take ``study``'s qualification test again,
    ``grant`` (their failed grant, ``grant_for_retake``) set aside for it: call inside the transaction
    that starts the task (``entry._consent_decide``), so a refused start (no work left, a closed
    study) rolls the void back and the failed grant stands as it was. The grant is deleted for the
    start (a failed grant refuses it: ``assignment._qualification_pending``), if it is still that
    failed attempt, and written back as it was once the task exists, with the attempt recorded in
    its ``voids`` (its task, grade, answers, when it was taken and set aside) and the new task as its
    retake (``retake_task``), whose graded attempt then takes its place
    (``qualification.qualification_submit``). An attempt set aside before whose retake was never
    graded (that task expired or was returned) is not recorded twice: its retake becomes the new
    task. A grant that changed meanwhile (another entry set it aside) is left alone: the start
    decides. The task the attempt was taken in keeps its status (returned) and no mark: who took it
    is unknown.

    The worker's row is locked first (``selectors.participant_blocked``, ``lock``, as the start
    itself locks it), before the grant is touched: a withdrawal (``withdrawal.participant_withdraw``)
    locks that row ``FOR UPDATE`` and only then deletes the worker's grants, so a retake that held
    the grant while it waited for the row deadlocked with it on PostgreSQL. Now one waits for the
    other: a withdrawal that locked first makes the retake wait and then refuse it
    (``ParticipantBlocked``, the start's refusal of a blocked or withdrawn worker), nothing set
    aside; one that comes after waits and erases the retake's task and grant."""
    if participant_blocked(participant=participant, study=study, lock=True):
        raise ParticipantBlocked(NOT_AVAILABLE)
    taken_in = grant.assignment_id
    deleted, _by_model = QualificationGrant.objects.filter(pk=grant.pk, passed=False, assignment_id=taken_in).delete()
    task = start()
    if not deleted:
        return task
    voids = list(grant.voids or ())
    if grant.set_aside:
        voids[-1] = {**voids[-1], "retake_task": task.pk}
    else:
        voids.append({"task": taken_in, "score": grant.score, "answers": grant.answers,
                      "taken_at": grant.created_at.isoformat(), "voided_at": timezone.now().isoformat(),
                      "retake_task": task.pk})
    QualificationGrant.objects.create(pk=grant.pk, study_id=grant.study_id, participant_id=grant.participant_id,
                                      passed=False, score=grant.score, answers=grant.answers,
                                      assignment_id=taken_in, voids=voids)
    QualificationGrant.objects.filter(pk=grant.pk).update(created_at=grant.created_at)  # not the write's time
    logger.warning("study %s: the failed qualification test of participant %s (%s), taken in task %s, was set aside "
                   "(%s of %s) at an entry from a browser whose study cookie does not name that task: that identity "
                   "is not authenticated, the test is taken again in task %s", study.pk, participant.pk,
                   "an MTurk worker id" if participant.platform == Platform.MTURK else "a typed identifier", taken_in,
                   len(voids), RETAKES_MAX, task.pk)
    return task


def _voided_before(*, study: Study, participant: Participant, task_id: int) -> bool:
    """Whether a failed qualification test of ``participant`` in ``study``, taken in another task
    than ``task_id``, was voided before (one read). The record is the task a void marks
    ``ended_as_impostor``: returned when its test was failed, so its test is still pending
    (``qualification_pending``, cleared only by passing). A task ended at the entry
    (``impostor_task_end``) before its test was taken reads the same and counts alike: Prolific's
    word sets aside at most one attempt at the test each participant did not make."""
    return (Assignment.objects.filter(study_id=study.pk, participant_id=participant.pk, ended_as_impostor=True,
                                      qualification_pending=True)
            .exclude(pk=task_id).exists())


def _session_verdict(session: str, *, study: Study, participant: Participant, own: set[str], client: str) -> str:
    """What Prolific says about ``session``: THEIRS (a submission of one of ``study``'s Prolific
    studies ``own`` by ``participant``), NOT_THEIRS (not found, or filed under another participant
    or another study), UNKNOWN (it could not be asked, or its answer names no study or participant,
    or the entries of ``participant`` from ``client`` used up their reads in ``study``:
    ``_prolific_read_allowed``). A definite answer is remembered for ``VERDICT_SECONDS`` and given
    again without asking, whatever the client."""
    key = f"rl:impostor:verdict:{_study_key(study)}:{participant.pk}:{session}"
    remembered = cache.get(key)
    if remembered in (THEIRS, NOT_THEIRS):
        return remembered
    if not _prolific_read_allowed(study=study, participant=participant, client=client):
        logger.warning("study %s: entries of participant %s from one client address made %s reads of Prolific "
                       "within %s seconds: session %s is not asked, the entry keeps its refusal", study.pk,
                       participant.pk, CHECKS_MAX, CHECKS_WINDOW_SECONDS, session)
        return UNKNOWN
    verdict = _prolific_verdict(session, participant=participant, own=own)
    if verdict != UNKNOWN:
        cache.set(key, verdict, timeout=VERDICT_SECONDS)
    return verdict


def _study_key(study: Study) -> str:
    """The study's part of a cache key: its entry token (``Study.entry_token``, random and never
    reused), not its id, which a database restored elsewhere, or recreated, gives to another study."""
    return study.entry_token


def _prolific_read_allowed(*, study: Study, participant: Participant, client: str) -> bool:
    """Whether one more read of Prolific may be made for ``participant``'s entry to ``study`` from
    ``client`` (its address; ``NO_CLIENT`` when empty): at most ``CHECKS_MAX`` in a window of
    ``CHECKS_WINDOW_SECONDS`` from the first, counted for that network alone (``_client_network``: an
    IPv4 address, an IPv6 /64, which one host holds whole), so one client never spends another's
    reads. There is no ceiling across networks: one spent by an impostor's few addresses would hold
    the real worker's entry back, the lockout this count exists to prevent. Counted in Django's
    cache (``add`` starts a window, ``incr`` counts atomically, in Redis across processes)."""
    return _window_count(f"rl:impostor:reads:{_study_key(study)}:{participant.pk}:{_client_network(client)}") \
        <= CHECKS_MAX


def _window_count(key: str) -> int:
    """The reads counted under ``key`` in its window, this one included."""
    cache.add(key, 0, timeout=CHECKS_WINDOW_SECONDS)
    try:
        return cache.incr(key)
    except ValueError:  # the window ended between the two calls: this read starts the next one
        cache.add(key, 1, timeout=CHECKS_WINDOW_SECONDS)
        return 1


def _client_network(client: str) -> str:
    """The network a client address's reads are counted for: the address itself (IPv4), its /64
    (IPv6: one host or customer is given a whole /64), ``NO_CLIENT`` for none or text that is no
    address."""
    try:
        address = ipaddress.ip_address((client or "").strip())
    except ValueError:
        return NO_CLIENT
    if address.version == 6:
        if address.ipv4_mapped is not None:  # ::ffff:a.b.c.d is the IPv4 address a.b.c.d
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def _prolific_verdict(session: str, *, participant: Participant, own: set[str]) -> str:
    """What Prolific answers about ``session`` (``_session_verdict``), asked now: one read."""
    platform = get_platform(Platform.PROLIFIC)
    try:
        owner = platform.assignment_owner(platform_assignment_id=session)
    except PlatformNotFound:
        return NOT_THEIRS
    except PlatformError:  # no token, network trouble, throttling, another refusal: no answer
        return UNKNOWN
    study_id, worker_id = owner or ("", "")
    if not study_id or not worker_id:
        return UNKNOWN
    if study_id.lower() in own and worker_id.lower() == participant.external_id.lower():
        return THEIRS
    return NOT_THEIRS


def _task_end(*, study: Study, participant: Participant, task_id: int, platform_assignment_id: str) -> bool:
    """End the task ``task_id`` as an impostor's if, once its row is locked, it is still
    ``participant``'s active task in ``study`` bound to ``platform_assignment_id``. True when it was
    ended here or is no longer in progress (ended meanwhile); False when it was moved to another
    session meanwhile (still in progress, not the one Prolific denied). A task whose deadline passed
    meanwhile (Prolific is asked first) ends expired, unmarked, as the expiry sweep would end it
    (``release.assignments_end_in_progress``), and is logged as such."""
    now = timezone.now()  # one instant for the release and the log: both read the deadline at it
    with transaction.atomic():
        row = (Assignment.objects.select_for_update().filter(pk=task_id, study_id=study.pk, participant_id=participant.pk)
               .values_list("status", "platform_assignment_id", "expires_at").first())
        if row is None or row[0] != Assignment.Status.ACTIVE:
            return True  # ended meanwhile (the worker's other entry, its deadline, a withdrawal): not in the way
        if row[1] != platform_assignment_id:
            return False
        assignments_end_in_progress([(task_id, row[0], row[2])], status=Assignment.Status.RETURNED, now=now,
                                    ended_as_impostor=True)
    if deadline_passed(row[2], now):
        logger.warning("study %s: task %s ended expired at its participant's entry: its deadline had passed "
                       "when Prolific denied the session it was started with, so it is not marked as an "
                       "impostor's", study.pk, task_id)
    else:
        logger.warning("study %s: task %s ended at its participant's entry: Prolific denied the session it was "
                       "started with and confirmed the one the participant came with", study.pk, task_id)
    return True
