"""Participants: who a worker is on their platform, and the link-based ways in.

A participant is a platform id (MTurk WorkerId, Prolific PID, both validated by
``annotations.platforms.handoff``), a single-person link's holder, an anonymous browser on a
plain or open link, or a person who typed a participant identifier there (stored only as a
keyed hash of it).

A browser that proves it worked in a study as a link participant (its study cookie names a task
of that participant that the browser started itself, ``task_started_in_browser``) is that
participant on the study's single-person links it opens next (``participant_link_redeem``): the
assignment policy's "no question twice" then holds across those links. What is not recognised:
another browser, cleared cookies, a participant known only by a typed identifier (typing it proves
nothing), and a browser handed a task in progress through its single-person link (the link is its
credential: the cookie that browser gets names the task, but proves no more than the link did).
A browser whose study cookie names a participant who withdrew from the study gets no task on a
single-person link it opens next, as on the plain and open links, though the withdrawal deleted the
task that cookie names (``participant_link_redeem``); the link stays unused.

A typed identifier never makes a browser a second participant beside the one its study cookie
proves (``participant_identified_in_browser``): while that participant has a task in progress in
the study, or after they failed its qualification test, another identifier is refused, so one
browser neither holds two tasks on the same units at once nor retakes a failed test."""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import unicodedata

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac

from annotations.models import (
    Assignment,
    ConsentReceipt,
    OpenLink,
    Participant,
    ParticipantLink,
    PlatformAssignmentBinding,
    QualificationGrant,
)
from annotations.selectors import entry as selectors_entry
from annotations.selectors import participant_withdrawn
from annotations.services.errors import (
    AnnotationError,
    NotQualified,
    ParticipantBlocked,
    StudyNotOpen,
    TaskInProgress,
)
from studies.models import Platform, Study

# A lab id or an e-mail address: letters, digits and . _ - + @, at most 254 characters.
IDENTIFIER_FORMAT = re.compile(r"[\w.+@-]{1,254}", re.ASCII)
IDENTIFIER_PREFIX = "idh-"
OTHER_TASK_IN_PROGRESS = (
    "This browser has another task of this study in progress. Finish it (or return it) first, then "
    "open this link again: it will give you questions you have not seen yet."
)
OTHER_PARTICIPANT_IN_PROGRESS = (
    "This browser has a task of this study in progress as another participant (without this participant "
    "identifier, or with another one). One browser takes part as one participant at a time: finish that "
    "task (or return it) first."
)
# The refusal of a blocked or withdrawn participant (``assignment.assignment_start``, ``_refuse_withdrawn_browser``).
NOT_AVAILABLE = "This study is not available to your account."
# How many failed qualification attempts of one participant in one study may be set aside because
# they were taken from another browser (``failed_grant_refuses_browser``); the next failed one stands
# everywhere.
RETAKES_MAX = 3
FAILED_TEST_IN_THIS_BROWSER = (
    "This browser took this study's qualification test and did not reach the pass mark, so it cannot "
    "offer you tasks, with this participant identifier or another one. Thank you for your time."
)


class IdentityMismatch(AnnotationError):
    """A platform assignment id arrived with another worker id than the one it belongs to."""

    status = 403


class InvalidIdentifier(AnnotationError):
    status = 400


def participant_get_or_create(*, platform: str, external_id: str) -> Participant:
    """The participant with this platform id, created on first sight (safe under races).
    ``external_id`` must be validated by the caller (``handoff.arrival_parse``)."""
    participant = Participant.objects.filter(platform=platform, external_id=external_id).first()
    if participant is not None:
        return participant
    try:
        with transaction.atomic():
            return Participant.objects.create(platform=platform, external_id=external_id)
    except IntegrityError:
        return Participant.objects.get(platform=platform, external_id=external_id)


def participant_lock(participant_id: int) -> None:
    """Lock the worker's ``Participant`` row until the transaction ends, ``FOR NO KEY UPDATE``
    (PostgreSQL; SQLite serialises writes), the lock a start takes (``selectors.participant_blocked``,
    ``lock``): it waits for a withdrawal that locked the worker first (``FOR UPDATE``, its first lock:
    ``withdrawal.participant_withdraw``), and a statement begun after it sees what that withdrawal
    committed (its ``Withdrawal``, their receipts and bindings gone); a withdrawal that comes after
    waits for this transaction. Take it before anything else of the worker is locked, read or
    written (a consent: ``services.entry``), in the withdrawal's order. One statement."""
    list(Participant.objects.select_for_update(no_key=True).filter(pk=participant_id).values_list("pk"))


