"""Worker-facing parameters an audit found accepted, through the pages (Django test client):

1. a participant identifier typed in a browser whose study cookie proves a task in progress of
   another participant (one browser, two tasks on the same units);
2. an identifier typed in a browser whose participant failed the qualification test (a retake);
3. an answer without the page's ``shown`` token (no time, so out of the speeder check and the
   timing figures);
4. an answer to a question the page does not show yet (attention checks included);
5. control and bidirectional-override characters in a flag's note.
"""
from __future__ import annotations

import pytest
from django.test import Client

from annotations.models import (
    Annotation,
    Assignment,
    Claim,
    ConsentReceipt,
    OpenLink,
    Participant,
    QualificationGrant,
    QualificationQuestion,
)
from annotations.selectors import shown_token
from annotations.services.links import links_generate, open_link_create
from annotations.services.platforms.access import OPERATOR
from tests.annotations.factories import AttentionCheckFactory, add_qualification, make_study
from tests.annotations.pages import (
    answer,
    complete_task,
    entry_url,
    form_fields,
    landing_form,
    start,
    task_of,
)

pytestmark = pytest.mark.django_db


def claims_in_order(task: Assignment) -> list[Claim]:
    return list(Claim.objects.filter(assignment=task).order_by("position"))


def shown_on(client: Client, task: str) -> tuple[int, str]:
    """The claim and step the task page shows now."""
    fields = form_fields(client.get(task).content.decode())
    return int(fields["claim"]), fields["step"]


# --- 1. one browser, one participant at a time ------------------------------------------------------

def test_an_identifier_typed_in_a_browser_holding_a_task_of_another_participant_is_refused(client):
    """Two landing pages loaded, the first form sent (anonymous task T1), the second sent with an
    identifier: before, a second task in progress in the same browser, claiming the same units."""
    study = make_study(n_items=2, n_sources=1, units_per_task=2, quota=5)
    url = entry_url(study)
    second = landing_form(client, url, identifier="someone@x.org")
    first = start(client, url)
    response = client.post(url, second)
    assert response.status_code == 409
    assert "in progress as another participant" in response.content.decode()
    assert list(Assignment.objects.values_list("token", flat=True)) == [task_of(first).token]
    assert Participant.objects.count() == 1  # the identifier's participant was not made
    assert ConsentReceipt.objects.filter(assignment__isnull=True).count() == 0  # the refused form kept nothing
    assert client.get(url)["Location"] == first  # the browser still has its one task


def test_the_same_identifier_again_in_that_browser_is_that_participant(client):
    study = make_study(n_items=2, n_sources=1, units_per_task=2, quota=5)
    url = entry_url(study)
    second = landing_form(client, url, identifier="Ana@Lab.org ")
    first = start(client, url, identifier="ana@lab.org")
    response = client.post(url, second)
    assert response.status_code == 302 and response["Location"] == first
    assert Assignment.objects.count() == 1


def test_another_identifier_in_a_browser_holding_an_identified_task_is_refused(client):
    study = make_study(n_items=2, n_sources=1, units_per_task=2, quota=5)
    url = entry_url(study)
    second = landing_form(client, url, identifier="bob@lab.org")
    start(client, url, identifier="ana@lab.org")
    assert client.post(url, second).status_code == 409
    assert Assignment.objects.count() == 1 and Participant.objects.count() == 1


def test_an_identifier_on_an_open_link_while_the_browser_holds_a_task_takes_no_place(client):
    study = make_study(n_items=2, n_sources=1, units_per_task=2, quota=5)
    link = open_link_create(study=study, user=OPERATOR, max_participants=2)
    url = f"/w/o/{link.token}/"
    second = landing_form(client, url, identifier="someone@x.org")
    start(client, url)
    assert client.post(url, second).status_code == 409
    assert Assignment.objects.count() == 1
    assert OpenLink.objects.get(pk=link.pk).n_participants == 1


def test_an_identifier_in_a_browser_holding_a_single_person_links_task_is_refused(client):
    study = make_study(n_items=4, n_sources=1, units_per_task=2, quota=5)
    link = links_generate(study=study, user=OPERATOR, n=1)[0]
    # the plain link takes no one once single-person links exist: an open link admits anyone
    url = f"/w/o/{open_link_create(study=study, user=OPERATOR).token}/"
    second = landing_form(client, url, identifier="someone@x.org")
    start(client, f"/w/l/{link.token}/")
    assert client.post(url, second).status_code == 409
    assert Assignment.objects.count() == 1


