"""The researcher's preview of a task (``/w/preview/<study id>/``): staff only, the worker
templates, the rationale only on the "after" page, and nothing written."""
from __future__ import annotations

import re
from html import unescape
from random import Random
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from annotations.models import Annotation, Assignment, Claim, Participant, QualificationTest, Unit
from annotations.services.assignment import assignment_start
from annotations.services.qualification import qualification_test_save
from annotations.views.preview import preview_task
from annotations.worker_pages import time_allowed
from studies.models import Study
from tests.annotations.factories import AttentionCheckFactory, ParticipantFactory, make_study
from tests.annotations.pages import EVIL, EVIL_ESCAPED, entry_url, start

pytestmark = pytest.mark.django_db



@pytest.fixture
def staff_client() -> Client:
    # A superuser reaches every study; who else may preview which study is tested below.
    user = get_user_model().objects.create_superuser(username="researcher", password="pw")
    client = Client()
    client.force_login(user)
    return client


def _login(username: str, **flags) -> tuple[object, Client]:
    user = get_user_model().objects.create_user(username=username, password="pw", **flags)
    client = Client()
    client.force_login(user)
    return user, client


def test_staff_may_preview_only_the_studies_they_may_see():
    # Regression (issue 10 item 9): any staff user read every study's rationales here.
    study = make_study(rationale_text="Secret rationale {item}.")
    _, stranger = _login("stranger", is_staff=True)
    for page in (url(study), url(study, n=0, step="after")):
        assert stranger.get(page).status_code == 404
    owner, client = _login("owner", is_staff=True)
    study.owner = owner
    study.save(update_fields=["owner"])
    assert "Secret rationale" in client.get(url(study, n=0, step="after")).content.decode()


def url(study, **params) -> str:
    base = reverse("annotations:preview", args=[study.pk])
    return base + ("?" + urlencode(params) if params else "")


def counts() -> tuple[int, ...]:
    return tuple(m.objects.count() for m in (Participant, Assignment, Claim, Annotation))


def quotas(study) -> list[tuple[int, int]]:
    return list(Unit.objects.filter(study=study).order_by("id").values_list("n_claimed", "n_completed"))


def next_page(html: str) -> str:
    """The preview page the form on ``html`` leads to (it submits by GET)."""
    form = html.split('id="answer-form"' if 'id="answer-form"' in html else 'id="preview-form"', 1)[1]
    action = re.search(r'action="([^"]*)"', html.split('<form method="get"', 1)[1]).group(1)
    fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.split("</form>", 1)[0])
    return unescape(action) + "?" + urlencode([(k, unescape(v)) for k, v in fields])


def walk(client, study, *, answer: str = "yes") -> list[str]:
    """Every page of a preview, from the consent page to the end, following its links."""
    pages = [client.get(url(study)).content.decode()]
    while "End of preview" not in pages[-1]:
        assert len(pages) < 60
        link = next_page(pages[-1])
        if 'name="step" value="after"' in pages[-1]:
            link += f"&answer={answer}"
        response = client.get(link)
        assert response.status_code == 200
        pages.append(response.content.decode())
    return pages


def test_consent_page_then_before_and_after(staff_client):
    study = make_study(consent_text="Consent for the preview.", rationale_text="Because {item} says {source}.")
    html = staff_client.get(url(study)).content.decode()
    assert "Preview — nothing is recorded" in html
    assert "Consent for the preview." in html
    assert 'method="get"' in html and 'name="step" value="before"' in html

    before = staff_client.get(next_page(html)).content.decode()
    assert "Preview — nothing is recorded" in before
    assert "Answer on your own" in before
    question = re.search(r"Question number (\d+)\?", before).group(1)
    assert 'id="rationale"' not in before and "Because" not in before
    assert 'method="get"' in before and 'name="step" value="after"' in before
    assert 'name="claim"' not in before and "csrfmiddlewaretoken" not in before

    after = staff_client.get(next_page(before) + "&answer=yes").content.decode()
    assert 'id="rationale"' in after and f"Because {question} says" in after
    assert "Your first answer: <strong>Yes</strong>" in after
    assert 'name="n" value="1"' in after and 'name="step" value="before"' in after