def imported_worker_id(study_id: int, pseudonym: str) -> str:
    """The ``external_id`` of the participant a bundle's worker ``pseudonym`` becomes in the study
    ``study_id`` imported from it (``scoring.services.bundle.importing``): ``bundle-<study id>:<pseudonym>``.
    No platform id has this shape (a Prolific id is 24 hex digits, an MTurk id A and capitals or
    digits, a link participant's anon-, idh-, plink- or preview- and hex), so the questionnaire never
    makes nor finds such a participant, and no other import shares it. A withdrawal reads it too
    (``withdrawal.participant_withdraw``): it finds the worker in the copies of a study by it."""
    return f"bundle-{study_id}:{pseudonym}"


def participant_new_anonymous() -> Participant:
    """A participant for a plain or open link: a random id, kept by the worker's browser."""
    return Participant.objects.create(platform=Platform.LINK, external_id=f"anon-{secrets.token_hex(8)}")


def identifier_hash(identifier: str) -> str:
    """The keyed hash a participant identifier is stored as (never the identifier itself).

    The identifier is normalised first (Unicode NFKC, surrounding spaces dropped, case folded),
    so "Ana@Lab.org " and "ana@lab.org" are one person. Raises ``InvalidIdentifier`` for anything
    that is not a lab id or an e-mail address."""
    normal = unicodedata.normalize("NFKC", identifier or "").strip().casefold()
    if not IDENTIFIER_FORMAT.fullmatch(normal):
        raise InvalidIdentifier(
            "A participant identifier is a lab id or an e-mail address: letters, digits and . _ - + @ "
            "only, at most 254 characters. Leave the field empty to take part without one."
        )
    key = str(settings.RL_PSEUDONYM_SALT).encode()
    return hmac.new(key, b"participant-identifier\x00" + normal.encode(), hashlib.sha256).hexdigest()


def participant_identified(*, identifier: str) -> Participant:
    """The participant of a typed participant identifier (a link participant, created once)."""
    return participant_get_or_create(platform=Platform.LINK, external_id=IDENTIFIER_PREFIX + identifier_hash(identifier))


def platform_assignment_bind(*, study: Study, participant: Participant, platform_assignment_id: str) -> None:
    """Bind a platform assignment / session id to ``participant``, the first worker seen with it.
    Raises ``IdentityMismatch`` when it already belongs to another worker. Idempotent."""
    if not platform_assignment_id:
        return
    lookup = {"platform": participant.platform, "platform_assignment_id": platform_assignment_id}
    try:
        with transaction.atomic():
            binding, _ = PlatformAssignmentBinding.objects.get_or_create(
                **lookup, defaults={"participant": participant, "study": study})
    except IntegrityError:  # created by a simultaneous request
        binding = PlatformAssignmentBinding.objects.get(**lookup)
    if binding.participant_id != participant.pk:
        raise IdentityMismatch(
            "This task's platform assignment belongs to another worker account, so it cannot be opened "
            "with yours. Open the task again from the platform."
        )


CONSENT_KEY_SALT = "annotations.entry.consent_key"


def consent_key(*, browser: str) -> str:
    """A new consent form's one-time key (32 hexadecimal digits), for a landing page loaded in the
    browser whose digest is ``browser`` (``worker_pages.browser_digest``): 16 random digits, then 16
    of a keyed hash (``DJANGO_SECRET_KEY``) of them and ``browser``. Its receipt records the key
    (``ConsentReceipt.key``), so the receipt tells which browser sent the form
    (``consent_key_made_in``) with no column more, and no one can make a key for another browser."""
    nonce = secrets.token_hex(8)
    return nonce + _consent_key_mac(nonce, browser)


def consent_key_made_in(key: str, *, browser: str) -> bool:
    """Whether the consent form of ``key`` came from a landing page loaded in the browser of digest
    ``browser`` (``consent_key``). A key made before keys named their browser names none."""
    return len(key) == 32 and constant_time_compare(key[16:], _consent_key_mac(key[:16], browser))


