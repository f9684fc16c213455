"""A participant's withdrawal (issue 24), through the services: their data leaves the study, their
slots go back by the release rules, payments stay as they were, a later sync stores nothing of
theirs, and the record keeps no personal data."""
from __future__ import annotations

import csv
import html
import io
import zipfile
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.test import Client

from annotations.models import (
    Annotation,
    Assignment,
    Bonus,
    Claim,
    ConsentReceipt,
    FlagReview,
    Participant,
    PlatformAssignmentBinding,
    PlatformCall,
    PlatformSubmission,
    Unit,
    Withdrawal,
)
from annotations.selectors import claims_that_count
from annotations.services.answers import assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.errors import NoWorkAvailable, ParticipantBlocked
from annotations.services.flags import flag_accept
from annotations.services.participants import imported_worker_id, participant_identified
from annotations.services.platforms.access import OPERATOR, PlatformAccessDenied
from annotations.services.platforms.blocks import worker_block
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.close import study_close
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import assignment_approve, assignment_reject
from annotations.services.platforms.sync import study_sync
from annotations.services.withdrawal import ParticipantNotFound, WithdrawalError, participant_withdraw
from lab.pseudonyms import worker_pseudonym
from scoring.services.bundle import bundle_import, bundle_stream
from studies.models import Platform
from tests.annotations.factories import ParticipantFactory, make_study
from tests.annotations.pages import consent, entry_url, start
from tests.annotations.platforms.conftest import open_study, start_assignment, submitted
from tests.annotations.test_counting import answer_all, assert_counters_agree
from tests.cockpit.conftest import staff_client
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def pseudonym(participant: Participant) -> str:
    return worker_pseudonym(participant.platform, participant.external_id)


def done(study, participant=None):
    work = assignment_start(study=study, participant=participant or ParticipantFactory())
    answer_all(work)
    return assignment_submit(assignment=work)


def test_withdrawal_erases_the_answers_and_gives_the_slots_back_to_the_pool():
    study = make_study(n_items=2, n_sources=1, quota=2, units_per_task=2)
    leaving, staying = done(study), done(study)
    assert set(Unit.objects.filter(study=study).values_list("n_claimed", "n_completed")) == {(2, 2)}
    with pytest.raises(NoWorkAvailable):  # full: nobody else gets a unit
        assignment_start(study=study, participant=ParticipantFactory())
    n_answers = Annotation.objects.filter(claim__assignment=leaving).count()

    outcome = participant_withdraw(user=OPERATOR, study=study, pseudonym=pseudonym(leaving.participant))

    assert outcome.created and outcome.answers_erased == n_answers == 4 and outcome.tasks_ended == 1
    assert not Annotation.objects.filter(claim__participant=leaving.participant).exists()
    assert not Claim.objects.filter(participant=leaving.participant).exists()
    assert not Assignment.objects.filter(participant=leaving.participant).exists()  # no money named it
    assert set(claims_that_count(study=study).values_list("assignment_id", flat=True)) == {staying.pk}
    assert set(Unit.objects.filter(study=study).values_list("n_claimed", "n_completed")) == {(1, 1)}
    assert_counters_agree(study)
    again = done(study)  # the units went back to the pool: another worker takes them
    assert again.claims.filter(unit__isnull=False).count() == 2
    assert_counters_agree(study)

    record = Withdrawal.objects.get(study=study)
    assert (record.n_answers, record.n_counted_answers, record.n_tasks) == (4, 4, 1)
    values = {str(v) for v in Withdrawal.objects.filter(pk=record.pk).values().first().values()}
    assert not values & {pseudonym(leaving.participant), leaving.participant.external_id}
    assert not any(leaving.participant.external_id in v or pseudonym(leaving.participant) in v for v in values)


def test_withdrawing_twice_changes_nothing_the_second_time_whichever_way_they_are_named():
    study = make_study(n_items=2, n_sources=1, quota=2, units_per_task=2)
    leaving = done(study, participant_identified(identifier="ana@lab.example"))
    first = participant_withdraw(user=OPERATOR, study=study, participant_identifier=" Ana@Lab.example ")
    counters = list(Unit.objects.order_by("id").values_list("n_claimed", "n_completed"))
    for way in ({"participant_identifier": "ana@lab.example"}, {"pseudonym": pseudonym(leaving.participant)},
                {"worker_id": leaving.participant.external_id}):
        second = participant_withdraw(user=OPERATOR, study=study, **way)
        assert not second.created and second.withdrawal.pk == first.withdrawal.pk
        assert (second.answers_erased, second.tasks_ended) == (0, 0)
    assert Withdrawal.objects.get().n_answers == 4
    assert list(Unit.objects.order_by("id").values_list("n_claimed", "n_completed")) == counters
    with pytest.raises(ParticipantBlocked):  # a withdrawn participant gets no new task in the study
        assignment_start(study=study, participant=leaving.participant)


