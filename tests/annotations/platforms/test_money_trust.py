"""Issue 10, items 1-3 on the platform side, against the local fake Prolific server and botocore's
Stubber: a worker's text never shapes what is sent (the bonus CSV is one validated row, capped on
what is sent, to the study's own Prolific study); no single bad row stops "Approve all", a bonus
batch or a sync (its error is kept on its row); a call whose answer was lost is unknown and
reconciled, never failed.

Assignments below carry platform ids the worker entry now refuses (``arrival_parse``): rows
stored before the entry checked them, or written by any other path, must not be able to move
money either, so the platform layer checks again."""
from __future__ import annotations

import html
from decimal import Decimal

import pytest

from annotations.models import Bonus, PlatformCall, Publication
from annotations.platforms.base import PlatformError, PlatformTransientError
from annotations.platforms.prolific import bonus_csv
from annotations.services.payments import CallSpec, PlatformServiceError, platform_call_execute
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.notify import workers_notify
from annotations.services.platforms.review import study_approve_all
from annotations.services.platforms.sync import study_sync
from lab.pseudonyms import worker_pseudonym
from tests.annotations.platforms.conftest import publish_on, submitted
from tests.annotations.platforms.mturk_stubs import HIT_A, confirm, published, sync_page

OTHER_STUDY = "0123456789abcdef01234567"


def _prolific_work(study, server, *, worker: str, session: str | None = None, task_id: str | None = None):
    publication = Publication.objects.filter(study=study, platform="prolific", dry_run=False).first()
    if publication is None:
        publication = publish_on(study, "prolific")
    sub = server.add_submission(publication.prolific_study_id, participant_id=worker)
    work = submitted(study, platform="prolific", worker_id=worker, assignment_id=session or sub["id"],
                     task_id=publication.prolific_study_id if task_id is None else task_id)
    return publication, sub, work


def test_a_session_id_carrying_a_csv_row_cannot_choose_the_bonus(prolific, study):
    platform, server = prolific
    publication = publish_on(study, "prolific")
    victim = server.add_submission(publication.prolific_study_id, participant_id="pcheat")
    _, _, work = _prolific_work(study, server, worker="pcheat", session=f"{victim['id']},99.99\n{victim['id']}")

    with pytest.raises(PlatformServiceError, match="not a Prolific submission id"):
        bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("0.50"), reason="Thanks.")

    assert server.calls("POST", r"/api/v1/submissions/bonus-payments/") == []  # nothing was sent
    assert server.payments == []
    bonus = Bonus.objects.get()
    assert bonus.status == Bonus.Status.FAILED and "not a Prolific submission id" in bonus.error


def test_the_bonus_csv_is_one_row_built_by_the_csv_module_and_capped_on_what_is_sent(settings):
    ident = "5f0c2a9d8b7e6f5a4b3c2d1e"
    assert bonus_csv(submission_id=ident, amount=Decimal("0.50")) == f"{ident},0.50\r\n"
    settings.RL_MAX_BONUS = "1.00"
    with pytest.raises(PlatformError, match="RL_MAX_BONUS"):
        bonus_csv(submission_id=ident, amount=Decimal("1.01"))
    with pytest.raises(PlatformError, match="more than two decimals"):
        bonus_csv(submission_id=ident, amount=Decimal("0.505"))
    for bad in (f"{ident},9.99", f"{ident}\n{ident}", ident.upper(), ""):
        with pytest.raises(PlatformError, match="not a Prolific submission id"):
            bonus_csv(submission_id=bad, amount=Decimal("0.50"))


def test_a_bonus_goes_to_the_study_s_own_prolific_study_only(prolific, study):
    platform, server = prolific
    _, sub, work = _prolific_work(study, server, worker="pother", task_id=OTHER_STUDY)

    with pytest.raises(PlatformServiceError, match="not this study's"):
        bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("0.50"), reason="Thanks.")

    assert server.calls("POST", r"/api/v1/submissions/bonus-payments/") == []
    assert Bonus.objects.get().status == Bonus.Status.FAILED


