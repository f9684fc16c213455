"""A researcher's preview link shows only what its study holds now, and not for ever
(``annotations.selectors.preview``, ``annotations.views.preview``).

Regression: a preview link never expired and read its task's rows by bare id, so a link made
earlier showed the current text of a source taken off a draft study since (which the viewer could
read nowhere else any more), and a row deleted since (an attention check) answered 500. Now each
row is read through the study, and a row that left it, or a link older than
``PREVIEW_LINK_MAX_AGE``, starts a fresh preview that says why."""
from __future__ import annotations

import re
import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from annotations.models import AttentionCheck
from annotations.services.qualification import attention_check_delete, attention_check_save
from studies.models import Rationale, RationaleSource, Study
from studies.services.content import content_row_save
from studies.services.studies import study_update
from tests.annotations.factories import make_study
from tests.annotations.test_preview import next_page, url

pytestmark = pytest.mark.django_db

CHANGED = "This study has changed since this preview link was made"
FRESH = "Here is a fresh preview of the task a new worker would get now."


@pytest.fixture
def researcher() -> tuple[object, Client]:
    user = get_user_model().objects.create_superuser(username="researcher", password="pw")
    client = Client()
    client.force_login(user)
    return user, client


def links(client: Client, study: Study) -> list[tuple[str, str]]:
    """Every page of a preview after the consent page, as (link, html), following its links."""
    html = client.get(url(study)).content.decode()
    pages = []
    while "End of preview" not in html:
        assert len(pages) < 60
        link = next_page(html)
        if 'name="step" value="after"' in html:
            link += "&answer=yes"
        response = client.get(link)
        assert response.status_code == 200
        html = response.content.decode()
        pages.append((link, html))
    return pages[:-1]


def assert_fresh_preview(response, *, reason: str) -> str:
    """The answer to an outdated link: a fresh preview's consent page, saying why."""
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="preview-form"' in html and 'name="step" value="before"' in html  # a fresh task's first page next
    assert reason in html and FRESH in html
    return html


def test_a_source_taken_off_a_draft_is_not_shown_by_an_old_link(researcher):
    user, client = researcher
    study = make_study(status=Study.Status.DRAFT, n_sources=2, units_per_task=1,
                       rationale_text="Rationale {item} from {source}.")
    after_link, after = links(client, study)[1]
    item_number, source_name = re.search(r"Rationale (\d+) from ([^<.]+)\.", after).groups()
    shown = RationaleSource.objects.get(name=source_name)
    # The researcher takes that source off the draft, and its rationale is edited afterwards.
    study_update(study=study, user=user, sources=[s for s in study.sources.all() if s != shown])
    rationale = Rationale.objects.get(source=shown, text=f"Rationale {item_number} from {source_name}.")
    rationale.text = "EDITED AFTER THE SOURCE LEFT THE STUDY"
    content_row_save(user=user, obj=rationale, changed={"text"})

    response = client.get(after_link)
    assert "EDITED AFTER" not in response.content.decode()
    html = assert_fresh_preview(response, reason=CHANGED)
    assert source_name not in html
    assert f"rationale source {shown.pk} is no longer one of the study&#39;s sources" in html


def test_a_deleted_attention_check_is_not_a_500(researcher):
    user, client = researcher
    study = make_study(status=Study.Status.DRAFT, units_per_task=1)
    check = attention_check_save(check=AttentionCheck(study=study, question="Check question: choose 'No'.",
                                                      choices=[{"label": "yes", "text": "Yes"},
                                                               {"label": "no", "text": "No"}],
                                                      correct_answer="no"), user=user)
    check_link = next(link for link, html in links(client, study) if "Check question" in html)
    attention_check_delete(check=check, user=user)

    html = assert_fresh_preview(client.get(check_link), reason=CHANGED)
    assert "Check question" not in html
    assert f"attention check {check.pk} is no longer one of the study&#39;s checks" in html


def test_a_draft_whose_kind_changed_is_not_a_500(researcher):
    # A utility task has no generalization question, which the study's new kind shows.
    user, client = researcher
    study = make_study(status=Study.Status.DRAFT, units_per_task=1)
    before_link, _ = links(client, study)[0]
    study_update(study=study, user=user, kind=Study.Kind.GENERALIZATION)

    html = assert_fresh_preview(client.get(before_link), reason=CHANGED)
    assert "a generalization study needs" in html


def test_an_expired_link_starts_a_fresh_preview(researcher, monkeypatch):
    _, client = researcher
    study = make_study(units_per_task=1, rationale_text="Rationale {item} from {source}.")
    made = time.time() - 25 * 3600  # the link was made yesterday
    with monkeypatch.context() as yesterday:
        yesterday.setattr(time, "time", lambda: made)
        after_link, after = links(client, study)[1]
    assert "Rationale" in after

    response = client.get(after_link)
    assert not re.search(r"Rationale \d+ from ", response.content.decode())
    assert_fresh_preview(response, reason="This preview link was made more than 24 hours ago")


def test_a_link_opens_for_its_lifetime(researcher, monkeypatch):
    _, client = researcher
    study = make_study(units_per_task=1, rationale_text="Rationale {item} from {source}.")
    made = time.time() - 23 * 3600
    with monkeypatch.context() as earlier:
        earlier.setattr(time, "time", lambda: made)
        after_link, after = links(client, study)[1]
    shown = re.search(r"Rationale \d+ from [^<]+", after).group(0)
    html = client.get(after_link).content.decode()
    assert shown in html and CHANGED not in html


def test_a_link_is_checked_against_who_opens_it(researcher):
    # Who may preview is asked on every page: a link passed on to a staff user who may not see the
    # study shows that user nothing.
    _, client = researcher
    study = make_study(units_per_task=1)
    after_link, _ = links(client, study)[1]
    stranger = Client()
    stranger.force_login(get_user_model().objects.create_user(username="stranger", password="pw", is_staff=True))
    assert stranger.get(after_link).status_code == 404