def test_once_the_browsers_task_is_finished_an_identifier_is_a_participant_again(client):
    """The rule is one participant at a time: a finished task does not bind the browser for ever
    (a new browser would be a new participant anyway: README, *What it cannot verify*)."""
    study = make_study(n_items=4, n_sources=1, units_per_task=2, quota=5)
    url = entry_url(study)
    first = start(client, url)
    complete_task(client, first)
    assert client.post(first + "submit").status_code == 302
    second = start(client, url, identifier="someone@x.org")
    assert second != first and task_of(second).status == Assignment.Status.ACTIVE


# --- 2. a failed qualification test is not retaken under a typed identifier --------------------------

def _fail_the_test(client: Client, task: str, study) -> None:
    questions = QualificationQuestion.objects.filter(test__study=study).order_by("position")
    wrong = {f"q_{q.pk}": "no" if q.correct_answer == "yes" else "yes" for q in questions}
    assert client.post(task + "qualification", wrong).status_code == 302
    assert not QualificationGrant.objects.get(participant=task_of(task).participant).passed


@pytest.mark.parametrize("first_identifier", ["", "ana@lab.org"])
def test_a_failed_test_is_not_retaken_in_the_same_browser_under_another_identifier(client, first_identifier):
    study = make_study(n_items=4, n_sources=1, units_per_task=2, quota=5)
    add_qualification(study)
    url = entry_url(study)
    task = start(client, url, **({"identifier": first_identifier} if first_identifier else {}))
    _fail_the_test(client, task, study)
    form = landing_form(client, url, identifier="fresh-id-1")
    response = client.post(url, form)
    assert response.status_code == 403
    assert "did not reach the pass mark" in response.content.decode()
    assert Assignment.objects.count() == 1 and Participant.objects.count() == 1
    assert QualificationGrant.objects.count() == 1


def test_a_failed_test_in_one_browser_leaves_another_browser_alone(client):
    """The documented limit stays: a new browser is a new participant."""
    study = make_study(n_items=4, n_sources=1, units_per_task=2, quota=5)
    add_qualification(study)
    url = entry_url(study)
    task = start(client, url)
    _fail_the_test(client, task, study)
    assert start(Client(), url, identifier="fresh-id-1") != task


# --- 3. a new answer carries the page's shown token ------------------------------------------------

@pytest.mark.parametrize("inline", [False, True])
@pytest.mark.parametrize("shown", [None, "", "not-a-token", "other-step", "other-claim"])
def test_a_new_answer_without_the_pages_shown_token_is_refused(client, shown, inline):
    study = make_study(n_items=2, n_sources=1, units_per_task=2)
    task = start(client, entry_url(study))
    fields = form_fields(client.get(task).content.decode())
    claims = claims_in_order(task_of(task))
    if shown is None:
        fields.pop("shown")
    elif shown == "other-step":
        fields["shown"] = shown_token(claim_id=claims[0].pk, step="after")
    elif shown == "other-claim":
        fields["shown"] = shown_token(claim_id=claims[1].pk, step="before")
    else:
        fields["shown"] = shown
    headers = {"HTTP_X_RL_INLINE": "1"} if inline else {}
    response = client.post(task + "answer", {**fields, "answer": "yes"}, **headers)
    assert response.status_code == 400
    page = response.content.decode()
    assert "Please reload the page and answer again." in page
    assert f'name="claim" value="{claims[0].pk}"' in page  # the question again, with a fresh token
    assert not Annotation.objects.exists()
    _, response = answer(client, task, "yes")  # what the page gives is taken
    assert response.status_code == 302
    stored = Annotation.objects.get()
    assert stored.shown_at is not None and stored.duration_ms is not None


def test_a_stored_answer_sent_again_without_the_token_is_still_idempotent(client):
    study = make_study(n_items=2, n_sources=1, units_per_task=2)
    task = start(client, entry_url(study))
    fields, response = answer(client, task, "yes")
    assert response.status_code == 302
    replay = dict(fields)
    replay.pop("shown")
    assert client.post(task + "answer", {**replay, "answer": "yes"}).status_code == 302  # a double click's copy
    assert client.post(task + "answer", {**replay, "answer": "no"}).status_code == 409  # still locked
    assert Annotation.objects.count() == 1


