"""The study page sets up the whole study: the sources picker offers the sources with rationales
for the chosen dataset and split (and the server refuses others), and the attention checks and the
qualification test are inlines of the study page."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from annotations.models import AttentionCheck, QualificationTest
from annotations.services.qualification import qualification_questions
from studies.models import Study
from tests.factories import DatasetFactory, ItemFactory, RationaleFactory, RationaleSourceFactory
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def form_data(response) -> dict:
    """What the admin page's form would post as it stands: every field's current value and the
    inlines' management forms."""
    data = {}
    form = response.context["adminform"].form
    for name in form.fields:
        value = form[name].value()
        if value is None or value is False:
            continue
        data[name] = [str(v.pk if hasattr(v, "pk") else v) for v in value] if isinstance(value, (list, tuple)) else value
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        for name in formset.management_form.fields:
            data[f"{formset.prefix}-{name}"] = formset.management_form[name].value()
        for i, f in enumerate(formset.forms):
            for name in f.fields:
                value = f[name].value()
                if value not in (None, False):
                    data[f"{formset.prefix}-{i}-{name}"] = value.pk if hasattr(value, "pk") else value
    return data


@pytest.fixture
def world():
    dataset = DatasetFactory(name="picker-ds")
    other = DatasetFactory(name="other-ds")
    item = ItemFactory(dataset=dataset, split="test", gold_answer="yes")
    ItemFactory(dataset=dataset, split="train", gold_answer="yes")
    on_test = RationaleSourceFactory(name="on-test")
    elsewhere = RationaleSourceFactory(name="elsewhere")
    RationaleFactory(item=item, source=on_test)
    RationaleFactory(item=ItemFactory(dataset=other, split="test"), source=elsewhere)
    return dataset, on_test, elsewhere


def test_sources_picker_carries_coverage_and_the_server_refuses_a_source_without_rationales(admin_client, world):
    dataset, on_test, elsewhere = world
    add = reverse("admin:studies_study_add")
    page = admin_client.get(add)
    html = page.content.decode()
    assert re.search(rf'value="{on_test.pk}"[^>]*data-coverage="{dataset.pk}:test"', html)
    assert re.search(rf'value="{elsewhere.pk}"[^>]*data-coverage="\d+:test"', html)
    assert 'id="sources-offered"' not in html  # written by the page's script, not the server

    data = {**form_data(page), "name": "picked", "dataset": dataset.pk, "split": "test",
            "sources": [on_test.pk, elsewhere.pk], "consent_text": "ok"}
    refused = admin_client.post(add, data)
    assert refused.status_code == 200
    assert f"No rationales for {dataset} (test) from: elsewhere." in refused.content.decode()
    assert not Study.objects.filter(name="picked").exists()

    data["sources"] = [on_test.pk]
    assert admin_client.post(add, data).status_code == 302
    assert list(Study.objects.get(name="picked").sources.all()) == [on_test]


def test_sources_picker_names_no_dataset_the_researcher_may_not_see(client, world):
    """The picker's coverage is of the sources and datasets the form offers: a source that also has
    rationales in another researcher's dataset does not carry that dataset's id."""
    from django.contrib.auth import get_user_model

    from tests.api.conftest import grant

    dataset, on_test, elsewhere = world
    bob = grant(get_user_model().objects.create_user(username="bob", password="pw", is_staff=True),
                "studies.add_study", "studies.view_study", "studies.view_rationalesource")
    client.force_login(bob)
    html = client.get(reverse("admin:studies_study_add")).content.decode()
    assert re.search(rf'value="{elsewhere.pk}"[^>]*data-coverage=""', html), html[:3000]
    assert re.search(rf'value="{on_test.pk}"[^>]*data-coverage=""', html)
    assert f'data-coverage="{dataset.pk}:' not in html


