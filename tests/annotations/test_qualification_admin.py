"""A qualification test's questions are fixed once a worker has taken it, on every page that edits
them: the study page goes through ``qualification_questions_set``, and the qualification test's own
admin page keeps its questions inline read-only from then on (it edited them directly)."""
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from annotations.models import QualificationQuestion
from annotations.services.qualification import qualification_questions
from tests.annotations.factories import add_qualification, make_study
from tests.work import work

pytestmark = pytest.mark.django_db


def _form(test, questions):
    data = {"study": test.study_id, "pass_mark": test.pass_mark, "questions-TOTAL_FORMS": len(questions),
            "questions-INITIAL_FORMS": len(questions), "questions-MIN_NUM_FORMS": 0, "questions-MAX_NUM_FORMS": 1000}
    for i, q in enumerate(questions):
        data.update({f"questions-{i}-id": q.pk, f"questions-{i}-test": test.pk, f"questions-{i}-position": q.position,
                     f"questions-{i}-question": q.question + " (edited)", f"questions-{i}-choices": '[{"label": '
                     '"yes", "text": "Yes"}, {"label": "no", "text": "No"}]', f"questions-{i}-correct_answer": "no"})
    return data


def test_the_test_admin_edits_questions_until_a_worker_took_the_test():
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    test = add_qualification(study)
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.org", "pw"))
    url = f"/admin/annotations/qualificationtest/{test.pk}/change/"
    questions = list(QualificationQuestion.objects.filter(test=test).order_by("position"))

    # Nobody has taken it: the inline edits the questions.
    assert client.post(url, _form(test, questions)).status_code == 302
    assert all(q["question"].endswith("(edited)") for q in qualification_questions(test))

    work(study, "w-took-the-test")
    before = qualification_questions(test)
    response = client.post(url, _form(test, list(QualificationQuestion.objects.filter(test=test).order_by("position"))))
    assert response.status_code == 403  # the page is read-only now
    assert qualification_questions(test) == before  # the graded answers still refer to these questions
    page = client.get(url).content.decode()
    assert 'name="questions-0-question"' not in page
