"""A study's faithfulness (``Study.faithfulness_enabled``, SPEC §6's opt-in) is not turned off once
it opens (``studies.services.studies.study_locked_changes``, ``FAITHFULNESS_FIELD``), for everyone:
a re-score would drop the sufficiency and comprehensiveness it published with no word of them. The
review's probe: a closed study with a test sufficiency of -0.1; ``study_update(faithfulness_enabled=False)``
was accepted and the re-score had no ``test_sufficiency``, no ``faithfulness`` and no warning. Turning
it on after opening stays allowed: scoring then adds those figures, computed on the probabilities
stored with the sources' rationales, and changes nothing else. The study page (the admin's change
form, ``cockpit.admin.StudyForm``) and ``study_update`` go through the same rule; the API has no
design update."""
from __future__ import annotations

import pytest
from django.urls import reverse

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from scoring.services import study_score
from studies.models import Study
from studies.services.studies import StudyError, study_fixed_fields, study_update
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_setup import form_data
from tests.studies.test_source_fixed_fields import faithfulness_study

pytestmark = pytest.mark.django_db

REFUSAL = ("The study is no longer a draft (closed): its faithfulness cannot be turned off (scoring computes its "
           "sufficiency and comprehensiveness, which a re-score without it would drop from its published results)")


@pytest.mark.parametrize("who", ["owner", "operator"])
def test_a_closed_studys_faithfulness_is_not_turned_off_and_its_figures_stay(tmp_path, who):
    alice, _ = staff_client("alice")
    study = faithfulness_study(tmp_path, owner=alice)
    before = study_score(study=study, similarity=False).results
    assert before["test_sufficiency"] == pytest.approx(-0.1)

    with pytest.raises(StudyError) as refused:
        study_update(study=Study.objects.get(pk=study.pk), user=alice if who == "owner" else None,
                     faithfulness_enabled=False)

    assert set(refused.value.problems) == {"faithfulness_enabled"}
    assert refused.value.problems["faithfulness_enabled"].startswith(REFUSAL)
    assert str(refused.value).startswith(f"study 'faith-study': {REFUSAL}")
    assert Study.objects.get(pk=study.pk).faithfulness_enabled
    assert "faithfulness_enabled" in study_fixed_fields(study=Study.objects.get(pk=study.pk))
    after = study_score(study=study, similarity=False).results
    assert after["test_sufficiency"] == pytest.approx(before["test_sufficiency"])
    assert sorted(after["faithfulness"]["per_source"]) == ["bad-lm", "good-lm"]


def test_the_study_page_refuses_turning_faithfulness_off_beside_the_field(tmp_path):
    alice, client = staff_client("alice")
    study = faithfulness_study(tmp_path, owner=alice)
    url = reverse("admin:studies_study_change", args=[study.pk])
    data = form_data(client.get(url))
    assert data["faithfulness_enabled"] is True

    unticked = client.post(url, {key: value for key, value in data.items() if key != "faithfulness_enabled"})

    assert unticked.status_code == 200
    errors = unticked.context["adminform"].form.errors
    assert set(errors) == {"faithfulness_enabled"}
    assert errors["faithfulness_enabled"][0].startswith(REFUSAL)
    assert Study.objects.get(pk=study.pk).faithfulness_enabled
    # The rest of the page still saves, the box ticked as it was.
    assert client.post(url, {**data, "instructions": "Read carefully."}).status_code == 302
    row = Study.objects.get(pk=study.pk)
    assert (row.faithfulness_enabled, row.instructions) == (True, "Read carefully.")


def test_faithfulness_turned_on_after_closing_adds_the_figures_and_is_then_kept(tmp_path):
    alice, client = staff_client("alice")
    study = faithfulness_study(tmp_path, owner=alice, faithfulness=False)
    before = study_score(study=study, similarity=False).results
    assert "faithfulness" not in before and "test_sufficiency" not in before
    assert "faithfulness_enabled" not in study_fixed_fields(study=study)
    url = reverse("admin:studies_study_change", args=[study.pk])

    ticked = client.post(url, {**form_data(client.get(url)), "faithfulness_enabled": "on"})

    assert ticked.status_code == 302, ticked.context["adminform"].form.errors
    assert Study.objects.get(pk=study.pk).faithfulness_enabled
    after = study_score(study=study, similarity=False).results
    assert after["test_sufficiency"] == pytest.approx(-0.1)
    assert after["utility_shares"] == before["utility_shares"]
    with pytest.raises(StudyError, match=r"its faithfulness cannot be turned off"):
        study_update(study=Study.objects.get(pk=study.pk), user=alice, faithfulness_enabled=False)


def test_a_drafts_faithfulness_is_turned_off_and_the_same_value_is_no_change(tmp_path):
    alice, _ = staff_client("alice")
    draft = faithfulness_study(tmp_path, owner=alice, status=Study.Status.DRAFT)
    assert study_fixed_fields(study=draft) == ()

    study_update(study=draft, user=alice, faithfulness_enabled=False)
    assert not Study.objects.get(pk=draft.pk).faithfulness_enabled
    study_update(study=draft, user=alice, faithfulness_enabled=True)
    study_open(study=draft, user=OPERATOR)
    opened = Study.objects.get(pk=draft.pk)
    study_update(study=opened, user=alice, faithfulness_enabled=True, instructions="Same switch.")

    with pytest.raises(StudyError, match=r"no longer a draft \(open\): its faithfulness cannot be turned off"):
        study_update(study=opened, user=alice, faithfulness_enabled=False)
    row = Study.objects.get(pk=draft.pk)
    assert (row.faithfulness_enabled, row.instructions) == (True, "Same switch.")
