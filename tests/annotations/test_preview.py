"""The researcher's preview of a task (``/w/preview/<study id>/``): staff only, the worker
templates, the rationale only on the "after" page, and nothing written."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from annotations.models import Annotation, Assignment, Claim, Participant, Unit
from studies.models import Study
from tests.annotations.factories import make_study

pytestmark = pytest.mark.django_db

EVIL = "<script>alert('x')</script>"


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
    return base + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")


def counts() -> tuple[int, ...]:
    return tuple(m.objects.count() for m in (Participant, Assignment, Claim, Annotation))


def quotas(study) -> list[tuple[int, int]]:
    return list(Unit.objects.filter(study=study).order_by("id").values_list("n_claimed", "n_completed"))


def test_consent_page_then_before_and_after(staff_client):
    study = make_study(consent_text="Consent for the preview.", rationale_text="Because {item} says {source}.")
    response = staff_client.get(url(study))
    html = response.content.decode()
    assert response.status_code == 200
    assert "Preview — nothing is recorded" in html
    assert "Consent for the preview." in html
    assert 'method="get"' in html and 'name="step" value="before"' in html

    before = staff_client.get(url(study, n=0, step="before")).content.decode()
    assert "Preview — nothing is recorded" in before
    assert "Answer on your own" in before
    assert "Question number 0?" in before
    assert 'id="rationale"' not in before and "Because 0 says" not in before
    assert 'method="get"' in before and 'name="step" value="after"' in before
    assert 'name="claim"' not in before and "csrfmiddlewaretoken" not in before

    after = staff_client.get(url(study, n=0, step="after", answer="yes")).content.decode()
    assert 'id="rationale"' in after and "Because 0 says" in after
    assert "Your first answer: <strong>Yes</strong>" in after
    assert 'name="n" value="1"' in after and 'name="step" value="before"' in after


def test_rationale_is_escaped(staff_client):
    study = make_study(rationale_text=EVIL + " {item} {source}", question_text=EVIL + " {i}")
    after = staff_client.get(url(study, n=0, step="after")).content.decode()
    assert EVIL not in after
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in after


@pytest.mark.parametrize("status, build", [(Study.Status.DRAFT, False), (Study.Status.OPEN, True)])
def test_preview_writes_nothing(staff_client, status, build):
    study = make_study(status=status, build=build, units_per_task=2)
    before_counts, before_units, before_quotas = counts(), Unit.objects.count(), quotas(study)
    pages = [url(study)] + [url(study, n=n, step=s) for n in range(3) for s in ("before", "after")]
    for page in pages:
        assert staff_client.get(page).status_code == 200
    assert counts() == before_counts
    assert Unit.objects.count() == before_units
    assert quotas(study) == before_quotas
    # An answer sent with the preview's GET form is ignored too.
    staff_client.get(url(study, n=0, step="after", answer="yes", flag="1", flag_note="x"))
    assert counts() == before_counts


def test_draft_study_derives_units_in_build_order(staff_client):
    """Before the study is opened, the preview shows what ``study_units_build`` will make."""
    draft = make_study(status=Study.Status.DRAFT, build=False, n_sources=2, rationale_text="R{item}/{source}.")
    sources = list(draft.sources.order_by("id"))
    first = staff_client.get(url(draft, n=0, step="after")).content.decode()
    second = staff_client.get(url(draft, n=1, step="after")).content.decode()
    assert f"R0/{sources[0].name}." in first
    assert f"R0/{sources[1].name}." in second
    assert not Unit.objects.filter(study=draft).exists()


def test_post_is_refused(staff_client):
    study = make_study()
    assert staff_client.post(url(study, n=0, step="before"), {"answer": "yes"}).status_code == 405
    assert counts() == (0, 0, 0, 0)


def test_end_of_preview(staff_client):
    study = make_study(units_per_task=2)
    response = staff_client.get(url(study, n=2, step="before"))
    assert response.status_code == 200
    assert "End of preview" in response.content.decode()
    last = staff_client.get(url(study, n=1, step="after")).content.decode()
    assert 'name="n" value="2"' in last


def test_generalization_preview(staff_client):
    study = make_study(kind=Study.Kind.GENERALIZATION, rationale_text="Gen rationale {item}.")
    before = staff_client.get(url(study, n=0, step="before")).content.decode()
    assert "Generalization 0 of question 0?" in before
    assert "Gen rationale 0." not in before and 'id="original-question"' not in before
    after = staff_client.get(url(study, n=0, step="after")).content.decode()
    assert "Gen rationale 0." in after
    assert 'id="original-question"' in after and "Question number 0?" in after


def test_other_kinds_show_consent_and_a_message(staff_client):
    study = make_study(kind=Study.Kind.RATIONALE_PROPERTIES)
    html = staff_client.get(url(study)).content.decode()
    assert "Question preview covers utility and generalization studies" in html
    assert 'id="instructions"' in html
    assert "Question preview covers" in staff_client.get(url(study, n=0, step="before")).content.decode()


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
    study = make_study(status=Study.Status.DRAFT, build=False)
    html = client.get(reverse("admin:studies_study_change", args=[study.pk])).content.decode()
    assert f'href="{reverse("annotations:preview", args=[study.pk])}"' in html
    assert "Preview as a worker" in html and 'target="_blank"' in html
