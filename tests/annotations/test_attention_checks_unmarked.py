"""An attention check cannot be told from a question before it is answered (audit: a worker's script
read the check off its page and answered only the checks with care). Before, the check's form sent
``step=attention``, its heading was "Question" and it had no problem box; its ``shown`` token named
the step in readable base64 JSON; its claim id was the task's highest (checks were inserted after
the units) and it stood at the same places in every task. Now a check shows as a question's first
step (``steps.page_step``; its answer is stored as the check's own step, graded, without a flag),
the token binds its step by the signature alone, the task's claims are inserted in their order and
the checks' places are drawn per task (``services.assignment.attention_slots``)."""
from __future__ import annotations

import base64
import html
import json
import re

import pytest
from django.test import Client

from annotations.models import Annotation, Claim
from annotations.selectors import shown_at_from_token
from annotations.services.assignment import assignment_start
from tests.annotations.factories import AttentionCheckFactory, ParticipantFactory, make_study
from tests.annotations.pages import answer, entry_url, form_fields, start, task_of

pytestmark = pytest.mark.django_db
CHECK = "ATTENTION: choose No"


def _normalised(page: str) -> str:
    """A step page less what differs between any two questions: the question's text and choices,
    the claim, the token, the numbers (progress, deadline)."""
    page = re.sub(r'(name="(?:claim|shown|csrfmiddlewaretoken)" value=")[^"]*"', r'\1"', page)
    page = re.sub(r"(<legend[^>]*>).*?(</legend>)", r"\1\2", page, flags=re.S)
    page = re.sub(r'<div class="choice"><input type="radio".*?</div>', "", page, flags=re.S)
    return re.sub(r"\d+", "0", page)


def _token_payload(token: str):
    """What anyone can read of a signed token: its payload (base64 JSON before the first ':')."""
    head = html.unescape(token).split(":")[0]
    return json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))


def test_a_check_page_differs_from_a_question_first_step_only_in_its_question():
    study = make_study(n_items=6, n_sources=1, units_per_task=3)
    AttentionCheckFactory(study=study, question=CHECK)
    client = Client()
    task = start(client, entry_url(study))
    firsts: dict[bool, list[str]] = {True: [], False: []}
    for _ in range(20):
        page = client.get(task).content.decode()
        if 'name="claim"' not in page:
            break
        fields = form_fields(page)
        is_check = CHECK in page
        if fields["step"] == "before":
            firsts[is_check].append(page)
        assert fields["step"] == "before" or not is_check
        payload = _token_payload(fields["shown"])
        assert payload[0] == int(fields["claim"]) and len(payload) == 2  # claim and time: no step
        assert client.post(task + "answer", {**fields, "answer": "no"}).status_code == 302
    assert len(firsts[True]) == 1 and len(firsts[False]) == 3
    check = firsts[True][0]
    assert 'id="flag-box"' in check and "Answer on your own" in check and "attention" not in _normalised(check).lower()
    later = firsts[False][1:]  # past the first answer, as a check always is (never first)
    assert {_normalised(p) for p in later} == {_normalised(check)}


def test_a_check_answered_from_its_page_is_stored_as_the_check_graded_and_never_flagged():
    study = make_study(n_items=4, n_sources=1, units_per_task=2)
    AttentionCheckFactory(study=study, question=CHECK)
    client = Client()
    task = start(client, entry_url(study))
    while CHECK not in client.get(task).content.decode():  # its place is drawn: after the first or second unit
        answer(client, task, "yes")
        answer(client, task, "yes")
    fields, response = answer(client, task, "no", flag="1", flag_note="no answer is right")
    assert fields["step"] == "before" and response.status_code == 302
    stored = Annotation.objects.get(claim_id=int(fields["claim"]))
    assert (stored.step, stored.answer, stored.payload) == ("attention", "no", {"correct": True})
    assert stored.duration_ms is not None  # timed by its token, as every page's answer
    # Its token is bound to the check's own step and claim, never another.
    token = html.unescape(fields["shown"])
    assert shown_at_from_token(token, claim_id=int(fields["claim"]), step="attention") is not None
    assert shown_at_from_token(token, claim_id=int(fields["claim"]), step="before") is None
    assert shown_at_from_token(token, claim_id=int(fields["claim"]) + 1, step="attention") is None


