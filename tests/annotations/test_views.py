"""Worker pages through Django's test client: the flows, the platforms, and what a page may show."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from annotations.models import (
    Annotation,
    Assignment,
    Claim,
    Participant,
    QualificationGrant,
    Unit,
)
from annotations.platforms import handoff
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.errors import QualificationRequired
from studies.models import Platform, Study
from tests.annotations.factories import ParticipantFactory, add_qualification, make_study
from tests.annotations.pages import (
    EVIL,
    EVIL_ESCAPED,
    answer,
    complete_task,
    consent,
    entry_url,
    form_fields,
    landing_form,
    start,
)
from tests.annotations.platforms.mturk_stubs import published_as

pytestmark = pytest.mark.django_db



def test_utility_flow_hides_the_rationale_until_the_first_answer_is_stored(client):
    study = make_study(n_items=2, n_sources=1, units_per_task=2, rationale_text="SECRET-RATIONALE {item}")
    task = start(client, entry_url(study))
    before = client.get(task)
    html = before.content.decode()
    assert before.status_code == 200 and 'name="step" value="before"' in html
    assert "SECRET-RATIONALE" not in html and "Question 1 of 2" in html
    assert client.get(task).content.decode().count("SECRET-RATIONALE") == 0  # reload: same step, still hidden
    fields, response = answer(client, task, "no")
    assert response.status_code == 302 and response["Location"] == task
    after = client.get(task).content.decode()
    assert 'name="step" value="after"' in after and "SECRET-RATIONALE" in after
    assert re.search(r"Your first answer: <strong>No</strong>", after)
    _, response = answer(client, task, "yes")
    assert response.status_code == 302
    assert "Question 2 of 2" in client.get(task).content.decode()
    a = Annotation.objects.get(step="before")
    assert a.shown_at is not None and a.duration_ms is not None


def test_an_answer_from_the_pages_script_gets_the_next_page_and_a_replay_stores_once(client):
    study = make_study(n_items=2, n_sources=1, units_per_task=2, rationale_text="SECRET-RATIONALE {item}")
    task = start(client, entry_url(study))
    fields = form_fields(client.get(task).content.decode())
    for _ in range(2):  # the script's request, then the same answer again (a retry, or the plain form)
        reveal = client.post(task + "answer", {**fields, "answer": "no"}, HTTP_X_RL_INLINE="1")
        assert reveal.status_code == 200 and reveal["Cache-Control"] == "no-store"
        page = reveal.content.decode()
        assert 'name="step" value="after"' in page and "SECRET-RATIONALE" in page
    assert Annotation.objects.count() == 1
    # The page that came with the answer is the one the task's address shows (but for the CSRF
    # token's mask and the signed time the page was shown).
    def same(html):
        return re.sub(r'name="(csrfmiddlewaretoken|shown)" value="[^"]*"', "", html)
    assert same(client.get(task).content.decode()) == same(page)
    # A refused answer is the same page with its reason (400), as without the header.
    bad = client.post(task + "answer", {**form_fields(page), "answer": "maybe"}, HTTP_X_RL_INLINE="1")
    assert bad.status_code == 400 and 'role="alert"' in bad.content.decode()
    nxt = client.post(task + "answer", {**form_fields(page), "answer": "yes"}, HTTP_X_RL_INLINE="1")
    assert nxt.status_code == 200 and "Question 2 of 2" in nxt.content.decode()
    # The page comes from the task's claims as the answer left them (read under the row lock, not
    # again): the same as the address shows after a second answer too.
    assert same(client.get(task).content.decode()) == same(nxt.content.decode())
    # Only the header's exact value asks for the page.
    fields = form_fields(nxt.content.decode())
    plain = client.post(task + "answer", {**fields, "answer": "no"}, HTTP_X_RL_INLINE="yes")
    assert plain.status_code == 302 and plain["Location"] == task
    last = client.post(task + "answer", {**form_fields(client.get(task).content.decode()), "answer": "no"},
                       HTTP_X_RL_INLINE="1")
    assert "Finish the task" in last.content.decode()
    assert same(client.get(task).content.decode()) == same(last.content.decode())


def test_a_consent_from_the_landing_pages_script_gets_the_first_question_and_its_address(client):
    study = make_study(n_items=2, n_sources=1, units_per_task=2, rationale_text="SECRET-RATIONALE {item}")
    url = entry_url(study)
    form = landing_form(client, url)
    first = client.post(url, form, HTTP_X_RL_INLINE="1")
    assignment = Assignment.objects.get()
    task = f"/w/a/{assignment.token}/"
    # The task's first page itself (200), with the address it belongs to and the study cookie that
    # proves this browser holds the task: the script shows that address, so a reload is the task.
    assert first.status_code == 200 and first["Content-Location"] == task
    assert first["Cache-Control"] == "no-store" and first.cookies[f"rl_w{study.pk}"].value
    page = first.content.decode()
    assert 'name="step" value="before"' in page and "Question 1 of 2" in page and "SECRET-RATIONALE" not in page

    def same(html):
        return re.sub(r'name="(csrfmiddlewaretoken|shown)" value="[^"]*"', "", html)
    assert same(client.get(task).content.decode()) == same(page)  # the cookie came with it
    # The same form again (the plain way after a failed request): the same task, no second one.
    again = client.post(url, form)
    assert again.status_code == 302 and again["Location"] == task and Assignment.objects.count() == 1
    # A refused consent is its page with the reason, and no address to move to.
    refused = Client().post(url, {"consent": "yes", "nonce": "forged"}, HTTP_X_RL_INLINE="1")
    assert refused.status_code == 400 and not refused.has_header("Content-Location")
    assert Assignment.objects.count() == 1


def test_the_task_pages_consent_from_its_script_gets_the_first_question(client):
    study = make_study(n_items=1, n_sources=1, units_per_task=1)
    participant = ParticipantFactory()
    assignment = assignment_start(study=study, participant=participant)
    task = f"/w/a/{assignment.token}/"
    assert 'action="' + task + 'consent"' in client.get(task).content.decode()
    first = client.post(task + "consent", {"consent": "yes"}, HTTP_X_RL_INLINE="1")
    assert first.status_code == 200 and 'name="step" value="before"' in first.content.decode()
    assert Assignment.objects.get().consented_at is not None
    plain = client.post(task + "consent", {"consent": "yes"})
    assert plain.status_code == 302 and plain["Location"] == task


def test_changing_the_first_answer_after_the_reveal_is_refused(client):
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    task = start(client, entry_url(study))
    fields, _ = answer(client, task, "yes")
    replay = client.post(task + "answer", {**fields, "answer": "no"})
    assert replay.status_code == 409
    assert "cannot be changed" in replay.content.decode()
    assert list(Annotation.objects.values_list("step", "answer")) == [("before", "yes")]


def test_double_submit_stores_once(client):
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    task = start(client, entry_url(study))
    fields = form_fields(client.get(task).content.decode())
    for _ in range(2):
        assert client.post(task + "answer", {**fields, "answer": "yes"}).status_code == 302
    assert Annotation.objects.count() == 1


def test_same_browser_resumes_and_a_new_one_gets_other_work(client):
    study = make_study(n_items=4, n_sources=1, units_per_task=2)
    second_tab = landing_form(client, entry_url(study))
    task = start(client, entry_url(study))
    answer(client, task, "yes")
    again = client.get(entry_url(study))
    assert again.status_code == 302 and again["Location"] == task
    # A second tab's consent form, sent after the first: the same worker, the same task.
    assert client.post(entry_url(study), second_tab)["Location"] == task
    other = Client()
    other_task = start(other, entry_url(study))
    assert other_task != task
    assert Participant.objects.count() == 2


def test_question_and_rationale_text_are_escaped(client):
    study = make_study(n_items=1, n_sources=1, units_per_task=1, question_text=EVIL + " {i}",
                       rationale_text=EVIL + " {item}", instructions=EVIL)
    landing = client.get(entry_url(study)).content.decode()
    assert EVIL not in landing and "&lt;script&gt;" in landing
    task = start(client, entry_url(study))
    answer(client, task, "yes")
    html = client.get(task).content.decode()
    assert EVIL not in html and sum(html.count(escaped) for escaped in EVIL_ESCAPED) >= 2


def test_forms_need_csrf():
    study = make_study(n_items=1, n_sources=1, units_per_task=1)
    strict = Client(enforce_csrf_checks=True)
    assert strict.post(entry_url(study), {"consent": "yes"}).status_code == 403
    assert not Assignment.objects.exists()


def test_mturk_preview_is_read_only_and_stores_nothing(client):
    study = make_study(platform=Platform.MTURK)
    url = entry_url(study, assignmentId=handoff.MTURK_PREVIEW_ID, hitId="HIT1")
    page = client.get(url)
    assert page.status_code == 200 and 'id="preview-notice"' in page.content.decode()
    assert 'name="consent"' not in page.content.decode()
    assert client.post(url, {"consent": "yes"}).status_code == 403
    assert not Participant.objects.exists() and not Assignment.objects.exists()


def test_mturk_accept_and_hand_back_by_form_post(client, mturk):
    study = make_study(platform=Platform.MTURK, n_items=2, n_sources=1, units_per_task=1)
    published_as(mturk[1], study, "3HIT1")
    params = {"assignmentId": "3ASSIGN1", "hitId": "3HIT1", "workerId": "AWORKER1",
              "turkSubmitTo": "https://workersandbox.mturk.com"}
    task = start(client, entry_url(study, **params))
    assignment = Assignment.objects.get()
    assert (assignment.platform_assignment_id, assignment.platform_task_id, assignment.participant.external_id) == (
        "3ASSIGN1", "3HIT1", "AWORKER1")
    complete_task(client, task)
    assert client.post(task + "submit").status_code == 302
    done = client.get(task).content.decode()
    assert 'action="https://workersandbox.mturk.com/mturk/externalSubmit"' in done
    assert 'name="assignmentId" value="3ASSIGN1"' in done


def test_mturk_submit_to_elsewhere_is_refused(client):
    study = make_study(platform=Platform.MTURK)
    url = entry_url(study, assignmentId="3A", hitId="3H", workerId="AW", turkSubmitTo="https://evil.example")
    assert client.post(url, {"consent": "yes"}).status_code == 400
    assert not Assignment.objects.exists()


def test_link_participant_gets_a_code_on_screen(client):
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    task = start(client, entry_url(study))
    complete_task(client, task)
    client.post(task + "submit")
    code = Assignment.objects.get().completion_code
    assert f'id="completion-code">{code}<' in client.get(task).content.decode()


def test_unknown_tokens_and_foreign_claims(client):
    study = make_study(n_items=4, n_sources=1, units_per_task=1)
    assert client.get("/w/a/not-a-token/").status_code == 404
    assert client.get("/w/s/1:forged/").status_code == 404
    mine = start(client, entry_url(study))
    other = Client()
    theirs = start(other, entry_url(study))
    their_fields = form_fields(other.get(theirs).content.decode())
    response = client.post(mine + "answer", {**their_fields, "answer": "yes"})
    missing = client.post(mine + "answer", {**their_fields, "claim": "999999", "answer": "yes"})
    # Another task's question is answered as a missing one is: no claim id can be probed.
    assert response.status_code == missing.status_code == 404
    assert response.content == missing.content
    assert not Annotation.objects.exists()


def test_expired_task_refuses_late_answers(client):
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    task = start(client, entry_url(study))
    fields = form_fields(client.get(task).content.decode())
    Assignment.objects.update(expires_at=timezone.now() - timedelta(minutes=1))
    assert "has expired" in client.get(task).content.decode()
    response = client.post(task + "answer", {**fields, "answer": "yes"})
    assert response.status_code == 410 and not Annotation.objects.exists()


def test_closed_study_accepts_no_work(client):
    study = make_study(status=Study.Status.CLOSED)
    assert client.get(entry_url(study)).status_code == 403
    assert client.post(entry_url(study), {"consent": "yes"}).status_code == 403


def test_get_requests_do_not_change_state(client):
    study = make_study(n_items=2, n_sources=1)
    client.get(entry_url(study))
    assert not Participant.objects.exists()
    for path in ("answer", "submit", "consent"):
        task = f"/w/a/{'x' * 32}/{path}"
        assert client.get(task).status_code in (404, 405)


def test_consent_is_required(client):
    study = make_study()
    response = client.post(entry_url(study), {})
    assert response.status_code == 400 and "consent" in response.content.decode()
    assert not Assignment.objects.exists()


def test_qualification_pass_then_work(client):
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    test = add_qualification(study, pass_mark=2)
    task = start(client, entry_url(study))
    html = client.get(task).content.decode()
    assert "Qualification test" in html
    ids = [q.pk for q in test.questions.all()]
    assert client.post(task + "qualification", {f"q_{ids[0]}": "yes"}).status_code == 400
    response = client.post(task + "qualification", {f"q_{ids[0]}": "yes", f"q_{ids[1]}": "no", f"q_{ids[2]}": "no"})
    assert response.status_code == 302
    assert QualificationGrant.objects.get().passed
    assert 'name="step" value="before"' in client.get(task).content.decode()


def test_the_qualification_test_cannot_be_skipped_by_posting_answers_and_the_submit(client):
    """Issue 20 item 3: answers posted straight to ``answer`` (claim ids are guessable) and the
    submit are refused until the test is passed; the page is not the only gate."""
    study = make_study(n_items=2, n_sources=1, units_per_task=2)
    test = add_qualification(study, pass_mark=2)
    task = start(client, entry_url(study))
    assignment = Assignment.objects.get()
    for claim in assignment.claims.order_by("-position"):
        for step in ("before", "after"):
            response = client.post(task + "answer", {"claim": claim.pk, "step": step, "answer": "yes"})
            assert response.status_code == 403 and "qualification test first" in response.content.decode()
    response = client.post(task + "submit")
    assert response.status_code == 403 and "qualification test first" in response.content.decode()
    assert not Annotation.objects.exists()
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.ACTIVE and not QualificationGrant.objects.exists()
    assert "Qualification test" in client.get(task).content.decode()  # still asked
    ids = [q.pk for q in test.questions.all()]
    client.post(task + "qualification", {f"q_{ids[0]}": "yes", f"q_{ids[1]}": "no", f"q_{ids[2]}": "yes"})
    claim = assignment.claims.order_by("position").first()
    shown = form_fields(client.get(task).content.decode())["shown"]  # what the page now gives
    assert client.post(task + "answer", {"claim": claim.pk, "step": "before", "answer": "yes",
                                         "shown": shown}).status_code == 302


def test_the_answer_and_submit_services_refuse_while_the_qualification_test_is_needed():
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    add_qualification(study)
    assignment = assignment_start(study=study, participant=ParticipantFactory(), consented=True)
    claim = assignment.claims.get()
    with pytest.raises(QualificationRequired):
        annotation_submit(assignment=assignment, claim=claim, step="before", answer="yes")
    Claim.objects.filter(pk=claim.pk).update(completed_at=timezone.now())  # as if answered some other way
    with pytest.raises(QualificationRequired):
        assignment_submit(assignment=assignment)
    assert Assignment.objects.get().status == Assignment.Status.ACTIVE


def test_a_task_waiting_for_a_qualification_test_the_study_no_longer_has_is_not_stuck():
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    test = add_qualification(study)
    assignment = assignment_start(study=study, participant=ParticipantFactory(), consented=True)
    assert Assignment.objects.get().qualification_pending
    test.delete()  # the researcher removed the test: the page asks no test, so neither do the services
    annotation_submit(assignment=assignment, claim=assignment.claims.get(), step="before", answer="yes")
    assert Annotation.objects.count() == 1


def test_qualification_fail_ends_politely_and_gives_units_back(client):
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    test = add_qualification(study, pass_mark=3)
    task = start(client, entry_url(study))
    ids = [q.pk for q in test.questions.all()]
    client.post(task + "qualification", {f"q_{ids[0]}": "no", f"q_{ids[1]}": "no", f"q_{ids[2]}": "yes"})
    assert "did not reach the pass mark" in client.get(task).content.decode()
    assert set(Unit.objects.values_list("n_claimed", flat=True)) == {0}
    again = consent(client, entry_url(study))
    assert again.status_code == 403 and "pass mark" in again.content.decode()


def test_generalization_reveals_original_question_and_its_rationale_only_after(client):
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=1, n_sources=1, n_genq=1, units_per_task=1,
                       question_text="ORIGINAL-QUESTION {i}", rationale_text="ORIGINAL-RATIONALE {item}")
    task = start(client, entry_url(study))
    before = client.get(task).content.decode()
    assert "Generalization 0 of question 0?" in before
    assert "ORIGINAL-QUESTION" not in before and "ORIGINAL-RATIONALE" not in before
    answer(client, task, "yes")
    after = client.get(task).content.decode()
    assert "ORIGINAL-QUESTION 0" in after and "ORIGINAL-RATIONALE 0" in after


def test_question_validation_page(client):
    study = make_study(kind=Study.Kind.QUESTION_VALIDATION, n_items=1, n_genq=1, units_per_task=1)
    task = start(client, entry_url(study))
    html = client.get(task).content.decode()
    assert "Claimed type: <strong>Rephrase</strong>" in html and 'name="well_formed"' in html
    fields = form_fields(html)
    response = client.post(task + "answer", {**fields, "answer": "", "well_formed": "yes", "type_correct": "no",
                                             "answer_correct": "yes", "corrected_answer": ""})
    assert response.status_code == 302
    stored = Annotation.objects.get()
    assert stored.answer == "invalid" and stored.payload["type_correct"] == "no"


def test_rationale_properties_page(client):
    study = make_study(kind=Study.Kind.RATIONALE_PROPERTIES, n_items=1, n_sources=1, units_per_task=1,
                       rationale_text="SHOWN-RATIONALE {item}")
    task = start(client, entry_url(study))
    html = client.get(task).content.decode()
    assert "SHOWN-RATIONALE 0" in html and html.count('type="radio"') == 16
    fields = form_fields(html)
    missing = client.post(task + "answer", {**fields, "answer": "", "grammatical": "yes"})
    assert missing.status_code == 400 and not Annotation.objects.exists()
    props = dict.fromkeys(["grammatical", "factual", "supports_label", "contrast", "novel_info", "leakage",
                           "hallucination", "redundant"], "no")
    assert client.post(task + "answer", {**fields, "answer": "", **props}).status_code == 302
    assert "All done" in client.get(task).content.decode()


def test_attention_check_is_shown_and_scored(client):
    from tests.annotations.factories import AttentionCheckFactory

    study = make_study(n_items=2, n_sources=1, units_per_task=2)
    AttentionCheckFactory(study=study, question="ATTENTION: choose No")
    task = start(client, entry_url(study))
    answer(client, task, "yes")
    answer(client, task, "yes")
    html = client.get(task).content.decode()
    assert "ATTENTION: choose No" in html and "Question 2 of 3" in html
    answer(client, task, "yes")
    assert Annotation.objects.get(step="attention").payload == {"correct": False}
    assert Claim.objects.filter(attention_check__isnull=False).count() == 1


def test_leave_gives_units_back(client):
    study = make_study(n_items=2, n_sources=1, units_per_task=2)
    task = start(client, entry_url(study))
    assert client.post(task + "leave").status_code == 302
    assert "You left this task" in client.get(task).content.decode()
    assert set(Unit.objects.values_list("n_claimed", flat=True)) == {0}


def test_a_worker_can_flag_a_broken_question_and_earns_the_bonus_once_a_researcher_accepts_it(client):
    from annotations.selectors.platforms import study_bonus_candidates
    from annotations.services.flags import flag_accept
    from annotations.services.platforms.access import OPERATOR

    study = make_study(n_items=1, n_sources=1, units_per_task=1)
    task = start(client, entry_url(study))
    html = client.get(task).content.decode()
    assert 'name="flag"' in html and 'for="flag"' in html  # labelled control on the question page
    _, response = answer(client, task, "yes", flag="1", flag_note="Both answers could be right. " + "x" * 600)
    assert response.status_code == 302
    _, response = answer(client, task, "yes")
    assert response.status_code == 302
    before, after = Annotation.objects.get(step="before"), Annotation.objects.get(step="after")
    assert before.payload["flag"] is True
    assert before.payload["flag_note"].startswith("Both answers could be right.")
    assert len(before.payload["flag_note"]) == 500
    assert after.payload == {}
    assert client.post(task + "submit").status_code == 302  # bonuses go to finished work only
    assignment = Assignment.objects.get()
    assert study_bonus_candidates(study=study)["flagged_error"] == []  # ticking the box alone earns nothing
    flag_accept(annotation=before, user=OPERATOR)
    assert study_bonus_candidates(study=study)["flagged_error"] == [assignment.pk]


def test_flag_is_part_of_the_idempotent_answer(client):
    study = make_study(n_items=1, n_sources=1, units_per_task=1)
    task = start(client, entry_url(study))
    fields, first = answer(client, task, "yes", flag="1", flag_note="broken")
    replay = client.post(task + "answer", {**fields, "answer": "yes", "flag": "1", "flag_note": "broken"})
    assert first.status_code == replay.status_code == 302
    assert Annotation.objects.filter(step="before").count() == 1


def test_a_malformed_answer_form_is_refused_with_its_fields_named_and_nothing_cut_to_fit(client):
    """Each parameter of the answer form is checked against its format: a claim that is not a
    whole number, or a value longer than its field's limit, gets a 400 naming the field, and
    nothing is stored (before, an over-long payload value was cut to 50 characters and stored)."""
    study = make_study(kind=Study.Kind.QUESTION_VALIDATION, n_items=1, n_genq=1, units_per_task=1)
    task = start(client, entry_url(study))
    fields = form_fields(client.get(task).content.decode())
    good = {**fields, "answer": "", "well_formed": "yes", "type_correct": "no", "answer_correct": "yes",
            "corrected_answer": ""}
    not_a_number = client.post(task + "answer", {**good, "claim": "1x"})
    assert not_a_number.status_code == 400 and "claim: Enter a whole number." in not_a_number.content.decode()
    long_label = client.post(task + "answer", {**good, "type_correct": "no" + "o" * 60})
    assert long_label.status_code == 400 and "type_correct: at most 50 characters" in long_label.content.decode()
    assert not Annotation.objects.exists()
    assert client.post(task + "answer", good).status_code == 302
    assert Annotation.objects.get().payload["type_correct"] == "no"