def test_the_answer_page_gives_the_shown_field_to_both_ways_of_sending(client):
    """The no-JavaScript form and the inline one (the script sends the same form) carry ``shown``."""
    study = make_study(n_items=2, n_sources=1, units_per_task=2)
    task = start(client, entry_url(study))
    page = client.get(task).content.decode()
    assert 'id="answer-form" data-inline' in page and 'name="shown" value="' in page
    inline = client.post(task + "answer", {**form_fields(page), "answer": "yes"}, HTTP_X_RL_INLINE="1")
    assert inline.status_code == 200 and 'name="shown" value="' in inline.content.decode()
    assert client.post(task + "answer", {**form_fields(inline.content.decode()), "answer": "no"}).status_code == 302
    assert Annotation.objects.exclude(shown_at=None).count() == 2


# --- 4. questions are answered in the order the page shows them --------------------------------------

def test_an_answer_to_a_later_question_than_the_page_shows_is_refused(client):
    study = make_study(n_items=3, n_sources=1, units_per_task=3)
    task = start(client, entry_url(study))
    claims = claims_in_order(task_of(task))
    last = claims[-1].pk
    for step in ("before", "after"):
        # Even with a valid token for that question and step: the order is the rule.
        response = client.post(task + "answer", {"claim": last, "step": step, "answer": "yes",
                                                 "shown": shown_token(claim_id=last, step=step)})
        assert response.status_code == 409
    assert "answered in order" in response.content.decode()
    assert not Annotation.objects.exists()
    assert shown_on(client, task) == (claims[0].pk, "before")


def test_answers_follow_the_pages_order_through_an_attention_check(client):
    study = make_study(n_items=2, n_sources=1, units_per_task=2)
    AttentionCheckFactory(study=study, question="ATTENTION: choose No")
    task = start(client, entry_url(study))
    claims = claims_in_order(task_of(task))
    check = next(c for c in claims if c.attention_check_id)
    later_unit = claims[claims.index(check) + 1]
    # A check's page names it as a question's first step ("before"): its form, sent early.
    early = client.post(task + "answer", {"claim": check.pk, "step": "before", "answer": "no",
                                          "shown": shown_token(claim_id=check.pk, step="attention")})
    assert early.status_code == 409  # the check before its turn
    for claim in claims[: claims.index(check)]:
        assert shown_on(client, task)[0] == claim.pk
        answer(client, task, "yes")
        answer(client, task, "yes")
    assert shown_on(client, task) == (check.pk, "before")
    skip = client.post(task + "answer", {"claim": later_unit.pk, "step": "before", "answer": "yes",
                                         "shown": shown_token(claim_id=later_unit.pk, step="before")})
    assert skip.status_code == 409  # the question after the check, while the page shows the check
    assert not Annotation.objects.filter(claim=later_unit).exists()
    _, response = answer(client, task, "no")
    assert response.status_code == 302 and Annotation.objects.get(claim=check).payload == {"correct": True}
    assert shown_on(client, task) == (later_unit.pk, "before")


# --- 5. a flag's note keeps no control or format characters -----------------------------------------

def test_a_flag_note_drops_control_and_bidirectional_characters(client):
    study = make_study(n_items=1, n_sources=1, units_per_task=1)
    task = start(client, entry_url(study))
    note = "\x1b[31m\u202eevil\u2066\u200f\x07 line one\r\nline\ttwo\x7f\x85 " + "A" * 1000
    _, response = answer(client, task, "yes", flag="1", flag_note=note)
    assert response.status_code == 302
    stored = Annotation.objects.get().payload["flag_note"]
    assert stored.startswith("[31mevil line one\nline\ttwo AAA")
    assert len(stored) == 500 and stored.endswith("A")
    assert not any(c in stored for c in "\x1b\u202e\u2066\u200f\x07\r\x7f\x85")


def test_a_flag_note_keeps_the_joiners_words_and_emoji_are_made_of(client):
    """Only bidirectional controls go: the zero-width non-joiner of Persian spelling, the joiner of
    an emoji family and a soft hyphen are what the worker wrote."""
    study = make_study(n_items=1, n_sources=1, units_per_task=1)
    task = start(client, entry_url(study))
    note = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645 \U0001F468\u200d\U0001F469\u200d\U0001F467 co\u00adop"
    _, response = answer(client, task, "yes", flag="1", flag_note=note)
    assert response.status_code == 302
    assert Annotation.objects.get().payload["flag_note"] == note