def test_withdrawal_names_one_participant_one_way_and_needs_change_rights():
    study = make_study(n_items=2, n_sources=1, quota=2, units_per_task=2)
    work = done(study)
    with pytest.raises(WithdrawalError, match="one way"):
        participant_withdraw(user=OPERATOR, study=study)
    with pytest.raises(WithdrawalError, match="one way"):
        participant_withdraw(user=OPERATOR, study=study, pseudonym=pseudonym(work.participant), worker_id="x")
    with pytest.raises(ParticipantNotFound):
        participant_withdraw(user=OPERATOR, study=study, pseudonym="w_0000000000000000")
    with pytest.raises(WithdrawalError, match="participant identifier"):
        participant_withdraw(user=OPERATOR, study=study, participant_identifier="not an id!")
    stranger = get_user_model().objects.create_user("stranger", password="pw", is_staff=True)
    with pytest.raises(PlatformAccessDenied):
        participant_withdraw(user=stranger, study=study, pseudonym=pseudonym(work.participant))
    with pytest.raises(PlatformAccessDenied):
        participant_withdraw(user=None, study=study, pseudonym=pseudonym(work.participant))
    assert Annotation.objects.filter(claim__assignment=work).count() == 4 and not Withdrawal.objects.exists()


def test_active_expired_and_flagged_work_all_leave_and_the_counters_follow():
    study = make_study(n_items=4, n_sources=1, quota=2, units_per_task=2)
    person = ParticipantFactory()
    first = done(study, person)
    flagged = Annotation.objects.filter(claim__assignment=first).first()
    Annotation.objects.filter(pk=flagged.pk).update(payload={"flag": True})
    flag_accept(annotation=flagged, user=OPERATOR)
    active = assignment_start(study=study, participant=person)
    answer_all(active)  # answered, not submitted
    assert_counters_agree(study)

    participant_withdraw(user=OPERATOR, study=study, worker_id=person.external_id)

    assert not FlagReview.objects.exists() and not Annotation.objects.filter(claim__participant=person).exists()
    assert not Assignment.objects.filter(study=study, participant=person).exists()
    assert set(Unit.objects.filter(study=study).values_list("n_claimed", "n_completed")) == {(0, 0)}
    assert_counters_agree(study)


def test_paid_work_stays_auditable_and_sync_stores_nothing_of_the_withdrawn_worker(prolific):
    _platform, server = prolific
    study = make_study(n_items=3, n_sources=1, quota=2, units_per_task=3, status="draft", reward=Decimal("2.00"), platform="prolific")
    open_study(study)
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    pid = publication.prolific_study_id
    mine, theirs = (server.add_submission(pid, participant_id=w) for w in ("p_leaving", "p_staying"))
    leaving = submitted(study, platform="prolific", worker_id="p_leaving", assignment_id=mine["id"], task_id=pid)
    staying = submitted(study, platform="prolific", worker_id="p_staying", assignment_id=theirs["id"], task_id=pid)
    study_sync(study=study)
    assignment_approve(user=OPERATOR, study=study, assignment=leaving)
    bonus = bonus_pay(user=OPERATOR, study=study, assignment=leaving, amount=Decimal("0.50"), reason="Thanks.")
    calls = list(PlatformCall.objects.filter(study=study).order_by("id").values())
    assert any(c["amount"] > 0 for c in calls)

    participant_withdraw(user=OPERATOR, study=study, worker_id="p_leaving")

    # Money: every audit row and the bonus exactly as they were; the task they name is kept, empty.
    assert list(PlatformCall.objects.filter(study=study).order_by("id").values()) == calls
    bonus_after = Bonus.objects.get(pk=bonus.pk)
    assert (bonus_after.amount, bonus_after.status, bonus_after.assignment_id) == (bonus.amount, bonus.status, leaving.pk)
    husk = Assignment.objects.get(pk=leaving.pk)
    assert husk.status == Assignment.Status.WITHDRAWN
    assert (husk.platform_assignment_id, husk.platform_task_id, husk.completion_code, husk.consented_at,
            husk.submitted_at) == ("", "", "", None, None)
    assert husk.token != leaving.token and not husk.claims.exists()
    assert not PlatformSubmission.objects.filter(Q(assignment=leaving) | Q(worker_id="p_leaving")).exists()
    assert not PlatformAssignmentBinding.objects.filter(participant=leaving.participant, study=study).exists()
    assert Participant.objects.filter(pk=leaving.participant_id).exists()  # the bonus names whom it paid
    assert_counters_agree(study)

    # The platform still lists the worker's (approved) submission: sync stores nothing of it, and
    # the staying worker's row is synced as before.
    server.submissions[mine["id"]]["status"] = "APPROVED"
    report = study_sync(study=study)
    assert not PlatformSubmission.objects.filter(worker_id="p_leaving").exists()
    assert PlatformSubmission.objects.filter(assignment=staying, worker_id="p_staying").exists()
    assert report.flagged == 0 and not report.errors
    assert Assignment.objects.get(pk=leaving.pk).status == Assignment.Status.WITHDRAWN
    with pytest.raises(ParticipantBlocked):
        start_assignment(study, platform="prolific", worker_id="p_leaving", assignment_id="new-session", task_id=pid)