def _consent_key_mac(nonce: str, browser: str) -> str:
    return salted_hmac(CONSENT_KEY_SALT, f"{nonce}:{browser}", algorithm="sha256").hexdigest()[:16]


def task_started_in_browser(*, task: Assignment, browser: str) -> bool:
    """Whether the browser of digest ``browser``, whose study cookie names ``task``, started that
    task itself, so the cookie proves the task's participant (``participant_of_browser``,
    ``services.entry.link_task_done_in_browser``). The cookie is set only by
    ``views.entry._to_task``, in the browser that sent the task's consent form, or one that held the
    task already, or, for a task in progress, any browser that comes with the task's own
    single-person link or platform assignment id (those are its credentials, not its participant's).
    So a task started through neither started in the one browser that holds its cookie; any other
    did only if a consent form from a landing page loaded in this browser recorded it on its
    receipt (``consent_key_made_in``; a receipt made before keys named their browser names none).
    One read at most."""
    if task.participant_link_id is None and not task.platform_assignment_id:
        return True
    keys = ConsentReceipt.objects.filter(study_id=task.study_id, assignment_id=task.pk).values_list("key", flat=True)
    return any(consent_key_made_in(key, browser=browser) for key in keys)


def _link_task_of_browser(*, study: Study, participant_id: int | None, task_id: int | None) -> Assignment | None:
    """The task in ``study`` of a link participant (any: a single-person link's, an anonymous
    browser's or a typed identifier's) that this browser's study cookie names
    (``worker_pages.browser_holds``: signed, and set only in a browser sent to that task), with its
    participant, or None."""
    if participant_id is None or task_id is None:
        return None
    task = (Assignment.objects.select_related("participant")
            .filter(pk=task_id, study_id=study.pk, participant_id=participant_id).first())
    if task is None or task.participant.platform != Platform.LINK:
        return None
    return task


def _link_participant_of_browser(*, study: Study, participant_id: int | None,
                                 task_id: int | None) -> Participant | None:
    """The link participant whose task in ``study`` this browser's study cookie names
    (``_link_task_of_browser``), or None: also a browser handed that task through its link (what a
    refusal that holds for the browser's participant may go by, never a grant)."""
    task = _link_task_of_browser(study=study, participant_id=participant_id, task_id=task_id)
    return task.participant if task is not None else None


def participant_of_browser(*, study: Study, participant_id: int | None, task_id: int | None,
                           browser: str = "") -> Participant | None:
    """The participant a browser (digest ``browser``: ``worker_pages.browser_digest``) proves it
    worked as in ``study``: its study cookie (``worker_pages.browser_holds``, signed and set only
    where the browser was entitled to the task) names a task of that participant in this study,
    which this browser started itself (``task_started_in_browser``): a browser handed a task in
    progress through its single-person link holds the link's task, not its participant. Only a
    link participant whose identity nothing but a browser can hold (a single-person link's, or an
    anonymous browser's), never a platform worker or a typed identifier's participant (anyone may
    type an identifier). None when the cookie proves nothing. Two reads at most."""
    return _browser_participants(study=study, participant_id=participant_id, task_id=task_id, browser=browser)[0]


def participant_holding_browser(*, study: Study, participant_id: int | None, task_id: int | None,
                                browser: str) -> Participant | None:
    """The link participant (a typed identifier's too: this browser typed it) that a browser of
    digest ``browser`` goes on as on ``study``'s plain or open link: its study cookie's
    (``worker_pages.browser_holds``), unless the task the cookie names is one the browser did not
    start itself (``task_started_in_browser``: it was handed that task through its single-person
    link, the task's credential, not its participant's), then None (a new participant). A cookie
    of the earlier form (a participant alone) names its participant, as it always did. Two reads
    at most."""
    return _browser_participants(study=study, participant_id=participant_id, task_id=task_id, browser=browser)[1]


