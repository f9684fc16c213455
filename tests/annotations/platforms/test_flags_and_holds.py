"""Issue 10 items 4 and 5 (sync): a flag earns its bonus only once a researcher accepted it (the
flags list in the admin, accept and dismiss), and work that sync finds under another worker's
platform id is held: not scored, approved or paid until a researcher clears or rejects it."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from annotations.models import Annotation, Assignment, FlagReview, PlatformSubmission
from annotations.selectors import claims_that_count
from annotations.selectors.platforms import study_bonus_candidates
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.flags import flag_accept, flag_dismiss
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.review import assignment_approve, study_approve_all, submission_clear
from annotations.services.platforms.sync import study_sync
from annotations.services.steps import steps_for
from tests.annotations.platforms.conftest import open_study, publish_on, start_assignment, submitted


def _flagged_work(study, *, worker: str = "lab-1") -> tuple[Assignment, Annotation]:
    """A worker who reports a problem on their first question, through the answer service."""
    work = start_assignment(study, platform="link", worker_id=worker, assignment_id="")
    flagged = None
    for claim in work.claims.select_related("unit__item"):
        for step in steps_for(kind=study.kind, is_attention_check=False):
            payload = {"flag": True, "flag_note": "Both answers fit."} if flagged is None else None
            answer = annotation_submit(assignment=work, claim=claim, step=step, answer=claim.unit.item.gold_answer,
                                       payload=payload)
            flagged = flagged or answer
    assignment_submit(assignment=work)
    work.refresh_from_db()
    return work, flagged


@pytest.fixture
def root(db):
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.org", "pw"))
    return client


def test_a_flag_earns_its_bonus_only_once_accepted(study):
    open_study(study)
    work, flagged = _flagged_work(study)
    assert study_bonus_candidates(study=study)["flagged_error"] == []
    with pytest.raises(PlatformServiceError, match="no accepted flag"):
        bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("0.50"), reason="You found a broken question.",
                  kind="flagged_error")

    flag_dismiss(annotation=flagged, user=OPERATOR)
    assert study_bonus_candidates(study=study)["flagged_error"] == []
    flag_accept(annotation=flagged, user=OPERATOR)

    assert study_bonus_candidates(study=study)["flagged_error"] == [work.pk]
    bonus = bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("0.50"), reason="You found a broken question.",
                      kind="flagged_error")
    assert bonus.status == "recorded"  # a link study: recorded, paid by the lab
    with pytest.raises(PlatformServiceError, match="no flag"):
        flag_accept(annotation=Annotation.objects.exclude(pk=flagged.pk).first(), user=OPERATOR)


def test_deciding_a_flag_checks_the_users_right_in_the_service(study):
    # The flags admin only offers the studies a user may change; the service checks it itself, so
    # any other caller gets the same answer: Vic, with a view share, and Mo, with every permission
    # but no share, are refused; Cy, with a change share, decides. Accepting would make the task
    # eligible for the flagged-error bonus.
    from annotations.services.platforms.access import PlatformAccessDenied
    from studies.services.sharing import study_share
    from tests.cockpit.conftest import staff_client

    open_study(study)
    work, flagged = _flagged_work(study)
    owner, _ = staff_client("owner")
    study.owner = owner
    study.save(update_fields=["owner"])
    vic, _ = staff_client("vic")
    mo, _ = staff_client("mo")
    cy, _ = staff_client("cy", pay=False)
    study_share(study=study, user=owner, with_user=vic, level="view")
    study_share(study=study, user=owner, with_user=cy, level="change")
    for user in (vic, mo):
        for decide in (flag_accept, flag_dismiss):
            with pytest.raises(PlatformAccessDenied):
                decide(annotation=flagged, user=user)
    with pytest.raises(PlatformAccessDenied, match="nobody is acting"):
        flag_accept(annotation=flagged, user=None)
    assert not FlagReview.objects.exists() and study_bonus_candidates(study=study)["flagged_error"] == []
    assert flag_accept(annotation=flagged, user=cy).decided_by == cy
    assert study_bonus_candidates(study=study)["flagged_error"] == [work.pk]


def test_the_admin_lists_flags_and_accepts_and_dismisses_them(study, root):
    open_study(study)
    _, first = _flagged_work(study, worker="lab-1")
    _, second = _flagged_work(study, worker="lab-2")
    page = "/admin/annotations/flaggedanswer/"

    listing = root.get(page).content.decode()
    assert "Both answers fit." in listing and listing.count("not decided yet") >= 2
    root.post(page, {"action": "accept_flags", "_selected_action": [first.pk]}, follow=True)
    response = root.post(page, {"action": "dismiss_flags", "_selected_action": [second.pk]}, follow=True)

    assert "1 flag(s) dismissed." in response.content.decode()
    assert FlagReview.objects.get(annotation=first).decision == "accepted"
    assert FlagReview.objects.get(annotation=second).decision == "dismissed"
    assert root.get(page + "?decision=open").content.decode().count("Both answers fit.") == 0


def test_sync_holds_work_whose_platform_worker_is_someone_else(prolific, study, root):
    platform, server = prolific
    publication = publish_on(study, "prolific")
    real = server.add_submission(publication.prolific_study_id, participant_id="p_real")
    # The session id of p_real's submission, presented with a fabricated participant id.
    spoofed = submitted(study, platform="prolific", worker_id="p_fabricated_1", assignment_id=real["id"],
                        task_id=publication.prolific_study_id)
    honest_sub = server.add_submission(publication.prolific_study_id, participant_id="p_honest")
    honest = submitted(study, platform="prolific", worker_id="p_honest", assignment_id=honest_sub["id"],
                       task_id=publication.prolific_study_id)
    counted_before = claims_that_count(study=study).count()

    report = study_sync(study=study)

    held = PlatformSubmission.objects.get(platform_assignment_id=real["id"])
    assert held.flag == PlatformSubmission.Flag.WORKER_MISMATCH and report.flagged == 1
    assert claims_that_count(study=study).filter(assignment=spoofed).count() == 0  # out of the scores
    assert claims_that_count(study=study).count() == counted_before - spoofed.claims.count()
    with pytest.raises(PlatformServiceError, match="on hold"):
        assignment_approve(user=OPERATOR, study=spoofed.study, assignment=spoofed)
    with pytest.raises(PlatformServiceError, match="on hold"):
        bonus_pay(user=OPERATOR, study=spoofed.study, assignment=spoofed, amount=Decimal("0.50"), reason="Thanks.")
    result = study_approve_all(user=OPERATOR, study=study)
    assert result["approved"] == 1 and "on hold" in result["errors"][0]
    assert server.submissions[real["id"]]["status"] == "AWAITING REVIEW"  # nothing was sent for it
    honest.refresh_from_db()
    assert honest.status == Assignment.Status.APPROVED
    listing = root.get("/admin/annotations/platformsubmission/?flag=worker_mismatch").content.decode()
    assert "another worker" in listing or "not the participant who answered" in listing

    root.post("/admin/annotations/platformsubmission/",
              {"action": "clear_holds", "_selected_action": [held.pk]}, follow=True)

    held.refresh_from_db()
    assert held.cleared_at is not None
    assert claims_that_count(study=study).count() == counted_before
    # a clear counts the work again, but the session is p_real's: approving it would pay p_real's submission
    with pytest.raises(PlatformServiceError, match="another worker holds its assignment id"):
        assignment_approve(user=OPERATOR, study=spoofed.study, assignment=spoofed)
    assert server.submissions[real["id"]]["status"] == "AWAITING REVIEW"
    with pytest.raises(PlatformServiceError, match="not on hold"):
        submission_clear(user=OPERATOR,
                         submission=PlatformSubmission.objects.get(platform_assignment_id=honest_sub["id"]))