def test_attention_checks_and_qualification_test_are_set_up_on_the_study_page(admin_client):
    study = open_utility_study(name="setup", n_items=2, n_sources=1, quota=1)
    url = reverse("admin:studies_study_change", args=[study.pk])
    page = admin_client.get(url)
    assert "Attention checks" in page.content.decode() and "Qualification test" in page.content.decode()
    data = form_data(page)
    data.update({
        "attention_checks-TOTAL_FORMS": "1",
        "attention_checks-0-question": "Choose 'no' for this one.",
        "attention_checks-0-choices": '["yes", "no"]',
        "attention_checks-0-correct_answer": "maybe",
        "qualification_test-TOTAL_FORMS": "1",
        "qualification_test-0-pass_mark": "3",
        "qualification_test-0-questions": "Is Paris in France? | yes\nWhich is a mammal? | whale | whale; shark\nbad line",
    })
    refused = admin_client.post(url, data).content.decode()
    assert "&#x27;maybe&#x27; is not one of the choices (yes, no)." in refused
    assert "Line 3: write" in refused
    assert not AttentionCheck.objects.exists() and not QualificationTest.objects.exists()

    data["attention_checks-0-correct_answer"] = "no"
    data["qualification_test-0-questions"] = "Is Paris in France? | yes\nWhich is a mammal? | whale | whale; shark"
    refused = admin_client.post(url, data).content.decode()
    assert "The pass mark is higher than the number of questions (2)." in refused

    data["qualification_test-0-pass_mark"] = "2"
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    check = AttentionCheck.objects.get(study=study)
    assert (check.choices, check.correct_answer) == (["yes", "no"], "no")
    test = QualificationTest.objects.get(study=study)
    assert test.pass_mark == 2
    assert qualification_questions(test) == [
        {"question": "Is Paris in France?", "choices": [], "correct_answer": "yes"},
        {"question": "Which is a mammal?", "choices": ["whale", "shark"], "correct_answer": "whale"},
    ]
    # The page shows the questions as written, and a worker's task now carries the attention check.
    again = admin_client.get(url).content.decode()
    assert "Which is a mammal? | whale | whale; shark" in again
    assignment = work(study, "f" * 24, submit=False)
    assert assignment.claims.filter(attention_check=check).exists()


def test_attention_checks_and_the_test_are_fixed_once_workers_had_them_on_every_page(admin_client):
    # Set up on the study page, then a worker is given the check and takes the test: from then on
    # neither the study page nor their own admin pages change or delete them (the review grades
    # the answers against them); a new check may still be added.
    study = open_utility_study(name="fixed-setup", n_items=2, n_sources=1, quota=2)
    url = reverse("admin:studies_study_change", args=[study.pk])
    data = form_data(admin_client.get(url))
    data.update({"attention_checks-TOTAL_FORMS": "1", "attention_checks-0-question": "Choose 'no'.",
                 "attention_checks-0-choices": '["yes", "no"]', "attention_checks-0-correct_answer": "no",
                 "qualification_test-TOTAL_FORMS": "1", "qualification_test-0-pass_mark": "1",
                 "qualification_test-0-questions": "Is Paris in France? | yes"})
    assert admin_client.post(url, data).status_code == 302
    check, test = AttentionCheck.objects.get(study=study), QualificationTest.objects.get(study=study)
    work(study, "f" * 24, submit=False)  # takes the test, is given the check

    data = form_data(admin_client.get(url))
    data.update({"attention_checks-0-correct_answer": "yes", "attention_checks-0-DELETE": "on",
                 "qualification_test-0-pass_mark": "0", "qualification_test-0-DELETE": "on"})
    admin_client.post(url, data)
    check.refresh_from_db()
    test.refresh_from_db()
    assert (check.correct_answer, test.pass_mark) == ("no", 1)
    for model, row, field, value in (("attentioncheck", check, "correct_answer", "yes"),
                                     ("qualificationtest", test, "pass_mark", "0")):
        change = reverse(f"admin:annotations_{model}_change", args=[row.pk])
        assert admin_client.post(change, {field: value}).status_code == 403
        assert admin_client.post(reverse(f"admin:annotations_{model}_delete", args=[row.pk]),
                                 {"post": "yes"}).status_code == 403
    assert AttentionCheck.objects.get(pk=check.pk).correct_answer == "no"
    assert QualificationTest.objects.get(pk=test.pk).pass_mark == 1

    # A new check is still added (later tasks carry it).
    data = form_data(admin_client.get(url))
    data.update({"attention_checks-TOTAL_FORMS": "2", "attention_checks-1-question": "Choose 'yes'.",
                 "attention_checks-1-choices": '["yes", "no"]', "attention_checks-1-correct_answer": "yes"})
    assert admin_client.post(url, data).status_code == 302
    assert AttentionCheck.objects.filter(study=study).count() == 2


