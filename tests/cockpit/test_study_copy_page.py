"""The study page's "Copy this study": a form asking the copy's name (offered: "<name> (copy)") and
platform, that makes the draft through ``study_copy`` and sends the researcher to it; the
service's refusals are shown on the form, and nothing is made."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from annotations.models import AttentionCheck, QualificationTest, Unit
from annotations.services.opening import study_open
from annotations.services.platforms.close import study_close
from annotations.services.qualification import attention_check_save, qualification_test_save
from studies.models import Platform, Study
from tests.annotations.factories import imported_outcomes_study, make_study
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db

YES_NO = [{"label": "yes", "text": "Yes"}, {"label": "no", "text": "No"}]


def closed_study(owner) -> Study:
    """``owner``'s closed study on participant links, with an attention check and a qualification
    test (written through their services)."""
    study = make_study(status=Study.Status.DRAFT, n_items=4, owner=owner, name="pilot", stop_when_decided=True)
    attention_check_save(check=AttentionCheck(study=study, question="Choose No.", choices=YES_NO,
                                              correct_answer="no"), user=owner)
    qualification_test_save(test=QualificationTest(study=study, pass_mark=1), user=owner,
                            questions=[{"question": "Is ice cold?", "choices": YES_NO, "correct_answer": "yes"}])
    study_open(study=study, user=owner)
    study_close(user=owner, study=study)
    study.refresh_from_db()
    return study


def copy_url(study) -> str:
    return reverse("admin:studies_study_copy", args=[study.pk])


def test_the_study_page_copies_a_closed_study_to_a_draft_that_opens():
    dana, client = staff_client("dana")
    study = closed_study(dana)
    page = client.get(reverse("admin:studies_study_change", args=[study.pk])).content.decode()
    assert f'href="{copy_url(study)}" id="copy-study"' in page

    form = client.get(copy_url(study))
    assert form.status_code == 200
    assert form.context["form"]["name"].value() == "pilot (copy)"
    assert form.context["form"]["platform"].value() == Platform.LINK

    response = client.post(copy_url(study), {"name": "pilot (copy)", "platform": Platform.PROLIFIC})
    copy = Study.objects.get(name="pilot (copy)")
    assert response.status_code == 302 and response["Location"] == reverse("admin:studies_study_change",
                                                                            args=[copy.pk])
    assert (copy.status, copy.owner, copy.platform, copy.stop_when_decided) == (
        Study.Status.DRAFT, dana, Platform.PROLIFIC, True)
    assert AttentionCheck.objects.filter(study=copy).values_list("question", flat=True).get() == "Choose No."
    assert QualificationTest.objects.get(study=copy).questions.get().question == "Is ice cold?"
    assert set(copy.items.all()) == set(study.items.all())
    assert client.get(response["Location"]).status_code == 200

    # The copy opens from the study list's action, as any draft.
    client.post(reverse("admin:studies_study_changelist"), {"action": "open_studies", "_selected_action": [copy.pk]})
    copy.refresh_from_db()
    assert copy.status == Study.Status.OPEN and Unit.objects.filter(study=copy).exists()
    assert form.context["form"]["name"].value() != client.get(copy_url(study)).context["form"]["name"].value()


def test_a_name_in_use_is_refused_beside_the_field_and_nothing_is_made():
    dana, client = staff_client("dana")
    study = closed_study(dana)
    count = Study.objects.count()
    response = client.post(copy_url(study), {"name": "pilot", "platform": Platform.LINK})
    assert response.status_code == 200
    assert "A study named 'pilot' exists already" in " ".join(response.context["form"].errors["name"])
    assert Study.objects.count() == count


def test_a_researcher_without_a_share_finds_no_study_to_copy():
    dana, _ = staff_client("dana")
    study = closed_study(dana)
    _, stan = staff_client("stan")
    count = Study.objects.count()
    assert stan.get(copy_url(study)).status_code == 404
    assert stan.post(copy_url(study), {"name": "stolen", "platform": Platform.LINK}).status_code == 404
    assert Study.objects.count() == count


def test_without_the_right_to_add_studies_the_page_offers_no_copy():
    dana, client = staff_client("dana")
    study = closed_study(dana)
    dana.user_permissions.remove(Permission.objects.get(content_type__app_label="studies", codename="add_study"))
    page = client.get(reverse("admin:studies_study_change", args=[study.pk])).content.decode()
    assert 'id="copy-study"' not in page
    assert client.get(copy_url(study)).status_code == 403


def test_a_study_of_imported_outcomes_offers_no_copy_and_is_refused_on_the_form():
    dana, client = staff_client("dana")
    outcomes = imported_outcomes_study(dana)
    page = client.get(reverse("admin:studies_study_change", args=[outcomes.pk])).content.decode()
    assert 'id="copy-study"' not in page
    count = Study.objects.count()
    response = client.post(copy_url(outcomes), {"name": "outcomes again", "platform": Platform.LINK})
    assert response.status_code == 200 and "it has no design" in response.context["error"]
    assert Study.objects.count() == count


def test_the_publish_page_of_a_closed_study_links_to_a_copy_on_the_other_platform():
    dana, client = staff_client("dana")
    study = closed_study(dana)
    html = client.get(reverse("admin:annotations_publication_publish", args=[study.pk]) + "?platform=prolific")
    html = html.content.decode()
    assert f'href="{copy_url(study)}?platform=prolific" id="publish-copy-study"' in html
    form = client.get(copy_url(study) + "?platform=prolific")
    assert form.context["form"]["platform"].value() == Platform.PROLIFIC


def test_a_study_on_closed_mturk_is_offered_a_copy_on_participant_links_with_the_reason(settings):
    """After Amazon's closure of MTurk the copy is there to run the study elsewhere: the form never
    offers MTurk first, says why, and refuses it beside the field when chosen anyway."""
    settings.RL_MTURK_CLOSED_ON = "2026-09-30"  # the default: Amazon's closure
    dana, client = staff_client("dana")
    study = make_study(status=Study.Status.DRAFT, n_items=4, owner=dana, name="on mturk", platform=Platform.MTURK)
    for url in (copy_url(study), copy_url(study) + "?platform=mturk"):
        form = client.get(url)
        assert form.context["form"]["platform"].value() == Platform.LINK
        assert "Amazon Mechanical Turk is closed" in form.context["platform_closed"]
        assert 'id="copy-platform-closed"' in form.content.decode()
        assert "closed Mechanical Turk for good on 2026-09-30" in form.content.decode()
    assert client.get(copy_url(study) + "?platform=prolific").context["form"]["platform"].value() == Platform.PROLIFIC

    count = Study.objects.count()
    response = client.post(copy_url(study), {"name": "on mturk (copy)", "platform": Platform.MTURK})
    assert response.status_code == 200 and Study.objects.count() == count
    assert "could never be published there" in " ".join(response.context["form"].errors["platform"])

    response = client.post(copy_url(study), {"name": "on mturk (copy)", "platform": Platform.LINK})
    assert response.status_code == 302 and Study.objects.get(name="on mturk (copy)").platform == Platform.LINK


def test_a_study_on_mturk_is_offered_mturk_while_it_is_open(settings):
    settings.RL_MTURK_CLOSED_ON = ""  # an operator whose MTurk endpoint still answers
    dana, client = staff_client("dana")
    study = make_study(status=Study.Status.DRAFT, n_items=4, owner=dana, name="on mturk", platform=Platform.MTURK)
    form = client.get(copy_url(study))
    assert form.context["form"]["platform"].value() == Platform.MTURK and not form.context["platform_closed"]
    assert 'id="copy-platform-closed"' not in form.content.decode()
