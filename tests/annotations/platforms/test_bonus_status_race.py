"""A bonus is refused on work rejected or withdrawn since its task was read.

``bonus._pay`` checked the status of the assignment it was handed, unlocked: a bonus paid while
the work's rejection was on its way to Prolific paid a rejected submission, and a bonus batch
(which reads all its tasks up front) paid tasks rejected, or whose worker withdrew, while its
first rows were being paid. The status is now read again under the task's row lock, where the
``Bonus`` row is created, and a rejection sent for the work refuses it too. The publish page's
candidates follow the same rule (``selectors.platforms.assignments_bonusable``): work being
rejected is offered no bonus that the payment would refuse."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from annotations.models import Assignment, Bonus, PlatformCall
from annotations.selectors.platforms import study_bonus_candidates
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay, study_bonuses_pay
from annotations.services.platforms.common import OP
from annotations.services.platforms.review import assignment_approve, assignment_reject
from annotations.services.withdrawal import participant_withdraw
from lab.pseudonyms import worker_pseudonym
from tests.annotations.platforms.conftest import (  # noqa: F401
    _public_url,
    prolific,
    prolific_server,
    publish_on,
    study,
    submitted,
)

pytestmark = pytest.mark.django_db

HALF = Decimal("0.50")
WHY = "The answers did not follow the instructions: several explanations were copied from the item text." * 2


def _work(server, on, n: int) -> list[tuple[Assignment, dict]]:
    """``n`` submitted tasks of ``on`` on the fake Prolific, each with its submission."""
    publication = publish_on(on, "prolific")
    out = []
    for i in range(n):
        worker = "abcdef"[i] * 24
        sub = server.add_submission(publication.prolific_study_id, participant_id=worker)
        out.append((submitted(on, platform="prolific", worker_id=worker, assignment_id=sub["id"],
                              task_id=publication.prolific_study_id), sub))
    return out


def _bonus_calls(of) -> list[tuple[int, str]]:
    return list(PlatformCall.objects.filter(study=of, operation__in=[OP.BONUS, OP.BONUS_SETUP])
                .values_list("assignment_id", "operation"))


def test_a_bonus_is_refused_while_the_work_is_being_rejected(prolific, study):  # noqa: F811
    platform, server = prolific
    [(work, sub)] = _work(server, study, 1)
    real_reject = platform.reject
    during = []

    def reject_in_flight(**kwargs):  # the rejection's call is recorded sent; the task is still submitted
        try:
            bonus_pay(user=OPERATOR, study=study, assignment=Assignment.objects.get(pk=work.pk), amount=HALF,
                      reason="good work")
            during.append("paid")
        except PlatformServiceError as exc:
            during.append(exc.message)
        return real_reject(**kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(platform, "reject", reject_in_flight)
        assignment_reject(user=OPERATOR, study=study, assignment=work, feedback=WHY)

    assert during == [f"assignment {work.pk} is being rejected (its rejection was sent to prolific): bonuses go to "
                      "submitted or approved work"]
    assert Assignment.objects.get(pk=work.pk).status == Assignment.Status.REJECTED
    assert server.submissions[sub["id"]]["status"] == "REJECTED"
    assert server.payments == [] and server.submissions[sub["id"]]["bonus_payments"] == []
    assert not Bonus.objects.exists() and _bonus_calls(study) == []
    with pytest.raises(PlatformServiceError, match="is rejected: bonuses go to submitted or approved work"):
        bonus_pay(user=OPERATOR, study=study, assignment=Assignment.objects.get(pk=work.pk), amount=HALF,
                  reason="good work")


def test_a_bonus_batch_refuses_tasks_rejected_or_withdrawn_during_it(prolific, study):  # noqa: F811
    platform, server = prolific
    (w1, s1), (w2, s2), (w3, s3) = _work(server, study, 3)
    assignment_approve(user=OPERATOR, study=study, assignment=w3)  # reviewed: its worker may withdraw
    real_setup = platform.bonus_setup
    ended = []

    def setup(**kwargs):  # while the first row is being paid, task 2 is rejected and task 3's worker withdraws
        if not ended:
            assignment_reject(user=OPERATOR, study=study, assignment=Assignment.objects.get(pk=w2.pk), feedback=WHY)
            ended.append(participant_withdraw(user=OPERATOR, study=study,
                                              pseudonym=worker_pseudonym("prolific", "c" * 24)).tasks_ended)
        return real_setup(**kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(platform, "bonus_setup", setup)
        out = study_bonuses_pay(user=OPERATOR, study=study, assignment_ids=[w1.pk, w2.pk, w3.pk], amount=HALF,
                                reason="good work")

    assert ended == [1]
    assert out == {"paid": 1, "unsettled": [], "errors": [
        f"assignment {w2.pk}: assignment {w2.pk} is rejected: bonuses go to submitted or approved work",
        f"assignment {w3.pk}: assignment {w3.pk} is withdrawn (the participant's data was erased): bonuses go to submitted or approved work",
    ]}
    assert len(server.payments) == 1
    assert server.submissions[s1["id"]]["bonus_payments"] and not server.submissions[s2["id"]]["bonus_payments"]
    assert not server.submissions[s3["id"]]["bonus_payments"]
    assert list(Bonus.objects.values_list("assignment_id", "status")) == [(w1.pk, Bonus.Status.PAID)]
    assert sorted(_bonus_calls(study)) == [(w1.pk, OP.BONUS), (w1.pk, OP.BONUS_SETUP)]


def test_work_being_rejected_is_no_bonus_candidate(prolific, study):  # noqa: F811
    platform, server = prolific
    [(work, sub)] = _work(server, study, 1)
    assert study_bonus_candidates(study=study)["good_work"] == [work.pk]
    real_reject = platform.reject
    during = []

    root = get_user_model().objects.create_superuser("root-bonus", "root@example.org", "pw")
    client = Client()
    client.force_login(root)
    worker_page = reverse("admin:studies_study_worker", args=[study.pk, work.participant_id])
    assert [a.pk for a in client.get(worker_page).context["bonusable"]] == [work.pk]

    def reject_in_flight(**kwargs):  # the rejection's call is recorded sent; the task is still submitted
        during.append(study_bonus_candidates(study=study)["good_work"])
        # The worker's page offers what the publish page does (``assignments_bonus_offered``).
        during.append([a.pk for a in client.get(worker_page).context["bonusable"]])
        try:
            bonus_pay(user=OPERATOR, study=study, assignment=Assignment.objects.get(pk=work.pk), amount=HALF,
                      reason="good work", kind=Bonus.Kind.GOOD_WORK)
            during.append("paid")
        except PlatformServiceError as exc:
            during.append(exc.message)
        return real_reject(**kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(platform, "reject", reject_in_flight)
        assignment_reject(user=OPERATOR, study=study, assignment=work, feedback=WHY)

    assert during == [[], [], f"assignment {work.pk} is being rejected (its rejection was sent to prolific): bonuses "
                              "go to submitted or approved work"]
    assert study_bonus_candidates(study=study)["good_work"] == []
    assert server.payments == [] and not Bonus.objects.exists()


def test_a_rejection_sent_after_the_bonus_checked_its_task_stops_the_pay_call(prolific, study):  # noqa: F811
    # The bonus checks its task under the task's lock, then commits, then records and sends its
    # calls: a rejection sent in between was not seen and the bonus was paid on rejected work. The
    # check runs again as the pay call's guard, where the call is marked sent.
    from annotations.services.platforms import bonus as bonus_service

    platform, server = prolific
    [(work, sub)] = _work(server, study, 1)
    confirm = bonus_service.platform_work_confirm
    order = []

    def rejected_meanwhile(assignment):
        order.append("bonus checked")
        assignment_reject(user=OPERATOR, study=study, assignment=Assignment.objects.get(pk=work.pk), feedback=WHY)
        order.append("rejected")
        return confirm(assignment)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bonus_service, "platform_work_confirm", rejected_meanwhile)
        with pytest.raises(PlatformServiceError, match="is rejected: bonuses go to submitted or approved work"):
            bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good work")

    assert order == ["bonus checked", "rejected"]
    assert server.submissions[sub["id"]]["status"] == "REJECTED"
    assert server.payments == [] and server.submissions[sub["id"]]["bonus_payments"] == []
    assert Bonus.objects.get().status == Bonus.Status.FAILED
    pay = PlatformCall.objects.get(operation=OP.BONUS)
    assert pay.status == PlatformCall.Status.FAILED and "is rejected" in pay.error