def test_one_bad_row_does_not_stop_approve_all_or_the_next_sync(prolific, study):
    platform, server = prolific
    publication, _, bad = _prolific_work(study, server, worker="pbad", session="5f0c2a9d8b7e6f5a4b3c2d1e%0A\n")
    _, good_sub, good = _prolific_work(study, server, worker="pgood")

    result = study_approve_all(user=OPERATOR, study=study)

    assert result["approved"] == 1 and len(result["errors"]) == 1
    assert f"assignment {bad.pk}" in result["errors"][0]
    assert server.submissions[good_sub["id"]]["status"] == "APPROVED"
    failed = PlatformCall.objects.get(assignment=bad)
    assert failed.status == PlatformCall.Status.FAILED and "not a Prolific submission id" in failed.error
    report = study_sync(study=study)  # no InvalidURL, nothing left "sent" to trip over
    assert report.errors == [] and (report.remote, report.matched) == (2, 1)


def test_a_call_that_cannot_be_reconciled_keeps_its_error_and_sync_goes_on(prolific, study):
    platform, server = prolific
    _, sub, work = _prolific_work(study, server, worker="pold")
    # An approval left "sent" by an older version, with an id Prolific cannot be asked about.
    with pytest.raises(RuntimeError):
        platform_call_execute(
            spec=CallSpec(platform="prolific", operation="approve", idempotency_key="prolific:approve:old",
                          request_summary={"platform_assignment_id": "bad id\n"}, study=study, assignment=work),
            send=lambda: (_ for _ in ()).throw(RuntimeError("crashed")))

    report = study_sync(study=study)

    assert report.reconciled == {"confirmed": 0, "failed": 0, "unknown": 1}
    call = PlatformCall.objects.get(idempotency_key="prolific:approve:old")
    assert call.status == PlatformCall.Status.SENT and "not a Prolific submission id" in call.error
    assert report.matched == 1  # the submissions were synced all the same


def test_an_unbuildable_request_is_a_refusal_not_a_network_error(prolific):
    platform, server = prolific
    with pytest.raises(PlatformError) as caught:
        platform._request("GET", "http://[::1")  # httpx cannot even build this address
    assert not isinstance(caught.value, PlatformTransientError)


def test_a_bonus_whose_answer_was_lost_is_unknown_then_reconciled_as_paid(prolific, study):
    platform, server = prolific
    _, sub, work = _prolific_work(study, server, worker="plost")
    real_pay = platform.bonus_pay

    def pay_then_time_out(**kwargs):
        real_pay(**kwargs)  # Prolific paid...
        raise PlatformTransientError("Prolific POST bulk-bonus-payments: ReadTimeout")  # ...the answer was lost

    with pytest.MonkeyPatch.context() as patch, pytest.raises(PlatformServiceError, match="outcome unknown"):
        patch.setattr(platform, "bonus_pay", pay_then_time_out)
        bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("0.75"), reason="Good work.", kind="good_work")
    bonus = Bonus.objects.get()
    assert bonus.status == Bonus.Status.UNKNOWN and "ReadTimeout" in bonus.error  # never "failed"

    study_sync(study=study)

    bonus.refresh_from_db()
    assert bonus.status == Bonus.Status.PAID and bonus.paid_at is not None
    assert server.submissions[sub["id"]]["bonus_payments"] == [75] and len(server.payments) == 1