@pytest.mark.parametrize("design, field, message", [
    ({"split": "dev"}, "split", "picker-ds has no items in the dev split: import them first."),
    ({"item_sample_size": 5}, "item_sample_size", "The sample size 5 is larger than the 1 items of the test split: "
                                                   "lower it or leave it empty to take all."),
    ({"sources": "none"}, "sources", "A utility study needs at least one rationale source."),
])
def test_the_study_form_and_the_service_refuse_a_design_with_the_same_message(admin_client, world, design, field,
                                                                              message):
    """One set of design rules (studies.services.studies.study_design_problems): the admin shows
    the reason beside its field, and study_create (what the API and load_demo call) refuses the
    same design with the same reason."""
    from studies.services.studies import StudyError, study_create

    dataset, on_test, elsewhere = world
    chosen = [] if design.get("sources") == "none" else [on_test]
    fields = {"split": "test", "item_sample_size": None, **{k: v for k, v in design.items() if k != "sources"}}
    add = reverse("admin:studies_study_add")
    data = {**form_data(admin_client.get(add)), "name": "refused", "dataset": dataset.pk, "consent_text": "ok",
            "sources": [s.pk for s in chosen],
            **{k: "" if v is None else v for k, v in fields.items()}}
    refused = admin_client.post(add, data)
    assert refused.status_code == 200
    shown = refused.context["adminform"].form.errors
    assert shown[field] == [message]
    with pytest.raises(StudyError) as raised:
        study_create(name="refused", dataset=dataset, sources=chosen, **fields)
    assert str(raised.value) == " ".join(reason for reasons in shown.values() for reason in reasons)
    assert not Study.objects.filter(name="refused").exists()


def test_a_qualification_test_taken_between_the_page_and_its_delete_stays_on_the_study_page(admin_client,
                                                                                             monkeypatch):
    # Given: a test added on the study page, the page read while nobody had taken it (its check said
    # so: the test may be deleted), and a worker who took it (and passed) since.
    from annotations.models import QualificationGrant
    from annotations.services.assignment import assignment_start
    from cockpit import study_setup
    from tests.annotations.factories import ParticipantFactory

    study = open_utility_study(name="delete-race", n_items=2, n_sources=1, quota=2)
    url = reverse("admin:studies_study_change", args=[study.pk])
    data = form_data(admin_client.get(url))
    data.update({"qualification_test-TOTAL_FORMS": "1", "qualification_test-0-pass_mark": "1",
                 "qualification_test-0-questions": "Is Paris in France? | yes"})
    assert admin_client.post(url, data).status_code == 302
    test = QualificationTest.objects.get(study=study)
    data = form_data(admin_client.get(url))
    work(study, "f" * 24, submit=False)  # takes the test and passes
    assert QualificationGrant.objects.filter(study=study, passed=True).exists()
    monkeypatch.setattr(study_setup, "qualification_test_taken", lambda test: False)  # the page's read

    # When: the page is saved with the test marked for deletion.
    data["qualification_test-0-DELETE"] = "on"
    response = admin_client.post(url, data)

    # Then: the reason is on the page, the test stays, and a new worker's task waits for it.
    assert response.status_code == 200
    assert "can no longer be deleted" in response.content.decode()
    assert QualificationTest.objects.filter(pk=test.pk).exists()
    assert assignment_start(study=study, participant=ParticipantFactory(), consented=True).qualification_pending


def test_an_untaken_qualification_test_is_deleted_on_the_study_page(admin_client):
    study = open_utility_study(name="delete-untaken", n_items=2, n_sources=1, quota=2)
    url = reverse("admin:studies_study_change", args=[study.pk])
    data = form_data(admin_client.get(url))
    data.update({"qualification_test-TOTAL_FORMS": "1", "qualification_test-0-pass_mark": "1",
                 "qualification_test-0-questions": "Is Paris in France? | yes"})
    assert admin_client.post(url, data).status_code == 302
    data = form_data(admin_client.get(url))
    data["qualification_test-0-DELETE"] = "on"
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert not QualificationTest.objects.filter(study=study).exists()


def test_an_attention_check_given_between_the_page_and_its_delete_stays_on_the_study_page(admin_client,
                                                                                          monkeypatch):
    # Given: a check added on the study page, the page read while no worker had been given it (the
    # check may be deleted), and a worker given it since.
    from cockpit import study_setup

    study = open_utility_study(name="check-race", n_items=2, n_sources=1, quota=2)
    url = reverse("admin:studies_study_change", args=[study.pk])
    data = form_data(admin_client.get(url))
    data.update({"attention_checks-TOTAL_FORMS": "1", "attention_checks-0-question": "Choose no.",
                 "attention_checks-0-choices": '["yes", "no"]', "attention_checks-0-correct_answer": "no"})
    assert admin_client.post(url, data).status_code == 302
    check = AttentionCheck.objects.get(study=study)
    data = form_data(admin_client.get(url))
    assert work(study, "f" * 24, submit=False).claims.filter(attention_check=check).exists()
    monkeypatch.setattr(study_setup, "attention_checks_fixed", lambda study: False)  # the page's read

    # When: the page is saved with the check marked for deletion.
    data["attention_checks-0-DELETE"] = "on"
    response = admin_client.post(url, data)

    # Then: the reason is on the page (not a 500), and the check stays.
    assert response.status_code == 200
    assert "so it is not deleted" in response.content.decode()
    assert AttentionCheck.objects.filter(pk=check.pk).exists()
