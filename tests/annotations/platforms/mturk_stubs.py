"""MTurk requests and responses the Stubber tests queue: the HITs a publish creates, with the
exact parameters the real service model checks (or, for the tests of the way in, any: the HIT ids
a study's workers enter with), and the pages a sync reads."""
from __future__ import annotations

import datetime as dt
import math

from botocore.stub import ANY
from django.test import override_settings

from annotations.models import Publication
from annotations.platforms.handoff import study_token
from annotations.platforms.mturk import EXPIRE_NOW, QUAL_LOCALE, QUAL_PERCENT_APPROVED, split_assignments
from annotations.selectors.cost import study_task_count
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import PLATFORM_HANDOFF_SECONDS, study_publish
from annotations.services.platforms.tokens import publication_request_token
from tests.annotations.platforms.conftest import PUBLIC_URL, on_platform

HIT_A = "3AAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
HIT_B = "3BBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
NOW = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.UTC)


def default_requirements() -> list[dict]:
    return [
        {"QualificationTypeId": QUAL_LOCALE, "Comparator": "In", "LocaleValues": [{"Country": "US"}]},
        {"QualificationTypeId": QUAL_PERCENT_APPROVED, "Comparator": "GreaterThanOrEqualTo", "IntegerValues": [98]},
    ]


def external_question(study) -> str:
    return (
        '<ExternalQuestion xmlns="http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2006-07-14/'
        f'ExternalQuestion.xsd"><ExternalURL>{PUBLIC_URL}/w/s/{study_token(study.pk)}/</ExternalURL>'
        "<FrameHeight>0</FrameHeight></ExternalQuestion>"
    )


def hit_params(study, *, index: int, size: int, requirements=None) -> dict:
    token = f"{publication_request_token(study=study, platform='mturk', batch=1)}-h{index}"
    return {
        "MaxAssignments": size,
        "AutoApprovalDelayInSeconds": 3 * 24 * 3600,
        "LifetimeInSeconds": 7 * 24 * 3600,
        "AssignmentDurationInSeconds": 1800 + PLATFORM_HANDOFF_SECONDS,  # the app's 30 minutes, and back
        "Reward": "2.00",
        "Title": study.name,
        "Keywords": ANY,
        "Description": ANY,
        "Question": external_question(study),
        "RequesterAnnotation": token,
        "QualificationRequirements": requirements or default_requirements(),
        "UniqueRequestToken": token,
    }


def hit(hit_id: str, size: int, token: str = "") -> dict:
    return {"HIT": {"HITId": hit_id, "HITTypeId": "3TYPEAAAAAAAAAAAAAAAAAAAAAAAAA", "MaxAssignments": size,
                    "Reward": "2.00", "RequesterAnnotation": token, "HITStatus": "Assignable"}}


def queue_publish(stubber, study, *, balance: str = "10000.00") -> None:
    stubber.add_response("get_account_balance", {"AvailableBalance": balance}, {})
    stubber.add_response("create_hit", hit(HIT_A, 9), hit_params(study, index=0, size=9))
    stubber.add_response("create_hit", hit(HIT_B, 5), hit_params(study, index=1, size=5))


def sync_page(assignments: list[dict], next_token: str | None = None) -> dict:
    page = {"Assignments": assignments, "NumResults": len(assignments)}
    if next_token:
        page["NextToken"] = next_token
    return page


def remote(assignment_id: str, worker_id: str, status: str = "Submitted", hit_id: str = HIT_A) -> dict:
    return {"AssignmentId": assignment_id, "WorkerId": worker_id, "HITId": hit_id, "AssignmentStatus": status,
            "AcceptTime": NOW - dt.timedelta(minutes=8), "SubmitTime": NOW, "Answer": "<QuestionFormAnswers/>"}


def published(stubber, study) -> Publication:
    """``study`` (an MTurk study, or a draft set to run on MTurk here) published as HIT_A and HIT_B."""
    queue_publish(stubber, study)
    if study.platform != "mturk":
        on_platform(study, "mturk")
    return study_publish(user=OPERATOR, study=study, platform_name="mturk")




def published_as(stubber, study, *hit_ids: str) -> Publication:
    """``study`` (an MTurk study, draft or open) published through ``study_publish`` on the stubbed
    client, MTurk answering its ``create_hit`` calls with ``hit_ids``, one HIT each (its tasks
    spread evenly over them): the HITs its workers may enter it with. Any HIT parameters (tests of
    what is sent queue ``hit_params`` themselves); MTurk takes only an https ExternalURL, hence
    the public address while it publishes."""
    _, n_tasks = study_task_count(study=study)
    per_hit = math.ceil(n_tasks / len(hit_ids))
    sizes = split_assignments(n_tasks, per_hit)
    assert len(sizes) == len(hit_ids), f"{n_tasks} tasks make {len(sizes)} HIT(s), not {len(hit_ids)}"
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    for hit_id, size in zip(hit_ids, sizes, strict=True):
        stubber.add_response("create_hit", hit(hit_id, size))
    with override_settings(RL_PUBLIC_URL=PUBLIC_URL):
        return study_publish(user=OPERATOR, study=study, platform_name="mturk",
                             options={"max_assignments_per_hit": per_hit})


def queue_expire(stubber, *hit_ids: str) -> None:
    """MTurk's answer to a close expiring ``hit_ids`` (``study_close``)."""
    for hit_id in hit_ids:
        stubber.add_response("update_expiration_for_hit", {}, {"HITId": hit_id, "ExpireAt": EXPIRE_NOW})


def owner_answer(work, *, hit_id: str = HIT_A, worker_id: str | None = None) -> dict:
    """MTurk's ``get_assignment`` for ``work``: the HIT it belongs to and the worker holding it."""
    return {"Assignment": {"AssignmentId": work.platform_assignment_id, "HITId": hit_id,
                           "WorkerId": worker_id or work.participant.external_id, "AssignmentStatus": "Submitted"}}


def confirm(stubber, *works, hit_id: str = HIT_A) -> None:
    """Queue MTurk's answer to the check before money moves for work sync has not listed yet
    (``platform_work_confirm``: whose HIT is it, and who holds it)."""
    for work in works:
        stubber.add_response("get_assignment", owner_answer(work, hit_id=hit_id),
                             {"AssignmentId": work.platform_assignment_id})


def bonus_paid_answer_lost(platform, stubber, study):
    """Submitted MTurk work of ``study`` (published, HIT_A) whose $1.00 bonus MTurk paid while the
    process died before recording it: the bonus call is left "sent" (its outcome unknown)."""
    from decimal import Decimal

    import pytest

    from annotations.services.platforms.bonus import bonus_pay
    from tests.annotations.platforms.conftest import submitted

    work = submitted(study, platform="mturk", worker_id="AWORKER", assignment_id="3WORKAAAAAAAAAAAAAAAAAAAAAAAAA",
                     task_id=HIT_A)
    confirm(stubber, work)
    stubber.add_response("send_bonus", {}, {"WorkerId": "AWORKER", "BonusAmount": "1.00",
                                            "AssignmentId": work.platform_assignment_id, "Reason": "Flagged a bug.",
                                            "UniqueRequestToken": ANY})
    real_bonus = platform.bonus

    def pay_then_die(**kwargs):
        real_bonus(**kwargs)  # the money moved...
        raise RuntimeError("worker killed")  # ...and the process died before recording it

    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "bonus", pay_then_die)
        bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("1.00"), reason="Flagged a bug.",
                  kind="other")
    return work