def test_withdrawing_held_work_keeps_the_counters_and_the_hold_on_others(prolific):
    """A worker whose session someone else answered (held work): withdrawing the one who answered
    frees the slot; the counters keep to the one rule throughout."""
    _platform, server = prolific
    study = make_study(n_items=3, n_sources=1, quota=2, units_per_task=3, status="draft", platform="prolific")
    open_study(study)
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    real = server.add_submission(publication.prolific_study_id, participant_id="p_real")
    spoof = submitted(study, platform="prolific", worker_id="p_fake", assignment_id=real["id"],
                      task_id=publication.prolific_study_id)
    study_sync(study=study)
    assert set(Unit.objects.filter(study=study).values_list("n_claimed", "n_completed")) == {(1, 0)}
    assignment_reject(user=OPERATOR, study=study, assignment=spoof, category="FAILED_CHECK",
                      feedback="Your session was answered from another account, so this work cannot be accepted. " * 2)
    outcome = participant_withdraw(user=OPERATOR, study=study, worker_id="p_fake")
    assert outcome.withdrawal.n_counted_answers == 0 and outcome.answers_erased == 6
    assert Assignment.objects.get(pk=spoof.pk).status == Assignment.Status.WITHDRAWN  # its rejection names it
    assert set(Unit.objects.filter(study=study).values_list("n_claimed", "n_completed")) == {(0, 0)}
    assert_counters_agree(study)


# --- copies made from the study's bundle on this installation ----------------------------------


def _bundle_copy(study, *, name: str, owner):
    """A copy of ``study`` imported by ``owner`` from the bundle its owner downloads, as the API does."""
    data = b"".join(bundle_stream(study=study, user=study.owner))
    return bundle_import(file=io.BytesIO(data), name=name, filename=f"{name}.zip", owner=owner)


def _copy_workers(copy) -> set[str]:
    """The worker pseudonyms the copy's own bundle lists in its answers."""
    archive = zipfile.ZipFile(io.BytesIO(b"".join(bundle_stream(study=copy, user=copy.owner))))
    return {row["worker"] for row in csv.DictReader(io.StringIO(archive.read("data/annotations.csv").decode()))}


def _closed_study_with_copy(owner):
    study = open_utility_study(name="orig-copies", owner=owner, quota=3, n_sources=1)
    work(study, "PID")
    work(study, "PID2")
    study_close(user=OPERATOR, study=study)
    return study, _bundle_copy(study, name="copy", owner=owner)


def test_withdrawal_from_a_study_also_withdraws_the_worker_from_its_bundle_copy():
    # Given a study worked by two workers and a copy of it imported from its bundle by its owner
    alice, _ = staff_client("alice")
    study, copy = _closed_study_with_copy(alice)
    leaving = Participant.objects.get(platform=Platform.PROLIFIC, external_id="PID")
    theirs_in_copy = Participant.objects.get(
        external_id=imported_worker_id(copy.pk, worker_pseudonym(Platform.PROLIFIC, "PID")))
    assert Annotation.objects.filter(claim__assignment__study=copy).count() == 8
    assert len(_copy_workers(copy)) == 2

    # When the owner withdraws the worker from the original, by their Prolific id
    outcome = participant_withdraw(user=alice, study=study, worker_id="PID")

    # Then the copy keeps nothing of theirs either: answers, tasks, export
    assert outcome.created and (outcome.copies_withdrawn, outcome.copies_not_changeable) == (1, 0)
    assert not Annotation.objects.filter(claim__participant=leaving).exists()
    assert Annotation.objects.filter(claim__assignment__study=copy).count() == 4
    assert not Assignment.objects.filter(study=copy, participant=theirs_in_copy).exists()
    assert pseudonym(theirs_in_copy) not in _copy_workers(copy) and len(_copy_workers(copy)) == 1
    assert Withdrawal.objects.filter(study=copy).count() == 1
    assert_counters_agree(copy)

    # and withdrawing again does nothing more, here or in the copy
    counts = list(Withdrawal.objects.order_by("id").values_list("study_id", "n_answers", "n_tasks"))
    again = participant_withdraw(user=alice, study=study, worker_id="PID")
    assert not again.created and (again.copies_withdrawn, again.copies_not_changeable) == (0, 0)
    assert list(Withdrawal.objects.order_by("id").values_list("study_id", "n_answers", "n_tasks")) == counts
    assert Annotation.objects.filter(claim__assignment__study=copy).count() == 4