def test_mturk_input_the_service_model_refuses_fails_cleanly_and_the_batch_goes_on(mturk, study):
    platform, stubber = mturk
    published(stubber, study)
    good = submitted(study, platform="mturk", worker_id="AGOOD", assignment_id="3GOODAAAAAAAAAAAAAAAAAAAAAAAAA",
                     task_id=HIT_A)
    bad = submitted(study, platform="mturk", worker_id="ABAD", assignment_id="")  # AssignmentId needs 1+ chars
    confirm(stubber, good)  # MTurk says whose work it is; an id out of format is not asked about
    stubber.add_response("approve_assignment", {}, {"AssignmentId": good.platform_assignment_id})
    # botocore checks parameters against the service model (it refuses the bad one before sending)
    # only while a response is queued; the one queued for it stays unused.
    stubber.add_response("approve_assignment", {}, {"AssignmentId": ""})

    result = study_approve_all(user=OPERATOR, study=study)

    assert result["approved"] == 1 and f"assignment {bad.pk}" in result["errors"][0], result
    call = PlatformCall.objects.get(assignment=bad)
    assert call.status == PlatformCall.Status.FAILED  # refused before sending: not an unknown outcome
    assert "AssignmentId" in call.error


def test_a_bad_row_is_shown_in_the_admin_and_the_rest_of_the_batch_proceeds(prolific, study, client,
                                                                            django_user_model):
    """Issue 10 item 2 through the researcher's pages: "Approve all", a bonus for several
    assignments and a sync, clicked in the admin with one row holding a CSV-smuggling session id:
    the page answers, names the bad row and its error, the good row is approved and paid, and the
    error stays on the audit rows the admin lists."""
    platform, server = prolific
    _, _, bad = _prolific_work(study, server, worker="pbad", session="5f0c2a9d8b7e6f5a4b3c2d1e,99.99\nx")
    _, good_sub, good = _prolific_work(study, server, worker="pgood")
    client.force_login(django_user_model.objects.create_superuser("dana", "dana@example.org", "pw-not-used"))
    page = f"/admin/annotations/publication/publish/{study.pk}/"

    approved = client.post(page, {"action": "approve_all", "shown_submitted": f"{bad.pk},{good.pk}"}, follow=True)
    paid = client.post(page, {"action": "bonus", "kind": "other", "amount": "0.50", "reason": "Thanks.",
                              "assignment_ids": f"{bad.pk} {good.pk}"}, follow=True)
    synced = client.post(page, {"action": "sync"}, follow=True)

    assert (approved.status_code, paid.status_code, synced.status_code) == (200, 200, 200)
    approved_text, paid_text = (html.unescape(r.content.decode()).lower() for r in (approved, paid))
    assert "approved 1 assignment(s)." in approved_text and f"assignment {bad.pk}: " in approved_text
    assert f"bonus for assignment {bad.pk} failed" in paid_text and "bonus paid (or already paid) for 1" in paid_text
    assert "Sync could not read" not in synced.content.decode()
    assert server.submissions[good_sub["id"]]["status"] == "APPROVED"
    assert server.submissions[good_sub["id"]]["bonus_payments"] == [50] and len(server.payments) == 1
    # The audit table of the publish page and the admin's lists keep each bad row's error.
    assert synced.content.decode().count("not a Prolific submission id") >= 1
    calls = client.get("/admin/annotations/platformcall/?status=failed").content.decode()
    assert "prolific:approve:" in calls and "not a Prolific submission id" in calls
    bonuses = client.get("/admin/annotations/bonus/?status=failed").content.decode()
    assert "not a Prolific submission id" in bonuses
    assert Bonus.objects.get(assignment=good).status == Bonus.Status.PAID