def test_what_a_script_may_send_before_answering_is_refused_alike_for_a_check_and_a_question():
    """Sent for the question shown, before its answer: the check's own step name, or the second
    step. A check and a question answer alike (and store nothing)."""
    study = make_study(n_items=40, n_sources=1, units_per_task=2, quota=100)
    AttentionCheckFactory(study=study, question=CHECK)
    for _ in range(30):  # a task whose check stands after its first unit (its place is drawn)
        client = Client()
        task = start(client, entry_url(study))
        order = list(Claim.objects.filter(assignment=task_of(task)).order_by("position")
                     .values_list("attention_check_id", flat=True))
        if order[1] is not None:
            break
    answer(client, task, "yes")
    answer(client, task, "yes")

    def probes() -> list[tuple[int, str]]:
        fields = form_fields(client.get(task).content.decode())
        out = []
        for step, value in (("attention", "yes"), ("attention", ""), ("after", "yes"), ("validation", "yes")):
            response = client.post(task + "answer", {**fields, "step": step, "answer": value})
            said = re.search(r'<p (?:class="error" )?role="alert"[^>]*>(.*?)</p>', response.content.decode(), re.S)
            out.append((response.status_code, said.group(1) if said else None))
        return out

    on_check = probes()
    assert CHECK in client.get(task).content.decode()
    answer(client, task, "no")
    on_question = probes()
    assert on_check == on_question, on_check
    assert Annotation.objects.count() == 3  # the first question's two steps, the check: nothing else


def test_an_answer_sent_for_a_later_question_is_refused_before_its_choices_are_read():
    """A script posting a label to each later claim of its task (their ids follow the one shown)
    learned which was the check from the refusal: its choices were read first ("'yes' is not one of
    the choices (A, B)") where a question's answer was refused as "another question". Every later
    claim is now refused alike, before its choices are read."""
    study = make_study(n_items=6, n_sources=1, units_per_task=4)
    AttentionCheckFactory(study=study, question=CHECK, choices=[{"label": "A", "text": "A"},
                                                                 {"label": "B", "text": "B"}], correct_answer="A")
    client = Client()
    task = start(client, entry_url(study))
    fields = form_fields(client.get(task).content.decode())
    later = Claim.objects.filter(assignment=task_of(task)).order_by("position")[1:]
    said = set()
    for claim in later:
        response = client.post(task + "answer", {**fields, "claim": claim.pk, "answer": "yes"})
        alert = re.search(r'role="alert"[^>]*>(.*?)</p>', response.content.decode(), re.S)
        said.add((response.status_code, alert.group(1) if alert else None))
    assert len(said) == 1, said
    assert any(c.attention_check_id for c in later)
    assert not Annotation.objects.exists()


def test_claim_ids_grow_with_the_claims_places():
    study = make_study(n_items=12, n_sources=1, units_per_task=5)
    for _ in range(2):
        AttentionCheckFactory(study=study)
    for _ in range(4):
        task = assignment_start(study=study, participant=ParticipantFactory())
        rows = list(Claim.objects.filter(assignment=task).order_by("position").values_list("id", "attention_check_id"))
        assert len(rows) == 7 and sum(1 for _, check in rows if check) == 2
        ids = [pk for pk, _ in rows]
        assert ids == sorted(ids), rows


def test_checks_stand_at_places_drawn_per_task_never_first_last_or_together():
    study = make_study(n_items=30, n_sources=1, units_per_task=6, quota=100)
    AttentionCheckFactory(study=study)
    AttentionCheckFactory(study=study)
    places = set()
    for _ in range(12):
        task = assignment_start(study=study, participant=ParticipantFactory())
        order = list(Claim.objects.filter(assignment=task).order_by("position")
                     .values_list("attention_check_id", flat=True))
        at = tuple(i for i, check in enumerate(order) if check)
        assert len(order) == 8 and len(at) == 2
        assert order[0] is None and order[-1] is None and at[1] - at[0] > 1, order  # never first, last, together
        places.add(at)
    assert len(places) > 1  # 10 possible pairs: twelve tasks all alike is a one-in-10**11 event