def _browser_participants(*, study: Study, participant_id: int | None, task_id: int | None,
                          browser: str) -> tuple[Participant | None, Participant | None]:
    """What a browser's study cookie (``participant_id``, ``task_id``) says of the browser of
    digest ``browser`` in ``study``, read once: the participant it proves it worked as
    (``participant_of_browser``) and the link participant it goes on as on the plain and open
    links (``participant_holding_browser``). The first, where there is one, is the second too. No
    read without a cookie, two at most."""
    if participant_id is None:
        return None, None
    task = _link_task_of_browser(study=study, participant_id=participant_id, task_id=task_id)
    if task is None:
        return None, Participant.objects.filter(pk=participant_id, platform=Platform.LINK).first()
    holder = task.participant if task_started_in_browser(task=task, browser=browser) else None
    return (None if task.participant.external_id.startswith(IDENTIFIER_PREFIX) else holder), holder


def participant_identified_in_browser(*, study: Study, identifier: str, held_participant_id: int | None,
                                      held_task_id: int | None) -> Participant:
    """The participant of the identifier typed on ``study``'s landing page (``participant_identified``),
    unless this browser's study cookie (``held_participant_id``, ``held_task_id``) proves it took
    part as another link participant (``_link_participant_of_browser``: an anonymous browser, a
    single-person link or another identifier) who
    - has a task in progress in the study: ``TaskInProgress`` (one browser would hold two tasks,
      and vote twice on the units they share; the rule ``participant_link_redeem`` applies to a
      new single-person link);
    - failed the study's qualification test, and that failed grant refuses this browser
      (``failed_grant_refuses_browser``, the entry's own rule: for a typed identifier or an MTurk id,
      only when the cookie names the task the test was failed in, or after ``RETAKES_MAX`` attempts
      were set aside): ``NotQualified`` (a new identifier would take the test again in the browser
      that failed it).
    The same identifier as the cookie's participant is that participant. Nothing is created when it
    refuses; raises ``InvalidIdentifier`` for an identifier that is not one. Two reads when the
    cookie names a link participant's task of the study, none otherwise. A browser without the
    cookie (another browser, cleared cookies) proves nothing: it is a new participant."""
    external_id = IDENTIFIER_PREFIX + identifier_hash(identifier)
    browser = _link_participant_of_browser(study=study, participant_id=held_participant_id, task_id=held_task_id)
    if browser is not None and browser.external_id != external_id:
        if selectors_entry.active_assignment(study=study, participant=browser) is not None:
            raise TaskInProgress(OTHER_PARTICIPANT_IN_PROGRESS)
        failed = QualificationGrant.objects.filter(study_id=study.pk, participant_id=browser.pk, passed=False).first()
        if failed is not None and failed_grant_refuses_browser(participant=browser, grant=failed,
                                                               held_task_id=held_task_id):
            raise NotQualified(FAILED_TEST_IN_THIS_BROWSER)
    return participant_get_or_create(platform=Platform.LINK, external_id=external_id)


def identity_unauthenticated(participant: Participant) -> bool:
    """Whether ``participant`` is known by nothing but what anyone may send: an MTurk worker id (the
    entry URL's ``workerId``), or a participant identifier typed on a plain or open link (stored
    as its keyed hash, ``IDENTIFIER_PREFIX``). Not a Prolific worker (Prolific is asked:
    ``impostor.prolific_vouches``), nor a single-person link's participant or an anonymous browser's
    (the link, or the browser, is the proof)."""
    if participant.platform == Platform.MTURK:
        return True
    return participant.platform == Platform.LINK and participant.external_id.startswith(IDENTIFIER_PREFIX)


def retakes_used(grant: QualificationGrant) -> bool:
    """Whether ``grant``, a failed qualification grant, is the last attempt its participant gets in
    its study: ``RETAKES_MAX`` failed attempts were set aside before it (``QualificationGrant.voids``),
    so it refuses every browser. An attempt set aside whose retake was not graded yet (``set_aside``)
    is not a new one: its retake may start again."""
    return not grant.set_aside and len(grant.voids or ()) >= RETAKES_MAX