def test_rationale_is_escaped(staff_client):
    study = make_study(rationale_text=EVIL + " {item} {source}", question_text=EVIL + " {i}")
    pages = walk(staff_client, study)
    assert any(escaped in page for page in pages for escaped in EVIL_ESCAPED)
    assert not any(EVIL in page for page in pages)


@pytest.mark.parametrize("status", [Study.Status.DRAFT, Study.Status.OPEN])
def test_preview_writes_nothing(staff_client, status):
    study = make_study(status=status, units_per_task=2)
    AttentionCheckFactory(study=study)
    before_counts, before_units, before_quotas = counts(), Unit.objects.count(), quotas(study)
    pages = walk(staff_client, study)
    assert len(pages) == 1 + 2 * 2 + 1 + 1  # consent, two units (two steps each), the check, the end
    assert counts() == before_counts
    assert Unit.objects.count() == before_units
    assert quotas(study) == before_quotas
    # An answer sent with the preview's GET form is ignored too.
    staff_client.get(next_page(pages[2]) + "&answer=yes&flag=1&flag_note=x")
    assert counts() == before_counts


def test_preview_runs_the_real_assignment_rule():
    """The preview's task is the one ``assignment_start`` gives a new worker (same choices for the
    same seed), and it records nothing."""
    study = make_study(n_items=5, n_sources=3, quota=2, units_per_task=4)
    AttentionCheckFactory(study=study)
    assignment_start(study=study, participant=ParticipantFactory())  # some units are fuller now
    state = counts(), quotas(study)
    task = preview_task(study=study, rng=Random(11))
    assert (counts(), quotas(study)) == state
    real = assignment_start(study=study, participant=ParticipantFactory(), rng=Random(11))
    expected = [
        ["a", c.attention_check_id] if c.attention_check_id else
        ["u", c.unit.item_id, c.unit.source_id, c.unit.rationale_id, 0]
        for c in real.claims.select_related("unit").order_by("position")
    ]
    assert task == expected


def test_a_preview_never_shows_one_question_twice(staff_client):
    """Issue 11: the demo's preview showed the same question with two explanations as questions 1
    and 2; a worker never gets that, and the preview now shows what a worker gets."""
    draft = make_study(status=Study.Status.DRAFT, n_items=3, n_sources=2, units_per_task=3)
    pages = walk(staff_client, draft)
    shown = [re.search(r"Question number (\d+)\?", page).group(1) for page in pages
             if 'name="step" value="after"' in page]
    assert len(shown) == 3 and len(set(shown)) == 3
    assert not Unit.objects.filter(study=draft).exists()


def test_end_of_preview(staff_client):
    study = make_study(units_per_task=2)
    pages = walk(staff_client, study)
    assert "End of preview" in pages[-1] and "the last of the 2 question(s)" in pages[-1]


def test_generalization_preview(staff_client):
    study = make_study(kind=Study.Kind.GENERALIZATION, rationale_text="Gen rationale {item}.", units_per_task=1)
    consent = staff_client.get(url(study)).content.decode()
    before = staff_client.get(next_page(consent)).content.decode()
    item = re.search(r"Generalization \d of question (\d+)\?", before).group(1)
    assert "Gen rationale" not in before and 'id="original-question"' not in before
    after = staff_client.get(next_page(before)).content.decode()
    assert f"Gen rationale {item}." in after
    assert 'id="original-question"' in after and f"Question number {item}?" in after


@pytest.mark.parametrize("kind", [Study.Kind.RATIONALE_PROPERTIES, Study.Kind.QUESTION_VALIDATION])
def test_other_kinds_show_their_pages(staff_client, kind):
    study = make_study(kind=kind, units_per_task=2)
    pages = walk(staff_client, study)
    assert 'id="instructions"' in pages[0]
    assert len(pages) == 1 + 2 + 1
    assert all('type="radio"' in page for page in pages[1:-1])


def test_a_tampered_task_is_not_shown(staff_client):
    study, other = make_study(), make_study(rationale_text="OTHER STUDY {item}")
    walk_other = walk(staff_client, other)
    task = re.search(r'name="task" value="([^"]*)"', walk_other[0]).group(1)
    response = staff_client.get(url(study, task=unescape(task), n=0, step="after"))
    html = response.content.decode()
    assert response.status_code == 200  # the other study's task is refused, and one of this study's drawn
    assert "OTHER STUDY" not in html and re.search(r"Rationale \d+ from ", html)