def test_in_a_bundle_copy_the_worker_is_found_by_the_original_pseudonym_and_platform_id():
    # Given a study and its bundle copy, both worked by PID and PID2
    alice, _ = staff_client("alice")
    study, copy = _closed_study_with_copy(alice)

    # When the owner withdraws PID from the copy alone, by the pseudonym the original's exports show
    outcome = participant_withdraw(user=alice, study=copy, pseudonym=worker_pseudonym(Platform.PROLIFIC, "PID"))

    # Then the copy loses their 4 answers and the original keeps its own
    assert outcome.created and outcome.answers_erased == 4
    assert Annotation.objects.filter(claim__assignment__study=copy).count() == 4
    assert Annotation.objects.filter(claim__assignment__study=study).count() == 8
    # and naming them again in the copy, by pseudonym or platform id, finds their record: nothing more
    for named in ({"pseudonym": worker_pseudonym(Platform.PROLIFIC, "PID")}, {"worker_id": "PID"}):
        assert not participant_withdraw(user=alice, study=copy, **named).created
    # and PID2 is found in the copy by their platform id
    by_id = participant_withdraw(user=alice, study=copy, worker_id="PID2")
    assert by_id.created and by_id.answers_erased == 4
    assert not Annotation.objects.filter(claim__assignment__study=copy).exists()


def test_a_copy_another_researcher_owns_is_not_touched_and_is_counted():
    # Given alice's study, her own copy of it, and bob's copy of it (bob's, not shared with alice)
    alice, _ = staff_client("alice")
    bob, _ = staff_client("bob")
    study, mine = _closed_study_with_copy(alice)
    bobs = _bundle_copy(study, name="bob-copy", owner=bob)
    with pytest.raises(PlatformAccessDenied):
        participant_withdraw(user=alice, study=bobs, worker_id="PID")

    # When alice withdraws PID from her study
    outcome = participant_withdraw(user=alice, study=study, worker_id="PID")

    # Then her copy follows, bob's keeps the worker's answers and is only counted
    assert (outcome.copies_withdrawn, outcome.copies_not_changeable) == (1, 1)
    assert Annotation.objects.filter(claim__assignment__study=mine).count() == 4
    assert Annotation.objects.filter(claim__assignment__study=bobs).count() == 8
    assert not Withdrawal.objects.filter(study=bobs).exists()
    # re-running counts bob's copy again and changes nothing
    again = participant_withdraw(user=alice, study=study, worker_id="PID")
    assert (again.created, again.copies_withdrawn, again.copies_not_changeable) == (False, 0, 1)
    assert Annotation.objects.filter(claim__assignment__study=bobs).count() == 8
    # and bob honours the request in his copy by the original pseudonym
    assert participant_withdraw(user=bob, study=bobs, pseudonym=worker_pseudonym(Platform.PROLIFIC, "PID")).created
    assert Annotation.objects.filter(claim__assignment__study=bobs).count() == 4
    assert participant_withdraw(user=alice, study=study, worker_id="PID").copies_not_changeable == 0


def test_the_workers_page_says_which_copies_the_withdrawal_reached():
    # Given alice's study with her copy, and bob's copy of it
    alice, client = staff_client("alice")
    bob, _ = staff_client("bob")
    study, _mine = _closed_study_with_copy(alice)
    _bundle_copy(study, name="bob-copy", owner=bob)

    # When alice withdraws PID on the study's workers page
    response = client.post(f"/admin/studies/study/{study.pk}/workers/withdraw/",
                           {"way": "worker_id", "who": "PID"}, follow=True)

    # Then the message counts the copy reached and the one left to its owner, naming neither
    page = html.unescape(response.content.decode())
    assert "Participant withdrawn" in page
    assert "Also withdrawn from 1 copy(ies) imported from this study's bundle." in page
    assert "1 more copy(ies) hold this worker but are not yours to change" in page
    assert "bob-copy" not in page
    again = html.unescape(client.post(f"/admin/studies/study/{study.pk}/workers/withdraw/",
                                      {"way": "worker_id", "who": "PID"}, follow=True).content.decode())
    assert "already withdrawn" in again and "1 more copy(ies) hold this worker" in again


