"""A generalization question's original, when it is multiple choice (OpenBookQA, SPEC section 4):
wherever a worker sees the original question (the "after" step of a generalization study, the
question-validation step, the researcher's preview of either) they see its answer options too,
which the rationale reasons about ("The first option is a metal..."); never before the first answer."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from studies.models import GeneralizationQuestion, Study
from studies.services.studies import study_create
from tests.annotations.factories import TEST_CONSENT, make_study
from tests.annotations.pages import EVIL, EVIL_ESCAPED, answer, entry_url, start
from tests.annotations.test_preview import next_page, url
from tests.factories import (
    GeneralizationQuestionFactory,
    ItemFactory,
    MultipleChoiceDatasetFactory,
    RationaleFactory,
    RationaleSourceFactory,
)

pytestmark = pytest.mark.django_db

CHOICES = [{"label": "a", "text": "CHOICE-COPPER"}, {"label": "b", "text": "CHOICE-WOOD"},
           {"label": "c", "text": "CHOICE-GLASS"}, {"label": "d", "text": EVIL}]


def mc_study(kind: str, *, status: str = Study.Status.OPEN) -> Study:
    """One OpenBookQA-like item (choices a-d), one rationale of it, one similar question with its
    own yes/no choices; the study made by ``study_create`` and opened by ``study_open``."""
    dataset = MultipleChoiceDatasetFactory()
    item = ItemFactory(dataset=dataset, question="ORIGINAL: Which of these conducts electricity?",
                       choices=CHOICES, gold_answer="a")
    source = RationaleSourceFactory()
    RationaleFactory(item=item, source=source, text="ORIGINAL-RATIONALE: The first option is a metal.",
                     predicted_answer="a")
    GeneralizationQuestionFactory(item=item, qtype=GeneralizationQuestion.Type.SIMILAR, answer="yes",
                                  text="GENQ: Does a silver spoon conduct electricity?",
                                  metadata={"choices": [{"label": "yes", "text": "Yes"},
                                                        {"label": "no", "text": "No"}]})
    study = study_create(name=f"mc-{kind}", dataset=dataset, kind=kind, split="test", sources=[source],
                         annotators_per_unit=1, units_per_task=1, consent_text=TEST_CONSENT)
    return study if status == Study.Status.DRAFT else study_open(study=study, user=OPERATOR)


def shows_options(html: str) -> bool:
    return ("a: CHOICE-COPPER" in html and "b: CHOICE-WOOD" in html and "c: CHOICE-GLASS" in html
            and any(f"d: {escaped}" in html for escaped in EVIL_ESCAPED) and EVIL not in html)


@pytest.fixture
def staff_client() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser(username="researcher", password="pw"))
    return client


def test_generalization_after_step_shows_the_originals_options_and_the_before_step_hides_them(client):
    task = start(client, entry_url(mc_study(Study.Kind.GENERALIZATION)))
    before = client.get(task).content.decode()
    assert "GENQ: Does a silver spoon" in before
    assert "ORIGINAL" not in before and "CHOICE-" not in before and 'id="original-choices"' not in before
    assert answer(client, task, "yes")[1].status_code == 302
    after = client.get(task).content.decode()
    assert 'name="step" value="after"' in after and "ORIGINAL-RATIONALE" in after
    assert 'id="original-choices"' in after and shows_options(after)
    # Under the original question, before the rationale that reasons about them.
    assert after.index('id="original-question"') < after.index('id="original-choices"') < after.index('id="rationale"')


def test_question_validation_step_shows_the_originals_options(client):
    task = start(client, entry_url(mc_study(Study.Kind.QUESTION_VALIDATION)))
    html = client.get(task).content.decode()
    assert "ORIGINAL: Which of these" in html and shows_options(html)
    assert html.index('id="original-question"') < html.index('id="original-choices"') < html.index(
        'id="generated-question"')


@pytest.mark.parametrize("kind", [Study.Kind.GENERALIZATION, Study.Kind.QUESTION_VALIDATION])
def test_preview_shows_the_originals_options_where_it_shows_the_original(staff_client, kind):
    study = mc_study(kind, status=Study.Status.DRAFT)
    first = staff_client.get(next_page(staff_client.get(url(study)).content.decode())).content.decode()
    if kind == Study.Kind.GENERALIZATION:
        assert "CHOICE-" not in first and "ORIGINAL" not in first
        first = staff_client.get(next_page(first) + "&answer=yes").content.decode()
    assert 'id="original-question"' in first and shows_options(first)


def test_a_yes_no_original_lists_no_options(client):
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=1, n_sources=1, n_genq=1, units_per_task=1)
    task = start(client, entry_url(study))
    answer(client, task, "yes")
    after = client.get(task).content.decode()
    assert 'id="original-question"' in after and 'id="original-choices"' not in after
