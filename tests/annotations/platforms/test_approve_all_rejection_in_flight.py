""""Approve all" lists and prices only what it would approve: a submitted task whose rejection was
sent and whose answer was lost (its ``PlatformCall`` left ``sent``) stays submitted, and an approval
of it is refused (``review._contrary_refusal``). The publish page still listed it, carried it in
its form and priced its reward: the researcher read a count and a total the click would not pay.
The page now reads one selector (``selectors.platforms.study_approve_all_tasks``), by the rule the
approval refuses by (``selectors.platforms.contrary_sent``), and shows those tasks apart; the bonus
candidates leave them out the same way. Against the local Prolific server, through the services
and the admin page."""
from __future__ import annotations

import html
import re

import pytest
from django.urls import reverse

from annotations.models import Assignment, PlatformCall, Publication
from annotations.selectors.cost import study_cost_and_pay
from annotations.selectors.platforms import study_approve_all_tasks, study_bonus_candidates
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_reject, study_approve_all
from annotations.services.platforms.sync import study_sync
from tests.annotations.platforms.conftest import publish_on, submitted
from tests.annotations.platforms.test_review_after_lost_call import WHY, _lost


@pytest.fixture
def researcher(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("dana", "dana@example.org", "pw-not-used"))
    return client


def _page(study) -> str:
    return reverse("admin:annotations_publication_publish", args=[study.pk])


def _work(study, server, worker: str) -> Assignment:
    """A task ``worker`` took and submitted through the app's services, on the study's live
    Prolific study (published on the first call)."""
    publication = Publication.objects.filter(study=study, platform="prolific", dry_run=False).first()
    publication = publication or publish_on(study, "prolific")
    sub = server.add_submission(publication.prolific_study_id, participant_id=worker)
    return submitted(study, platform="prolific", worker_id=worker, assignment_id=sub["id"],
                     task_id=publication.prolific_study_id)


def _reject_lost(platform, study, task: Assignment) -> None:
    """Reject ``task`` with the rejection's answer lost on its way: the call stays ``sent``, the
    task submitted (as ``test_review_after_lost_call`` puts a rejection in flight)."""
    _lost(platform, "reject", lambda: assignment_reject(user=OPERATOR, study=study, assignment=task, feedback=WHY))
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.SUBMITTED
    assert PlatformCall.objects.get(operation="reject", assignment=task).status == PlatformCall.Status.SENT


def _form(text: str, action: str) -> dict[str, str]:
    """The hidden fields of the page's form for ``action``, as a browser would post them."""
    form = next(f for f in re.findall(r"<form method=\"post\".*?</form>", text, re.S)
                if f'name="action" value="{action}"' in f)
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form))
    fields.pop("csrfmiddlewaretoken", None)
    return fields


def _pay_card(text: str) -> str:
    return text[text.index('id="pay"'):text.index('id="close"')]


def test_approve_all_leaves_out_the_tasks_whose_rejection_is_in_flight_as_the_bonuses_do(prolific, study):
    platform, server = prolific
    good, rejecting, other = (_work(study, server, f"pworker{i}") for i in range(3))
    _reject_lost(platform, study, rejecting)

    tasks = study_approve_all_tasks(study=study)

    assert tasks.ids == [good.pk, other.pk]
    assert tasks.rejecting == [rejecting.pk]
    assert (tasks.held, tasks.payable) == (0, 2)
    # The bonuses' payable list leaves the same task out (``assignments_bonusable``).
    candidates = study_bonus_candidates(study=study)
    assert rejecting.pk not in candidates["good_work"] and {good.pk, other.pk} <= set(candidates["good_work"])
    # What the page lists is what the click approves: none refused, none left.
    assert study_approve_all(user=OPERATOR, study=study, assignment_ids=tasks.ids) == {
        "approved": 2, "errors": [], "unsettled": []}
    assert Assignment.objects.get(pk=rejecting.pk).status == Assignment.Status.SUBMITTED
    assert server.submissions[rejecting.platform_assignment_id]["status"] == "AWAITING REVIEW"


def test_the_publish_page_prices_and_carries_only_what_approve_all_approves(prolific, study, researcher):
    platform, server = prolific
    good = _work(study, server, "pgood")
    rejecting = _work(study, server, "prejecting")
    _reject_lost(platform, study, rejecting)
    one, two = (study_cost_and_pay(study=study, n_tasks=n).estimate for n in (1, 2))

    text = researcher.get(_page(study)).content.decode()

    pay = _pay_card(text)
    approve = next(line for line in pay.splitlines() if "their rewards:" in line)
    assert '"Approve all" approves the 1 submitted assignment(s)' in pay
    assert f"<strong>{one.total} {one.currency}</strong>" in approve and str(two.total) not in approve, approve
    assert "1 submitted assignment(s) waiting for review (1 more" in text
    shown_apart = text[text.index('id="approve-all-rejecting"'):]
    shown_apart = shown_apart[:shown_apart.index("</p>")]
    assert "1 more submitted task(s) wait for a\n      rejection's answer from the platform and are not included" in shown_apart
    assert f"task(s) {rejecting.pk}." in shown_apart
    form = _form(text, "approve_all")
    assert form["shown_submitted"] == str(good.pk)
    assert str(rejecting.pk) not in _form(text, "bonus")["shown_good_work"].split(",")

    response = researcher.post(_page(study), form, follow=True)

    after = html.unescape(response.content.decode())
    assert "Approved 1 assignment(s)." in after
    assert "is being rejected" not in after and "since the page was loaded" not in after
    assert Assignment.objects.get(pk=good.pk).status == Assignment.Status.APPROVED
    assert Assignment.objects.get(pk=rejecting.pk).status == Assignment.Status.SUBMITTED
    assert server.submissions[rejecting.platform_assignment_id]["status"] == "AWAITING REVIEW"
    assert 'id="approve-all-rejecting"' in after  # still waiting for the rejection's answer, still shown apart

    # Sync finds the rejection never applied: the task is submitted work to approve again, listed and priced.
    study_sync(study=study)
    again = researcher.get(_page(study)).content.decode()
    assert 'id="approve-all-rejecting"' not in again
    assert _form(again, "approve_all")["shown_submitted"] == str(rejecting.pk)
    approve = next(line for line in _pay_card(again).splitlines() if "their rewards:" in line)
    assert f"<strong>{one.total} {one.currency}</strong>" in approve, approve


def test_a_task_rejected_after_the_page_was_loaded_is_skipped_and_counted(prolific, study, researcher):
    platform, server = prolific
    tasks = [_work(study, server, f"pshown{i}") for i in range(2)]
    form = _form(researcher.get(_page(study)).content.decode(), "approve_all")
    assert form["shown_submitted"] == ",".join(str(t.pk) for t in tasks)

    _reject_lost(platform, study, tasks[1])  # while the page stays open
    response = researcher.post(_page(study), form, follow=True)

    after = html.unescape(response.content.decode())
    assert "Approved 1 assignment(s). 1 task(s) shown on the page were no longer waiting for review" in after
    assert "more task(s) were submitted since the page was loaded" not in after
    assert f"task(s) {tasks[1].pk}." in after[after.index('id="approve-all-rejecting"'):]
    assert Assignment.objects.get(pk=tasks[1].pk).status == Assignment.Status.SUBMITTED
