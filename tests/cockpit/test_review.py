"""Review the work (issue 12): the answers list a reviewer reads, the workers of a study and one
worker's page, from which approve, reject, bonus and block go through the audited services."""
from __future__ import annotations

import pytest

from annotations.models import Annotation, Assignment, Bonus, Participant, PlatformCall, WorkerBlock
from annotations.services.answers import annotation_submit, assignment_submit
from studies.models import Platform
from studies.services.sharing import study_share
from tests.annotations.factories import AttentionCheckFactory
from tests.cockpit.conftest import staff_client
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db

ANSWERS = "/admin/annotations/annotation/"


def wrong_first(claim, step) -> str:
    return "no" if step == "before" else claim.unit.item.gold_answer  # gold is "yes"


def flag_first_before(claim, step):
    return {"flag": True, "flag_note": "two answers fit"} if (step == "before" and claim.position == 0) else None


@pytest.fixture
def reviewed(dana):
    """A study with an attention check: one careful worker, one who fails the check and answers
    wrong, one who reports a problem; all through participant links (they move no money)."""
    user, client = dana
    study = open_utility_study(name="review", n_items=2, n_sources=2, quota=3, units_per_task=2, owner=user,
                               source_names=["gpt3", "t5large"])
    AttentionCheckFactory(study=study, question="Attention: choose No.", correct_answer="no")
    careful = work(study, "careful", platform=Platform.LINK, answer=lambda claim, step: claim.unit.item.gold_answer)
    careless = work(study, "careless", platform=Platform.LINK, submit=False, steps=0)
    for claim in careless.claims.select_related("attention_check", "unit__item").order_by("position"):
        if claim.attention_check_id:
            annotation_submit(assignment=careless, claim=claim, step="attention", answer="yes")
        else:
            annotation_submit(assignment=careless, claim=claim, step="before", answer="no")
            annotation_submit(assignment=careless, claim=claim, step="after", answer="no")
    assignment_submit(assignment=careless)
    flagger = work(study, "flagger", platform=Platform.LINK, answer=wrong_first, payload=flag_first_before)
    return client, study, {"careful": careful, "careless": careless, "flagger": flagger}


def listed(client, query: str = "") -> list[Annotation]:
    response = client.get(ANSWERS + query)
    assert response.status_code == 200, response.content[:500]
    return list(response.context["cl"].queryset)


def test_the_answers_list_shows_what_a_reviewer_needs(reviewed):
    client, study, _ = reviewed
    html = client.get(ANSWERS + f"?claim__study__id__exact={study.pk}").content.decode()
    item = study.items.first()
    for needle in (item.question, "gpt3", "t5large", "Attention: choose No.", "Explanation shown", "two answers fit",
                   "no → yes (yes)", "Before → after"):
        assert needle in html, needle
    assert "Because review-q" in html  # the explanation, on the answer given after it
    assert "careful" not in html  # pseudonyms, not raw ids
    assert str(Participant.objects.get(external_id="careful")).split(":")[1] in html


def test_the_explanation_shows_only_on_the_answer_after_it(reviewed):
    client, study, _ = reviewed
    admin_page = client.get(ANSWERS + "?step__exact=before")
    assert "Because review-q" not in admin_page.content.decode()


def test_the_filters_match_the_answers_table(reviewed):
    client, study, workers = reviewed
    base = f"?claim__study__id__exact={study.pk}"
    everything = listed(client, base)
    assert len(everything) == Annotation.objects.filter(claim__study=study).count() == 3 * (2 * 2 + 1)
    right = listed(client, base + "&correct=yes")
    wrong = listed(client, base + "&correct=no")
    assert len(right) + len(wrong) == len(everything)
    # careful: all 5 right; careless: 2 before (gold yes, said no), 2 after, the check: all wrong; flagger: 2 wrong.
    assert len(wrong) == 5 + 2
    assert all(a.is_correct is False for a in wrong)
    careless = Participant.objects.get(external_id="careless")
    theirs = listed(client, base + f"&claim__participant__id__exact={careless.pk}")
    assert {a.claim.participant_id for a in theirs} == {careless.pk} and len(theirs) == 5
    gpt3 = study.sources.get(name="gpt3")
    assert {a.claim.unit.source_id for a in listed(client, base + f"&claim__unit__source__id__exact={gpt3.pk}")} == {
        gpt3.pk}
    flagged = listed(client, base + "&flag=yes")
    assert [a.payload["flag_note"] for a in flagged] == ["two answers fit"]
    assert len(listed(client, base + "&step__exact=attention")) == 3


def test_the_workers_page_shows_accuracy_time_and_flags(reviewed):
    client, study, _ = reviewed
    html = client.get(f"/admin/studies/study/{study.pk}/workers/").content.decode()
    assert html.count("failed every check") == 1
    response = client.get(f"/admin/studies/study/{study.pk}/workers/")
    records = {r.pseudonym: r for r in response.context["workers"]}
    by_id = {p.external_id: str(p).split(":")[1] for p in Participant.objects.all()}
    careful, careless, flagger = (records[by_id[n]] for n in ("careful", "careless", "flagger"))
    assert (str(careful.attention), str(careful.before), str(careful.after)) == ("1/1 (100.0%)", "2/2 (100.0%)",
                                                                                 "2/2 (100.0%)")
    assert (str(careless.attention), str(careless.after)) == ("0/1 (0.0%)", "0/2 (0.0%)")
    assert careless.failed_every_check and not careful.failed_every_check
    assert (flagger.flags, str(flagger.before), str(flagger.after)) == (1, "0/2 (0.0%)", "2/2 (100.0%)")
    assert careful.answers == 5 and careful.tasks == {"submitted": 1}