@pytest.mark.parametrize("who", ["anonymous", "worker"])
def test_not_staff_is_sent_to_admin_login(who):
    study = make_study()
    client = Client()
    if who == "worker":
        client.force_login(get_user_model().objects.create_user(username="worker", password="pw"))
        # A worker's own task token gives no access to the preview either.
        client.cookies[f"rl_w{study.pk}"] = "worker-1"
    for page in (url(study), url(study, n=0, step="after")):
        response = client.get(page)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))
        assert "Rationale" not in response.content.decode()


def test_admin_change_page_links_to_preview(staff_client):
    user = get_user_model().objects.create_superuser(username="admin", password="pw")
    client = Client()
    client.force_login(user)
    study = make_study(status=Study.Status.DRAFT)
    html = client.get(reverse("admin:studies_study_change", args=[study.pk])).content.decode()
    assert f'href="{reverse("annotations:preview", args=[study.pk])}"' in html
    assert "Preview as a worker" in html and 'target="_blank"' in html


QUALIFICATION = [{"question": "QUALQ Is Paris in France?", "choices": ["yes", "no"], "correct_answer": "yes"}]
FIRST_ANSWER_BY, TEST_BY, FINISH_BY = "Please give your first answer by", "Please send the test by", "Please finish this task by"


def _deadline(page: str) -> str:
    """The deadline box's wording on ``page`` (which of the three), or "" where it has none."""
    box = re.search(r'<p class="box deadline" id="deadline">(.*?)</p>', page, re.S)
    return next((words for words in (FIRST_ANSWER_BY, TEST_BY, FINISH_BY) if box and words in box.group(1)), "")


@pytest.mark.parametrize("status", [Study.Status.DRAFT, Study.Status.OPEN])
def test_the_preview_shows_the_qualification_test_as_a_worker_gets_it(staff_client, status):
    """Regression: a new worker's task shows the study's qualification test after the consent, but
    the preview went from the consent straight to the first question."""
    study = make_study(status=status, units_per_task=2)
    qualification_test_save(test=QualificationTest(study=study, pass_mark=1), questions=QUALIFICATION, user=None)
    state = counts(), Unit.objects.count(), quotas(study)
    pages = walk(staff_client, study)
    assert len(pages) == 1 + 1 + 2 * 2 + 1  # consent, the test, two units (two steps each), the end
    assert (counts(), Unit.objects.count(), quotas(study)) == state  # nothing written
    consent, test, first = pages[0], pages[1], pages[2]
    assert "QUALQ" not in consent and 'name="step" value="qualification"' in consent
    assert "Qualification test" in test and "QUALQ Is Paris in France?" in test
    assert 'method="get"' in test and "csrfmiddlewaretoken" not in test
    assert 'name="n" value="0"' in test and 'name="step" value="before"' in test
    assert "Answer on your own" in first and "QUALQ" not in first
    # The worker's pages, for comparison: the same test, the same deadline wording.
    if status == Study.Status.OPEN:
        worker = Client()
        worker_test = worker.get(start(worker, entry_url(study))).content.decode()
        assert "QUALQ Is Paris in France?" in worker_test
        assert _deadline(worker_test) == _deadline(test) == TEST_BY
    assert _deadline(first) == FINISH_BY  # a passed test gave the task its full duration


def test_the_preview_shows_the_time_allowed_and_the_deadlines(staff_client):
    """Regression: the preview left out the consent page's time allowed and every question page's
    deadline, which a worker's pages show."""
    study = make_study(units_per_task=2)
    pages = walk(staff_client, study)
    assert 'id="time-allowed"' in pages[0] and unescape(time_allowed(study)) in unescape(pages[0])
    assert [_deadline(page) for page in pages[1:-1]] == [FIRST_ANSWER_BY, FINISH_BY, FINISH_BY, FINISH_BY]
    worker = Client()
    assert 'id="time-allowed"' in worker.get(entry_url(study)).content.decode()
    assert _deadline(worker.get(start(worker, entry_url(study))).content.decode()) == FIRST_ANSWER_BY
