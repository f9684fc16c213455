"""The publish page pays what it showed: "Approve all" and the candidates' bonus carry the tasks
the page listed (hidden ``shown_*`` fields) and a click acts on those still waiting only. Work
submitted after the page was loaded waits for the next click (the message says how many arrived),
shown work no longer waiting is skipped and counted, and a field naming another study's tasks or
junk refuses the whole click. Against the local Prolific server, through the admin page."""
from __future__ import annotations

import html
import re
from decimal import Decimal

import pytest
from django.urls import reverse

import annotations.admin.platforms as publish_admin
from annotations.models import Assignment, Bonus, Publication
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_approve
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import publish_on, submitted

REASON = "Consistently good work."


@pytest.fixture
def researcher(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("dana", "dana@example.org", "pw-not-used"))
    return client


def _page(study) -> str:
    return reverse("admin:annotations_publication_publish", args=[study.pk])


def _work(study, server, worker: str, *, correct: bool = True) -> Assignment:
    """A task ``worker`` took and submitted through the app's services, on the study's live
    Prolific study (published on the first call)."""
    publication = Publication.objects.filter(study=study, platform="prolific", dry_run=False).first()
    publication = publication or publish_on(study, "prolific")
    sub = server.add_submission(publication.prolific_study_id, participant_id=worker)
    return submitted(study, platform="prolific", worker_id=worker, assignment_id=sub["id"],
                     task_id=publication.prolific_study_id, correct=correct)


def _form(client, study, action: str) -> dict[str, str]:
    """The hidden fields of the page's form for ``action``, as a browser would post them."""
    page = client.get(_page(study)).content.decode()
    form = next(f for f in re.findall(r"<form method=\"post\".*?</form>", page, re.S)
                if f'name="action" value="{action}"' in f)
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form))
    fields.pop("csrfmiddlewaretoken", None)
    return fields


def _messages(response) -> str:
    return html.unescape(response.content.decode())


def _approved(server) -> set[str]:
    return {sub_id for sub_id, sub in server.submissions.items() if sub["status"] == "APPROVED"}


def test_approve_all_pays_the_tasks_the_page_showed_not_those_submitted_since(prolific, study, researcher):
    _, server = prolific
    shown = [_work(study, server, f"pshown{i}") for i in range(3)]
    form = _form(researcher, study, "approve_all")
    assert form["shown_submitted"] == ",".join(str(w.pk) for w in shown)

    # While the page stays open: two more workers submit, and a colleague approves one shown task.
    late = [_work(study, server, f"plate{i}") for i in range(2)]
    assignment_approve(user=OPERATOR, study=study, assignment=shown[0])

    response = researcher.post(_page(study), form, follow=True)

    text = _messages(response)
    assert "Approved 2 assignment(s)." in text
    assert "1 task(s) shown on the page were no longer waiting for review" in text
    assert "2 more task(s) were submitted since the page was loaded: nothing was done to them; the page now shows them" in text
    assert {Assignment.objects.get(pk=w.pk).status for w in shown} == {"approved"}
    assert {Assignment.objects.get(pk=w.pk).status for w in late} == {"submitted"}
    assert _approved(server) == {w.platform_assignment_id for w in shown}
    assert "2 submitted assignment(s)" in text  # the page after the click shows the late ones

    # A second click of the same (stale) form pays nothing twice and still leaves the late ones.
    again = _messages(researcher.post(_page(study), form, follow=True))
    assert "Approved 0 assignment(s). 3 task(s) shown on the page were no longer waiting" in again
    assert {Assignment.objects.get(pk=w.pk).status for w in late} == {"submitted"}
    assert _approved(server) == {w.platform_assignment_id for w in shown}


def test_the_candidates_bonus_pays_the_candidates_the_page_showed(prolific, study, researcher):
    _, server = prolific
    shown = [_work(study, server, f"pgood{i}") for i in range(2)]
    form = {**_form(researcher, study, "bonus"), "kind": "good_work", "amount": "0.50", "reason": REASON}
    assert form["shown_good_work"] == ",".join(str(w.pk) for w in shown)

    late = _work(study, server, "pgoodlate")  # good work submitted after the page was loaded
    for _ in range(2):  # a double click pays each shown candidate once
        text = _messages(researcher.post(_page(study), form, follow=True))
        assert "Bonus paid (or already paid) for 2 assignment(s)." in text
        assert "1 more task(s) became candidates since the page was loaded: nothing was done to them" in text

    assert sorted(Bonus.objects.values_list("assignment_id", flat=True)) == [w.pk for w in shown]
    assert len(server.payments) == 2 and not Bonus.objects.filter(assignment=late).exists()


@pytest.mark.parametrize("tamper", ["another study's task", "junk", "zero", "missing"])
def test_a_tampered_shown_field_refuses_the_whole_click(prolific, study, researcher, tamper):
    _, server = prolific
    mine = _work(study, server, "pmine")
    other = make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, status="draft", reward=Decimal("2.00"),
                       estimated_minutes_per_task=Decimal("6.0"), name="someone else's")
    theirs = _work(other, server, "ptheirs")
    approve = _form(researcher, study, "approve_all")
    bonus = {**_form(researcher, study, "bonus"), "kind": "good_work", "amount": "0.50", "reason": REASON}
    for form, field in ((approve, "shown_submitted"), (bonus, "shown_good_work")):
        if tamper == "missing":
            del form[field]
        else:
            form[field] = {"another study's task": f"{mine.pk},{theirs.pk}", "junk": f"{mine.pk},1; DROP",
                           "zero": f"0,{mine.pk}"}[tamper]

        text = _messages(researcher.post(_page(study), form, follow=True))

        assert f"Nothing was done: field '{field}'" in text or f"(field '{field}' is missing)" in text, text
        if tamper == "another study's task":
            assert f"assignment(s) {theirs.pk}: not found in study {study.pk}" in text
    assert Assignment.objects.get(pk=mine.pk).status == "submitted"
    assert Assignment.objects.get(pk=theirs.pk).status == "submitted"
    assert not Bonus.objects.exists() and server.payments == [] and _approved(server) == set()


def test_the_background_batch_gets_exactly_the_shown_tasks(prolific, study, researcher, monkeypatch):
    _, server = prolific
    shown = [_work(study, server, f"pbatch{i}") for i in range(3)]
    form = _form(researcher, study, "approve_all")
    late = _work(study, server, "pbatchlate")
    queued = []
    real = publish_admin.queue_in_batches

    def spy(task, **kwargs):
        queued.append(kwargs["assignment_ids"])
        return real(task, **kwargs)  # the test settings run Celery tasks eagerly

    monkeypatch.setattr(publish_admin, "INLINE_LIMIT", 1)
    monkeypatch.setattr(publish_admin, "queue_in_batches", spy)

    text = _messages(researcher.post(_page(study), form, follow=True))

    assert queued == [[w.pk for w in shown]]
    assert "Approving 3 assignments in the background" in text and "1 more task(s) were submitted" in text
    assert Assignment.objects.get(pk=late.pk).status == "submitted"
    assert _approved(server) == {w.platform_assignment_id for w in shown}