def test_approve_reject_bonus_and_block_from_the_worker_page(reviewed):
    client, study, workers = reviewed
    careful, careless = workers["careful"], workers["careless"]
    page = f"/admin/studies/study/{study.pk}/workers/{careful.participant_id}/"
    assert client.get(page).status_code == 200
    client.post(page, {"action": "approve", "assignment": careful.pk})
    client.post(page, {"action": "approve", "assignment": careful.pk})  # a double click
    careful.refresh_from_db()
    assert careful.status == Assignment.Status.APPROVED
    said = [client.post(page, {"action": "bonus", "assignment": careful.pk, "amount": "0.50", "kind": "good_work",
                               "reason": "Careful work throughout."}, follow=True).content.decode() for _ in range(2)]
    assert Bonus.objects.filter(assignment=careful).count() == 1  # the same bonus, once
    # The second click says so: it paid nothing (a researcher who meant a second bonus knows it was not paid).
    assert "the same bonus is not paid again" not in said[0] and "the same bonus is not paid again" in said[1]

    bad = f"/admin/studies/study/{study.pk}/workers/{careless.participant_id}/"
    refused = client.post(bad, {"action": "reject", "assignment": careless.pk, "feedback": ""}, follow=True)
    assert "Nothing was done" in refused.content.decode()
    careless.refresh_from_db()
    assert careless.status == Assignment.Status.SUBMITTED
    client.post(bad, {"action": "reject", "assignment": careless.pk, "feedback": "Failed the attention check."})
    client.post(bad, {"action": "block", "reason": "Failed every attention check."})
    careless.refresh_from_db()
    assert careless.status == Assignment.Status.REJECTED
    # Blocked in this study (and the researcher's other studies), not everywhere.
    assert not Participant.objects.get(pk=careless.participant_id).blocked
    assert WorkerBlock.objects.filter(participant_id=careless.participant_id, study=study, researcher=study.owner,
                                      everywhere=False).exists()
    assert "blocked)" in client.get(bad).content.decode()
    # Another worker's task cannot be reviewed from this worker's page.
    other = client.post(bad, {"action": "approve", "assignment": workers["flagger"].pk}, follow=True)
    assert "is not one of this worker&#x27;s tasks in this study" in other.content.decode()
    assert Assignment.objects.get(pk=workers["flagger"].pk).status == Assignment.Status.SUBMITTED
    assert not PlatformCall.objects.exists()  # participant links move no money


def test_reviewing_needs_pay_access(reviewed):
    client, study, workers = reviewed
    lee, lee_client = staff_client("lee", pay=False)
    study_share(study=study, user=study.owner, with_user=lee, level="pay")  # the share allows it; the permission not
    careful = workers["careful"]
    page = f"/admin/studies/study/{study.pk}/workers/{careful.participant_id}/"
    shown = lee_client.get(page)
    assert shown.status_code == 200 and "need the permission to pay workers" in shown.content.decode()
    assert lee_client.post(page, {"action": "approve", "assignment": careful.pk}).status_code == 403
    careful.refresh_from_db()
    assert careful.status == Assignment.Status.SUBMITTED
    _, olga = staff_client("olga")
    assert olga.get(page).status_code == 404
    assert olga.post(page, {"action": "approve", "assignment": careful.pk}).status_code == 404


def test_review_export_and_grading_read_one_rule_for_a_right_answer(reviewed):
    """Whether an answer is right is decided once (exact label equality): the answers list, the
    export's ``answer_correct`` and the attention check's grade agree on every answer."""
    from annotations.selectors.review import answers_for_review
    from scoring.api.export_annotations import annotation_columns, annotation_rows

    _, study, _ = reviewed
    answers = Annotation.objects.filter(claim__study=study)
    in_review = {a.pk: a.is_correct for a in answers_for_review(answers)}
    names = [c.name for c in annotation_columns(raw_worker_ids=False)]
    exported = {row[0]: row[names.index("answer_correct")]
                for row in annotation_rows(answers, study=study, user=None, raw_worker_ids=False)}
    assert exported == in_review and set(exported.values()) == {True, False}
    for check in answers.filter(step="attention"):
        assert check.payload["correct"] is exported[check.pk]


def test_a_correct_answer_that_is_not_a_choice_is_refused_on_every_way_in(reviewed, admin_client):
    from django.core.exceptions import ValidationError

    from annotations.models import AttentionCheck, QualificationTest
    from annotations.services.qualification import QualificationSetupError, qualification_questions_set

    _, study, _ = reviewed
    with pytest.raises(ValidationError, match=r"'Yes' is not one of the choices \(yes, no\)"):
        AttentionCheck(study=study, question="Choose yes.", choices=[], correct_answer="Yes").full_clean()
    before = AttentionCheck.objects.count()
    page = admin_client.post("/admin/annotations/attentioncheck/add/", {
        "study": study.pk, "question": "Choose yes.", "choices": "[]", "correct_answer": "Yes"})
    assert page.status_code == 200 and "is not one of the choices (yes, no)" in page.content.decode()
    assert AttentionCheck.objects.count() == before
    test = QualificationTest.objects.create(study=study, pass_mark=1)
    with pytest.raises(QualificationSetupError, match="Question 2, correct answer: 'whale ' is not one of"):
        qualification_questions_set(test=test, questions=[
            {"question": "Is Paris in France?", "choices": [], "correct_answer": "yes"},
            {"question": "Which is a mammal?", "choices": ["whale", "shark"], "correct_answer": "whale "}])
    assert not test.questions.exists()