def test_a_worker_who_consented_but_got_no_task_is_withdrawn_and_what_they_left_is_erased(prolific):
    """The only place taken, a second Prolific worker consents and is refused (no work left): their
    consent receipt, their session's binding and their raw id stay in the study with no task.
    Before, the withdrawal looked only for workers with a task: ``ParticipantNotFound``, and all of it
    stayed."""
    study = make_study(platform=Platform.PROLIFIC, status="draft", n_items=1, n_sources=1, quota=1, units_per_task=1)
    prolific_id = study_publish(user=OPERATOR, study=study, platform_name="prolific").prolific_study_id
    study.refresh_from_db()

    def url(n):
        return entry_url(study, PROLIFIC_PID=f"5a9d64f5f6dfdd0001eaa7{n:02d}", STUDY_ID=prolific_id,
                         SESSION_ID=f"5b0d64f5f6dfdd0001eaa7{n:02d}")

    start(Client(), url(1))  # takes the only place
    assert consent(Client(), url(2)).status_code == 409  # refused: no work left
    raw = "5a9d64f5f6dfdd0001eaa702"
    left = (ConsentReceipt.objects.filter(study=study, participant__external_id=raw),
            PlatformAssignmentBinding.objects.filter(study=study, participant__external_id=raw))
    assert [rows.count() for rows in left] == [1, 1]

    outcome = participant_withdraw(user=OPERATOR, study=study, pseudonym=worker_pseudonym(Platform.PROLIFIC, raw))

    assert outcome.created and (outcome.answers_erased, outcome.tasks_ended) == (0, 0)
    assert [rows.count() for rows in left] == [0, 0]
    assert Withdrawal.objects.filter(study=study).count() == 1


def test_the_withdrawn_workers_raw_id_goes_with_them_unless_another_row_still_names_it(prolific):
    """Three Prolific workers withdraw from a study. One who took part only here leaves no row with
    their raw id: before, their ``Participant`` row kept it for good (with the salt, it gives the
    withdrawal's digest, so the database said who withdrew). One who also works in another study
    and one blocked on this study keep theirs (the other study's task and the block name it), and
    coming back through the study's link each is refused, as before."""
    study = make_study(platform=Platform.PROLIFIC, status="draft", n_items=3, n_sources=1, quota=3, units_per_task=1)
    other = make_study(platform=Platform.PROLIFIC, status="draft", n_items=1, n_sources=1, quota=1, units_per_task=1)
    ids = {study.pk: study_publish(user=OPERATOR, study=study, platform_name="prolific").prolific_study_id,
           other.pk: study_publish(user=OPERATOR, study=other, platform_name="prolific").prolific_study_id}

    def url(on, n, session=0):
        return entry_url(on, PROLIFIC_PID=f"5a9d64f5f6dfdd0001eaa7{n:02d}", STUDY_ID=ids[on.pk],
                         SESSION_ID=f"5b0d64f5f6dfdd0001{on.pk % 100:02d}{n:02d}{session:02d}")

    raw = {n: f"5a9d64f5f6dfdd0001eaa7{n:02d}" for n in (1, 2, 3)}
    for n in (1, 2, 3):
        start(Client(), url(study, n))
    start(Client(), url(other, 2))
    blocked = Participant.objects.get(platform=Platform.PROLIFIC, external_id=raw[3])
    worker_block(user=OPERATOR, study=study, participant=blocked, reason="Copied answers.")

    for n in (1, 2, 3):
        participant_withdraw(user=OPERATOR, study=study, worker_id=raw[n])

    kept = set(Participant.objects.filter(external_id__in=raw.values()).values_list("external_id", flat=True))
    assert kept == {raw[2], raw[3]}
    assert Withdrawal.objects.filter(study=study).count() == 3
    tasks = Assignment.objects.filter(study=study).count()
    for n in (1, 2, 3):  # no task again here
        client = Client()
        if client.get(url(study, n, session=1)).status_code == 200:
            assert consent(client, url(study, n, session=1)).status_code != 302
    assert Assignment.objects.filter(study=study).count() == tasks
    again = participant_withdraw(user=OPERATOR, study=study, worker_id=raw[1])  # found by its digest
    assert not again.created and again.answers_erased == 0
