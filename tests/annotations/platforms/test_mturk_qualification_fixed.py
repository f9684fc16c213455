"""A qualification test sent to MTurk as a graded test is fixed from then on: MTurk grades the
workers who take it there with the questions, answer key, pass mark (as a minimum percentage) and
instructions sent when the type was made, and ``mturk_qualification_ensure`` reuses that type for
every later batch; those grades leave no ``QualificationGrant`` here. So
``annotations.services.qualification.qualification_test_taken`` counts the test as taken once the
study has a graded MTurk type, and ``qualification_test_save`` (the study page's and the admin's
path) refuses other questions, another pass mark or other instructions, saying when it was sent;
the admin pages no longer delete it. Before the fix each of these was accepted, and the study's
record (bundle study.json) described a test the MTurk workers never took."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from botocore.stub import ANY
from django.urls import reverse

from annotations.models import MTurkQualificationType, QualificationTest
from annotations.platforms.mturk import ANSWER_KEY_NS, QUESTION_FORM_NS
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.qualification import mturk_qualification_ensure
from annotations.services.qualification import (
    QualificationSetupError,
    qualification_questions,
    qualification_test_save,
    qualification_test_taken,
)
from tests.annotations.platforms.conftest import on_platform
from tests.annotations.platforms.mturk_stubs import HIT_A, HIT_B, default_requirements, hit, hit_params

QUAL_ID = "3QUALAAAAAAAAAAAAAAAAAAAAAAAAA"
QUESTIONS = [{"question": f"Qualification question {i}: is the answer '{c}'?", "choices": ["yes", "no"],
              "correct_answer": c} for i, c in enumerate(["yes", "no", "yes"])]
OTHER_QUESTIONS = [{"question": f"Totally different question {i}", "choices": ["yes", "no"], "correct_answer": c}
                   for i, c in enumerate(["no", "yes", "no"])]
SENT = rf"Qualification test \d+ of study \d+ was sent to MTurk on \d{{4}}-\d\d-\d\d \d\d:\d\d UTC as the graded " \
       rf"qualification type {QUAL_ID} \(https://mturk-requester-sandbox"


def publish_with_test(mturk, study) -> QualificationTest:
    """``study`` on MTurk with a graded test (3 questions, pass mark 2: min score 67), published as the
    operator: the graded qualification type is made from the test and required by both HITs."""
    platform, stubber = mturk
    study = on_platform(study, "mturk")
    test = qualification_test_save(test=QualificationTest(study=study, pass_mark=2, instructions="Answer all three."),
                                   user=None, questions=QUESTIONS)
    assert not qualification_test_taken(test)
    stubber.add_response("create_qualification_type", {"QualificationType": {
        "QualificationTypeId": QUAL_ID, "Name": "q", "QualificationTypeStatus": "Active"}},
        {"Name": ANY, "Description": ANY, "QualificationTypeStatus": "Active", "Keywords": ANY, "Test": ANY,
         "AnswerKey": ANY, "TestDurationInSeconds": 1200})
    requirements = default_requirements() + [{"QualificationTypeId": QUAL_ID, "Comparator": "GreaterThanOrEqualTo",
                                              "IntegerValues": [67], "ActionsGuarded": "DiscoverPreviewAndAccept"}]
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_A, 9), hit_params(study, index=0, size=9, requirements=requirements))
    stubber.add_response("create_hit", hit(HIT_B, 5), hit_params(study, index=1, size=5, requirements=requirements))
    study_publish(user=OPERATOR, study=study, platform_name="mturk")
    stubber.assert_no_pending_responses()
    assert MTurkQualificationType.objects.get(study=study, kind="graded_test").min_score == 67
    return QualificationTest.objects.get(pk=test.pk)


class Sent:
    """Matches any value in a Stubber's expected params and keeps it."""

    value = None

    def __eq__(self, other):
        self.value = other
        return True

    __hash__ = None


