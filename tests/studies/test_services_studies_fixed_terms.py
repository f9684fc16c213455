"""What a study's workers were offered is fixed once it opens: its reward, hourly floor, estimated
minutes, units per task and platform (``studies.services.studies.PAY_FIELDS``), its kind, and the
consent text its workers agreed to, for everyone (a CHANGE share, the owner, the operator), with an
error naming the field and why (``study_locked_changes``, enforced by ``study_update``, shown by the
study page's form, where the consent text is read-only). The studies are published the way the app
publishes them: on a local Prolific API server, whose study keeps the reward it was created with."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from annotations.models import Publication
from annotations.platforms import use_platform
from annotations.platforms.prolific import ProlificPlatform
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.platforms.publish import study_publish
from studies.models import Platform, Study, StudyShare
from studies.services.sharing import study_share
from studies.services.studies import PAY_FIELDS, StudyError, study_fixed_fields, study_update
from tests.annotations.factories import make_study
from tests.annotations.platforms.prolific_server import FakeProlific
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_setup import form_data

pytestmark = pytest.mark.django_db

TOKEN = "test-prolific-token-terms"

# field -> (a new value, the words of its refusal)
CHANGES = {
    "reward": (Decimal("9.99"), "its reward per task cannot change (workers were offered 2.00 a task"),
    "hourly_pay_floor": (Decimal("5.00"), "its hourly pay floor cannot change"),
    "estimated_minutes_per_task": (Decimal("1.0"), "its estimated minutes per task cannot change"),
    "units_per_task": (1, "its units per task cannot change (each task was offered at its reward for 3 units"),
    "platform": (Platform.MTURK, "its platform cannot change"),
    "kind": (Study.Kind.QUESTION_VALIDATION, "its kind cannot change"),
    "consent_text": ("I agree to other terms.", "its consent text cannot change (its workers agreed to it"),
}


@pytest.fixture
def prolific(settings):
    """A local Prolific API server, installed as the "prolific" platform."""
    server = FakeProlific(token=TOKEN)
    server.start()
    settings.RL_PUBLIC_URL = "https://rl.example.org"
    settings.RL_PROLIFIC_TOKEN = TOKEN
    settings.RL_PROLIFIC_API_URL = server.api_url
    with use_platform("prolific", ProlificPlatform()):
        yield server
    server.stop()


@pytest.fixture
def published(prolific):
    """Olga's study (2.00 a task of 3 units, 6 minutes, floor 15.00/hour), shared with Carl at
    CHANGE, published by Olga on Prolific (which opens it)."""
    olga, olga_client = staff_client("olga")
    carl, carl_client = staff_client("carl", pay=False)
    study = make_study(status=Study.Status.DRAFT, owner=olga, name="olgas-terms", platform=Platform.PROLIFIC,
                       units_per_task=3, reward=Decimal("2.00"), estimated_minutes_per_task=Decimal("6.0"),
                       hourly_pay_floor=Decimal("15.00"))
    study_share(study=study, user=olga, with_user=carl, level=StudyShare.Level.CHANGE)
    publication = study_publish(user=olga, study=study)
    assert publication.status == Publication.Status.PUBLISHED
    study.refresh_from_db()
    assert study.status == Study.Status.OPEN
    return {"study": study, "publication": publication, "server": prolific, "olga": olga, "carl": carl,
            "olga_client": olga_client, "carl_client": carl_client}


def terms(study: Study) -> dict:
    row = Study.objects.get(pk=study.pk)
    return {field: getattr(row, field) for field in (*PAY_FIELDS, "kind", "consent_text", "status")}


@pytest.mark.parametrize("field", CHANGES)
@pytest.mark.parametrize("who", ["carl", "olga", "operator"])
def test_what_workers_of_a_published_study_were_offered_cannot_change(published, who, field):
    study, server = published["study"], published["server"]
    before = terms(study)
    value, says = CHANGES[field]
    user = published.get(who)  # a CHANGE share, the owner, or the operator (None)
    with pytest.raises(StudyError) as refused:
        study_update(study=Study.objects.get(pk=study.pk), user=user, **{field: value})
    assert set(refused.value.problems) == {field}
    assert says in refused.value.problems[field]
    assert refused.value.problems[field].startswith("The study is no longer a draft (open): ")
    assert str(refused.value).startswith(f"study {study.name!r}: The study is no longer a draft (open): ")
    assert terms(study) == before
    # What the platform was sent and what the publication recorded still agree with the study.
    publication = Publication.objects.get(pk=published["publication"].pk)
    assert publication.reward == Study.objects.get(pk=study.pk).reward == Decimal("2.00")
    assert server.studies[publication.prolific_study_id]["reward"] == 200


def test_the_same_terms_written_again_are_no_change_and_the_rest_still_changes(published):
    study, carl = published["study"], published["carl"]
    before = terms(study)
    study_update(study=Study.objects.get(pk=study.pk), user=carl, reward="2.0", hourly_pay_floor="15",
                 estimated_minutes_per_task=Decimal("6"), units_per_task=3, platform=Platform.PROLIFIC,
                 kind=Study.Kind.UTILITY, consent_text=before["consent_text"],
                 instructions="Read each explanation carefully.", name="olgas-terms-2")
    row = Study.objects.get(pk=study.pk)
    assert terms(row) == before
    assert (row.instructions, row.name) == ("Read each explanation carefully.", "olgas-terms-2")


def test_an_open_study_without_a_publication_and_a_closed_one_keep_their_terms(db):
    opened = make_study(name="opened-by-hand", reward=Decimal("2.00"))  # opened by study_open, never published
    assert not Publication.objects.filter(study=opened).exists()
    with pytest.raises(StudyError, match=r"no longer a draft \(open\): its reward per task cannot change"):
        study_update(study=opened, user=None, reward=Decimal("0.50"))
    closed = make_study(name="closed-one", status=Study.Status.CLOSED, reward=Decimal("2.00"))
    with pytest.raises(StudyError, match=r"no longer a draft \(closed\): its reward per task cannot change"):
        study_update(study=closed, user=None, reward=Decimal("0.50"))
    assert Study.objects.get(pk=opened.pk).reward == Study.objects.get(pk=closed.pk).reward == Decimal("2.00")


def test_a_draft_changes_its_terms_until_it_opens(db):
    study = make_study(name="draft-terms", status=Study.Status.DRAFT, reward=Decimal("2.00"))
    assert study_fixed_fields(study=study) == ()
    study_update(study=study, user=None, reward=Decimal("3.00"), units_per_task=2, platform=Platform.MTURK,
                 consent_text="I agree to the draft's terms.")
    assert (study.reward, study.units_per_task, study.platform) == (Decimal("3.00"), 2, Platform.MTURK)
    study_update(study=study, user=None, platform=Platform.LINK)
    study_open(study=study, user=OPERATOR)
    assert {*PAY_FIELDS, "consent_text"} <= set(study_fixed_fields(study=Study.objects.get(pk=study.pk)))
    with pytest.raises(StudyError, match="its reward per task cannot change"):
        study_update(study=study, user=None, reward=Decimal("4.00"))
    study_close(user=OPERATOR, study=study)
    with pytest.raises(StudyError, match=r"no longer a draft \(closed\): its consent text cannot change"):
        study_update(study=study, user=None, consent_text="I agree to the closed study's terms.")
    row = Study.objects.get(pk=study.pk)
    assert (row.reward, row.consent_text) == (Decimal("3.00"), "I agree to the draft's terms.")


def test_an_update_from_a_copy_read_before_the_study_opened_is_refused_and_keeps_it_open(db):
    """The rule is read from the stored row under a lock, not from the caller's copy: a copy read
    while the study was a draft can neither change the reward nor write the draft status back."""
    study = make_study(name="stale-copy", status=Study.Status.DRAFT, reward=Decimal("2.00"))
    stale = Study.objects.get(pk=study.pk)
    study_open(study=study, user=OPERATOR)
    with pytest.raises(StudyError, match="its reward per task cannot change"):
        study_update(study=stale, user=None, reward=Decimal("9.99"))
    study_update(study=Study.objects.get(pk=study.pk), user=None, instructions="New words.")
    fresh = Study.objects.get(pk=study.pk)
    assert (fresh.status, fresh.reward) == (Study.Status.OPEN, Decimal("2.00"))
    study_update(study=stale, user=None, instructions="Other words.")  # a stale copy writes no status back
    assert Study.objects.get(pk=study.pk).status == Study.Status.OPEN
    assert stale.status == Study.Status.OPEN  # the caller's copy is refreshed


def test_the_study_page_refuses_a_new_reward_of_a_published_study_beside_the_field(published):
    study, client = published["study"], published["carl_client"]
    url = reverse("admin:studies_study_change", args=[study.pk])
    page = client.get(url)
    assert page.status_code == 200
    data = {**form_data(page), "reward": "9.99", "units_per_task": "1"}
    refused = client.post(url, data)
    assert refused.status_code == 200
    errors = refused.context["adminform"].form.errors
    assert set(errors) == {"reward", "units_per_task"}
    assert "its reward per task cannot change" in errors["reward"][0]
    assert terms(study)["reward"] == Decimal("2.00") and terms(study)["units_per_task"] == 3


def test_the_study_page_shows_an_open_studys_consent_text_read_only_and_keeps_it(published):
    study, client = published["study"], published["carl_client"]
    before = terms(study)
    url = reverse("admin:studies_study_change", args=[study.pk])
    page = client.get(url)
    field = page.context["adminform"].form.fields["consent_text"]
    assert field.disabled and "its consent text cannot change (its workers agreed to it" in field.help_text
    assert "disabled" in str(page.context["adminform"].form["consent_text"])
    # A posted text is not taken; the rest of the form still saves.
    data = {**form_data(page), "consent_text": "I agree to other terms.", "instructions": "Read carefully."}
    assert client.post(url, data).status_code == 302
    assert terms(study) == before
    assert Study.objects.get(pk=study.pk).instructions == "Read carefully."


def test_an_open_studys_consent_sent_back_with_a_browsers_line_breaks_stays_as_agreed(db):
    """A browser sends a textarea back with CRLF line breaks: saving an open study's page changes
    neither a byte of its consent text nor, so, the hash its workers' receipts record."""
    dora, client = staff_client("dora")
    agreed = "I agree to take part.\nMy answers are kept for research.\n"
    study = make_study(name="doras-lines", owner=dora, consent_text=agreed)
    url = reverse("admin:studies_study_change", args=[study.pk])
    data = {**form_data(client.get(url)), "consent_text": agreed.replace("\n", "\r\n").strip(),
            "instructions": "Read carefully."}
    assert client.post(url, data).status_code == 302
    row = Study.objects.get(pk=study.pk)
    assert (row.consent_text, row.instructions) == (agreed, "Read carefully.")


def test_a_draft_studys_consent_text_is_edited_on_its_page(db):
    dora, client = staff_client("dora")
    draft = make_study(status=Study.Status.DRAFT, name="doras-draft", owner=dora)
    url = reverse("admin:studies_study_change", args=[draft.pk])
    page = client.get(url)
    assert not page.context["adminform"].form.fields["consent_text"].disabled
    assert client.post(url, {**form_data(page), "consent_text": "I agree to the pilot."}).status_code == 302
    assert Study.objects.get(pk=draft.pk).consent_text == "I agree to the pilot."