def test_an_mturk_bonus_that_cannot_be_reconciled_keeps_its_error_and_the_sync_goes_on(mturk, study):
    """Issue 10 items 2 and 3 on MTurk: botocore checks an id's length only, and its paginators
    raise botocore's own errors, so one bonus left "sent" whose assignment MTurk would not list
    (or whose stored id is not an MTurk id at all) made every sync of the study fail."""
    platform, stubber = mturk
    publication = published(stubber, study)
    odd = submitted(study, platform="mturk", worker_id="AODD", assignment_id="3odd\n", task_id=HIT_A)
    gone = submitted(study, platform="mturk", worker_id="AGONE", assignment_id="3GONEAAAAAAAAAAAAAAAAAAAAAAAAA",
                     task_id=HIT_A)
    # A bonus row left "sent" by an older version, for a row stored before the entry checked ids.
    with pytest.raises(RuntimeError):
        platform_call_execute(
            spec=CallSpec(platform="mturk", operation="bonus", idempotency_key="mturk:bonus:old", amount=Decimal("0.50"),
                          request_summary={"worker_id": "AODD", "platform_assignment_id": odd.platform_assignment_id},
                          study=study, assignment=odd),
            send=lambda: (_ for _ in ()).throw(RuntimeError("crashed")))
    # A bonus whose answer was lost: unknown, never failed.
    confirm(stubber, gone)
    with pytest.MonkeyPatch.context() as patch, pytest.raises(PlatformServiceError, match="outcome unknown"):
        patch.setattr(platform, "bonus", lambda **kwargs: (_ for _ in ()).throw(
            PlatformTransientError("MTurk send_bonus: Read timeout")))
        bonus_pay(user=OPERATOR, study=gone.study, assignment=gone, amount=Decimal("0.50"), reason="Thanks.")
    assert Bonus.objects.get(assignment=gone).status == Bonus.Status.UNKNOWN
    # Sync: nothing is asked about the odd id; MTurk refuses to list the other's bonuses.
    stubber.add_client_error("list_bonus_payments", service_error_code="RequestError",
                             service_message="Assignment 3GONE does not exist. (1700000000000)",
                             http_status_code=400, expected_params={"AssignmentId": gone.platform_assignment_id})
    for hit_id in publication.hit_ids:
        stubber.add_response("list_assignments_for_hit", sync_page([]), {
            "HITId": hit_id, "AssignmentStatuses": ["Submitted", "Approved", "Rejected"], "MaxResults": 100})

    report = study_sync(study=study)

    stubber.assert_no_pending_responses()
    assert report.reconciled == {"confirmed": 0, "failed": 0, "unknown": 2} and report.errors == []
    old = PlatformCall.objects.get(idempotency_key="mturk:bonus:old")
    assert old.status == PlatformCall.Status.SENT and "is not an MTurk id" in old.error
    lost = PlatformCall.objects.get(operation="bonus", assignment=gone)
    assert lost.status == PlatformCall.Status.SENT and "does not exist" in lost.error
    assert Bonus.objects.get(assignment=gone).status == Bonus.Status.UNKNOWN


def test_mturk_ids_out_of_format_are_refused_before_sending_and_the_rest_proceeds(mturk, study):
    """Rows stored before the entry checked ids (or written any other way) reach no MTurk request:
    an approval fails alone with the parameter named, a notification goes to the other workers."""
    platform, stubber = mturk
    published(stubber, study)
    good = submitted(study, platform="mturk", worker_id="AGOOD", assignment_id="3GOODAAAAAAAAAAAAAAAAAAAAAAAAA",
                     task_id=HIT_A)
    bad = submitted(study, platform="mturk", worker_id="Abad,0.99", assignment_id="3bad\r\n")
    confirm(stubber, good)
    stubber.add_response("approve_assignment", {}, {"AssignmentId": good.platform_assignment_id})
    stubber.add_response("notify_workers", {"NotifyWorkersFailureStatuses": []},
                         {"Subject": "Thanks", "MessageText": "Thank you.", "WorkerIds": ["AGOOD"]})

    result = study_approve_all(user=OPERATOR, study=study)
    notified = workers_notify(user=OPERATOR, study=study, subject="Thanks", message="Thank you.")

    stubber.assert_no_pending_responses()
    assert result["approved"] == 1 and f"assignment {bad.pk}" in result["errors"][0]
    call = PlatformCall.objects.get(assignment=bad)
    assert call.status == PlatformCall.Status.FAILED and "AssignmentId '3bad\\r\\n' is not an MTurk id" in call.error
    # The stored answer names the refused worker by pseudonym, as the audit does (issue 20, item 9).
    assert notified["notified"] == 1 and [f["WorkerId"] for f in notified["failures"]] == [
        worker_pseudonym("mturk", "Abad,0.99")]