def test_a_test_written_on_the_study_page_is_sent_with_its_choices(mturk, study):
    """The study page stores plain labels (and no choices for yes / no): the QuestionForm sent to
    MTurk lists them as selections, and the answer key names the right one (it raised a TypeError)."""
    platform, stubber = mturk
    on_platform(study, "mturk")
    qualification_test_save(test=QualificationTest(study=study, pass_mark=1), user=None, questions=[
        {"question": "Pick blue", "choices": ["red", "blue"], "correct_answer": "blue"},
        {"question": "Is Paris in France?", "choices": [], "correct_answer": "yes"}])
    form, key = Sent(), Sent()
    stubber.add_response("create_qualification_type", {"QualificationType": {
        "QualificationTypeId": QUAL_ID, "Name": "q", "QualificationTypeStatus": "Active"}},
        {"Name": ANY, "Description": ANY, "QualificationTypeStatus": "Active", "Keywords": ANY, "Test": form,
         "AnswerKey": key, "TestDurationInSeconds": 1200})
    assert mturk_qualification_ensure(study=study, user=OPERATOR, platform=platform).min_score == 50
    stubber.assert_no_pending_responses()
    ns = {"q": QUESTION_FORM_NS, "k": ANSWER_KEY_NS}
    selections = [[s.findtext("q:SelectionIdentifier", namespaces=ns) for s in q.iterfind(".//q:Selection", ns)]
                  for q in ET.fromstring(form.value).iterfind("q:Question", ns)]
    assert selections == [["red", "blue"], ["yes", "no"]]
    assert [a.text for a in ET.fromstring(key.value).iterfind(".//k:SelectionIdentifier", ns)] == ["blue", "yes"]


def assert_unchanged(test: QualificationTest) -> None:
    stored = QualificationTest.objects.get(pk=test.pk)
    assert (stored.pass_mark, stored.instructions) == (2, "Answer all three.")
    assert qualification_questions(stored) == QUESTIONS


def test_a_test_sent_to_mturk_counts_as_taken(mturk, study):
    test = publish_with_test(mturk, study)
    assert qualification_test_taken(test)  # no worker took it here: MTurk grades it


def test_other_questions_are_refused_once_sent_to_mturk(mturk, study):
    test = publish_with_test(mturk, study)
    with pytest.raises(QualificationSetupError, match=SENT + r".*: its questions can no longer change\."):
        qualification_test_save(test=test, user=study.owner, questions=OTHER_QUESTIONS)
    assert_unchanged(test)
    # The next batch reuses the type made from the stored test: they still agree (no call is made).
    platform, stubber = mturk
    assert mturk_qualification_ensure(study=study, user=OPERATOR, platform=platform).min_score == 67
    stubber.assert_no_pending_responses()


def test_another_pass_mark_is_refused_once_sent_to_mturk(mturk, study):
    test = publish_with_test(mturk, study)
    test.pass_mark = 3
    with pytest.raises(QualificationSetupError, match=SENT + r".*: its pass mark can no longer change \(from 2 to 3"):
        qualification_test_save(test=test, user=None, questions=QUESTIONS)  # the operator too
    assert_unchanged(test)


def test_other_instructions_are_refused_once_sent_to_mturk(mturk, study):
    test = publish_with_test(mturk, study)
    test.instructions = "Answer at least two."
    with pytest.raises(QualificationSetupError, match=SENT + r".*: its instructions can no longer change"):
        qualification_test_save(test=test, user=None)
    assert_unchanged(test)


def test_the_same_test_still_saves_once_sent_to_mturk(mturk, study):
    """The study page saves its inline again with every study save: an unchanged test goes through."""
    test = publish_with_test(mturk, study)
    qualification_test_save(test=test, user=study.owner, questions=QUESTIONS)
    assert_unchanged(test)


def test_the_admin_does_not_delete_a_test_sent_to_mturk(mturk, study, admin_client):
    test = publish_with_test(mturk, study)
    response = admin_client.post(reverse("admin:annotations_qualificationtest_delete", args=[test.pk]), {"post": "yes"})
    assert response.status_code == 403
    assert_unchanged(test)


def test_the_study_page_shows_the_sent_tests_instructions_read_only_and_refuses_other_questions(mturk, study,
                                                                                                admin_client):
    """On the study page a test sent to MTurk keeps its instructions read-only (it answered 500 on an
    edit: the service refused after the form had accepted), and other questions are a form error
    saying it was sent to MTurk."""
    from tests.cockpit.test_study_setup import form_data

    test = publish_with_test(mturk, study)
    url = reverse("admin:studies_study_change", args=[test.study_id])
    page = admin_client.get(url)
    assert page.status_code == 200
    assert 'name="qualification_test-0-instructions"' not in page.content.decode()
    data = form_data(page)
    data["qualification_test-0-questions"] = "Is Paris in France? | yes"
    refused = admin_client.post(url, data)
    assert refused.status_code == 200
    assert "was sent to MTurk on" in refused.content.decode()
    assert qualification_questions(QualificationTest.objects.get(pk=test.pk)) == qualification_questions(test)
    assert QualificationTest.objects.get(pk=test.pk).instructions == "Answer all three."