def failed_grant_refuses_browser(*, participant: Participant, grant: QualificationGrant,
                                 held_task_id: int | None) -> bool:
    """Whether ``grant``, ``participant``'s failed qualification grant, refuses the browser whose
    study cookie names task ``held_task_id`` (``worker_pages.browser_holds``): the one rule the
    entry (``impostor.grant_for_retake``) and a typed identifier (``participant_identified_in_browser``)
    go by. It refuses every browser unless the identity is one the app cannot authenticate
    (``identity_unauthenticated``: anyone may send it), the grant records the task it was taken in,
    and fewer than ``RETAKES_MAX`` attempts were set aside before (``retakes_used``); then only the
    browser whose cookie names that task (it failed the test, whoever sits at it). No read."""
    if not identity_unauthenticated(participant) or grant.assignment_id is None or retakes_used(grant):
        return True
    return held_task_id is not None and held_task_id == grant.assignment_id


def participant_link_redeem(*, link: ParticipantLink, held_participant_id: int | None = None,
                            held_task_id: int | None = None, browser: str = "") -> Participant:
    """The participant of a single-person link, decided at its first use (the same one on every
    later use): the participant this browser (digest ``browser``) proves it worked as in the link's
    study (``participant_of_browser``, given what the browser's study cookie names: a task it
    started itself), so it is given no question it has seen, else a new one (the link's own: a
    browser handed another participant's task through its link is not that participant). A browser whose participant has a task in progress in
    the study is refused (``TaskInProgress``) and the link stays unused: the link's task must be
    its own. A browser that goes on as a participant who withdrew from the study is refused as
    the plain and open links refuse it (``ParticipantBlocked``, ``_refuse_withdrawn_browser``) and
    the link stays unused. Raises ``StudyNotOpen`` for a withdrawn link. Call inside the transaction
    that takes the consent, so a refusal leaves nothing behind.

    Lock order, the withdrawal's (``withdrawal.participant_withdraw`` locks the worker's row, then
    updates their links): the link's participant first, then the link's row. The caller locks
    ``link.participant_id`` first when the link already names one (``entry._consent_first``). A
    ``link`` read before another browser redeemed it names none: when the locked row names a
    participant, the link's row lock is let go (its savepoint rolled back), that participant is
    locked (``participant_lock``) and the row is locked again, so a withdrawal holding them is
    waited for, never deadlocked with (it revokes the link: ``StudyNotOpen``). At most once: a
    participant once set goes back to none only with the link revoked. No statement more when the
    caller knew the link's participant or the link is unused."""
    known = link.participant_id
    for _attempt in range(3):
        try:
            locked = _link_lock_redeem(link=link, known=known, held_participant_id=held_participant_id,
                                       held_task_id=held_task_id, browser=browser)
        except _LinkParticipantUnlocked as unlocked:
            known = unlocked.participant_id
            participant_lock(known)  # its participant first, the link's row after it (the next attempt)
            continue
        link.participant, link.redeemed_at = locked.participant, locked.redeemed_at
        return locked.participant
    raise RuntimeError(f"participant link {link.pk}: its participant changed while it was redeemed")


class _LinkParticipantUnlocked(Exception):
    """The locked link names ``participant_id``, which its caller did not lock first."""

    def __init__(self, participant_id: int):
        super().__init__(participant_id)
        self.participant_id = participant_id


def _link_lock_redeem(*, link: ParticipantLink, known: int | None, held_participant_id: int | None,
                      held_task_id: int | None, browser: str) -> ParticipantLink:
    """``participant_link_redeem``'s work under the link's row lock, in a savepoint: the locked link,
    redeemed if it was unused. Raises ``_LinkParticipantUnlocked`` (the savepoint rolled back, which
    lets the row lock go) when the link names a participant other than ``known``, the one locked."""
    with transaction.atomic():
        # The link's row only: without ``of``, PostgreSQL locks the joined study row FOR UPDATE too,
        # which deadlocks with the FOR KEY SHARE other consents hold on it and stalls the study's claims.
        locked = ParticipantLink.objects.select_for_update(of=("self",)).select_related("study").get(pk=link.pk)
        if locked.revoked:
            raise StudyNotOpen("This link has been withdrawn by the researcher.")
        if locked.participant_id is not None and locked.participant_id != known:
            raise _LinkParticipantUnlocked(locked.participant_id)
        if locked.participant_id is None:
            person, goes_on_as = _browser_participants(study=locked.study, participant_id=held_participant_id,
                                                       task_id=held_task_id, browser=browser)
            _refuse_withdrawn_browser(study=locked.study, goes_on_as=goes_on_as)
            if person is not None and selectors_entry.active_assignment(study=locked.study, participant=person):
                raise TaskInProgress(OTHER_TASK_IN_PROGRESS)
            locked.participant = person or participant_get_or_create(platform=Platform.LINK,
                                                                    external_id=f"plink-{locked.pk}")
            locked.redeemed_at = timezone.now()
            locked.save(update_fields=["participant", "redeemed_at"])
    return locked


def _refuse_withdrawn_browser(*, study: Study, goes_on_as: Participant | None) -> None:
    """Raise ``ParticipantBlocked`` (the words ``assignment_start`` refuses them with) when this
    browser goes on as a participant who withdrew from ``study`` (``participant_withdrawn``):
    ``goes_on_as``, the one it goes on as on the plain and open links (``participant_holding_browser``,
    read with the participant it proves by ``_browser_participants``: that one, where it proves
    one). The withdrawal deleted the task its study cookie names, so that cookie proves no
    participant any more, yet it still names the one who withdrew, as the plain and open links
    read it: without this check the browser would be a new participant on a single-person link it
    opens next (withdrawal revokes only the links the participant used; the app cannot tell which
    unused links were handed to them). Only refuses: a withdrawn participant's cookie makes the
    browser no one else. No read without a cookie's participant."""
    if goes_on_as is not None and participant_withdrawn(participant=goes_on_as, study=study):
        raise ParticipantBlocked(NOT_AVAILABLE)


def _open_link_returning(*, link: OpenLink, participant: Participant, task: Assignment | None = None) -> bool:
    """Whether ``participant`` joined the study through ``link`` before (a task other than
    ``task``): they hold a place on it already. A task started another way (another open link,
    the plain link, a platform) holds no place here. A task started through an open link before
    the link was recorded on it (``open_link`` empty) counts for the link whose completion code it
    carries, so no one who joined through a link then is locked out of it."""
    if participant.pk is None:
        return False
    earlier = Assignment.objects.filter(study_id=link.study_id, participant_id=participant.pk).filter(
        Q(open_link_id=link.pk)
        | Q(open_link__isnull=True, participant_link__isnull=True, completion_code=link.completion_code)
    )
    if task is not None:
        earlier = earlier.exclude(pk=task.pk)
    return earlier.exists()


def open_link_check(*, link: OpenLink, participant: Participant) -> None:
    """Refuse (``StudyNotOpen``) what ``open_link_join`` would refuse, before a task is claimed
    for nothing: a closed link, or a full one for a participant who would take a new place. Only
    reads; the place itself is taken by ``open_link_join``."""
    active, used, most = (OpenLink.objects.filter(pk=link.pk)
                          .values_list("active", "n_participants", "max_participants").first() or (False, 0, None))
    if not active:
        raise StudyNotOpen("This link is closed. Thank you for your interest.")
    if most is not None and used >= most and not _open_link_returning(link=link, participant=participant):
        raise StudyNotOpen("This link is full or closed. Thank you for your interest.")


def open_link_join(*, link: OpenLink, participant: Participant, task: Assignment | None = None) -> None:
    """Count ``participant`` against the open link's capacity the first time they take part in its
    study through it (a worker coming back through it for another task is not counted again;
    having taken part another way holds no place on it). ``task``, the task this join is for, is
    not an earlier one; it is recorded as started through the link. Raises ``StudyNotOpen`` when
    the link is closed or full. Call inside the transaction that starts ``task``, after the start
    (``services.entry.assignment_enter``): a refused start takes no place, a refused join starts
    no task, and the link's row is locked only until that transaction commits."""
    if _open_link_returning(link=link, participant=participant, task=task):
        if not OpenLink.objects.filter(pk=link.pk, active=True).exists():
            raise StudyNotOpen("This link is closed. Thank you for your interest.")
    else:
        updated = OpenLink.objects.filter(pk=link.pk, active=True).filter(
            Q(max_participants__isnull=True) | Q(n_participants__lt=F("max_participants"))
        ).update(n_participants=F("n_participants") + 1)
        if not updated:
            raise StudyNotOpen("This link is full or closed. Thank you for your interest.")
    if task is not None:  # the task came through this link: it holds the participant's place on it
        Assignment.objects.filter(pk=task.pk).update(open_link=link)
        task.open_link = link
