"""Whether a rationale source has highlights may not be turned off once a study that computes
faithfulness (``Study.faithfulness_enabled``) and uses the source opens
(``studies.services.content.HIGHLIGHTS_FIELDS``, ``_highlights_readers``): it decides whether scoring
computes the source's faithfulness at all (``scoring.services.score._faithfulness``), so turned off
after opening it would drop the source from the study's published sufficiency and comprehensiveness.
The audit's probe: a closed study with faithfulness on and two sources with highlights; turning
``bad-lm``'s flag off was let through by the content rule and re-scoring dropped ``bad-lm`` from
the figures with no mention. Only those studies judge it, and only turning it off: a study with
faithfulness off reads no highlights, so its researcher still marks its source as having them
(SPEC §6's opt-in), and a source it alone uses may still turn its flag off. A source's backend and
model stay editable: a fine-tuning or Quark job registers new weights under an existing source's
name (``lifecycle.model_source_register``)."""
from __future__ import annotations

import json

import pytest
from django.urls import reverse

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from scoring.services import study_score
from studies.models import Dataset, Platform, RationaleSource, Study
from studies.services.content import ContentChangeRefused, content_change_problems, content_row_save
from studies.services.generation.lifecycle import REGISTERED_FIELDS
from studies.services.importers import items_import_table, rationales_import
from studies.services.studies import study_create
from tests.cockpit.conftest import staff_client
from tests.studies.helpers import write_jsonl
from tests.work import work

pytestmark = pytest.mark.django_db

N_ITEMS = 4
# Per source: (p_full, p_highlight, p_without) of every rationale. Sufficiency is p_full - p_highlight
# averaged: 0.1 for good-lm, -0.3 for bad-lm, -0.1 over both.
PROBABILITIES = {"good-lm": (0.9, 0.8, 0.3), "bad-lm": (0.6, 0.9, 0.5)}


def rationale_rows(names, *, highlights: bool = True) -> list[dict]:
    rows = []
    for name in names:
        for i in range(N_ITEMS):
            row = {"item_id": f"q{i}", "source": name, "rationale": f"{name} on fact {i}.", "predicted_answer": "yes"}
            if highlights:
                p_full, p_highlight, p_without = PROBABILITIES[name]
                row.update(highlights=[[0, 2]], p_full=p_full, p_highlight=p_highlight, p_without=p_without,
                           y_hat_from="highlight")
            rows.append(row)
    return rows


def faithfulness_study(tmp_path, *, owner, plain: tuple[str, ...] = (), status: str = Study.Status.CLOSED,
                       faithfulness: bool = True, highlighted: bool = True, name: str = "faith-study") -> Study:
    """``owner``'s utility study with faithfulness on (``faithfulness``: off) over four yes/no items and
    the imported sources ``good-lm`` and ``bad-lm`` (with highlights and probabilities; ``highlighted``
    False: neither is imported or used), and ``plain`` (sources without highlights), built as the app
    builds it: imported, designed, opened, worked by one worker, closed and scored (``status``: left a
    draft or open instead)."""
    items_import_table(file=write_jsonl(tmp_path / "items_test.jsonl", [
        {"id": f"q{i}", "question": f"Is fact {i} true?", "answer": "yes"} for i in range(N_ITEMS)]),
        dataset_name="faith-ds", task_format="yes_no", user=None)
    if highlighted:
        rationales_import(file=write_jsonl(tmp_path / "highlighted.jsonl", rationale_rows(PROBABILITIES)),
                          dataset_name="faith-ds", user=None)
    if plain:
        rationales_import(file=write_jsonl(tmp_path / "plain.jsonl", rationale_rows(plain, highlights=False)),
                          dataset_name="faith-ds", user=None)
    names = [*(PROBABILITIES if highlighted else ()), *plain]
    sources = list(RationaleSource.objects.filter(name__in=names).order_by("name"))
    study = study_create(name=name, dataset=Dataset.objects.get(name="faith-ds"), sources=sources,
                         owner=owner, consent_text="I agree.", faithfulness_enabled=faithfulness, annotators_per_unit=1,
                         units_per_task=N_ITEMS * len(sources))
    if status == Study.Status.DRAFT:
        return study
    study_open(study=study, user=OPERATOR)
    if status == Study.Status.OPEN:
        return study
    work(study, "worker-1", platform=Platform.LINK)
    study_close(user=OPERATOR, study=study)
    study.refresh_from_db()
    assert study_score(study=study, similarity=False).status == "done"
    return study


def _form_data(client, source) -> dict:
    """What the source's change page would send unchanged."""
    page = client.get(reverse("admin:studies_rationalesource_change", args=[source.pk]))
    assert page.status_code == 200
    data = {}
    for field in page.context["adminform"].form:
        value = field.value()
        if value is None or value is False:  # an unticked box is not sent
            continue
        data[field.html_name] = json.dumps(value) if isinstance(value, (dict, list)) else value
    return data


def test_the_highlights_flag_of_a_source_a_closed_study_uses_is_fixed_and_its_faithfulness_stays(tmp_path):
    alice, _ = staff_client("alice")
    study = faithfulness_study(tmp_path, owner=alice)
    before = study_score(study=study, similarity=False).results
    assert sorted(before["faithfulness"]["per_source"]) == ["bad-lm", "good-lm"]
    assert before["test_sufficiency"] == pytest.approx(-0.1)
    bad = RationaleSource.objects.get(name="bad-lm")

    not_yours, fixed = content_change_problems(user=alice, model=RationaleSource,
                                               changes={bad.pk: ["has_highlights"]})
    bad.has_highlights = False
    with pytest.raises(ContentChangeRefused) as refused:
        content_row_save(user=alice, obj=bad, changed=["has_highlights"])

    assert not_yours == {} and list(fixed) == [bad.pk]
    assert fixed[bad.pk].startswith(f"has_highlights of rationale source {bad.pk} cannot be turned off: study "
                                    "'faith-study' uses it with faithfulness on and was opened")
    assert str(refused.value) == fixed[bad.pk]
    assert RationaleSource.objects.get(pk=bad.pk).has_highlights
    after = study_score(study=study, similarity=False).results
    assert sorted(after["faithfulness"]["per_source"]) == ["bad-lm", "good-lm"]
    assert after["test_sufficiency"] == pytest.approx(before["test_sufficiency"])


def test_the_admin_change_page_refuses_turning_the_flag_off_and_keeps_backend_and_model_editable(tmp_path):
    alice, client = staff_client("alice")
    study = faithfulness_study(tmp_path, owner=alice)
    bad = RationaleSource.objects.get(name="bad-lm")
    url = reverse("admin:studies_rationalesource_change", args=[bad.pk])
    data = _form_data(client, bad)
    assert data["has_highlights"] is True

    unticked = client.post(url, {key: value for key, value in data.items() if key != "has_highlights"})

    assert unticked.status_code == 200
    page = unticked.content.decode()
    assert f"has_highlights of rationale source {bad.pk} cannot be turned off" in page and study.name in page
    bad.refresh_from_db()
    assert bad.has_highlights
    # Its settings stay the researchers' to edit, the model included (an imported source's backend
    # is empty by its kind).
    edited = client.post(url, {**data, "description": "Re-described.", "model_name_or_path": "google/flan-t5-small"})
    assert edited.status_code == 302, edited.context["adminform"].form.errors
    bad.refresh_from_db()
    assert (bad.description, bad.model_name_or_path, bad.has_highlights) == (
        "Re-described.", "google/flan-t5-small", True)


LATE_HIGHLIGHTS = [{"item_id": "q0", "source": "plain-lm", "rationale": "plain-lm on fact 0.", "predicted_answer": "yes",
                    "highlights": [[0, 2]]}]


def test_an_import_with_highlights_marks_a_source_of_the_owners_open_faithfulness_study(tmp_path):
    """Turning the flag on is not what the rule keeps (it adds the source to the figures, which
    name it in ``skipped_sources`` until then): the owner's own file with highlights for
    ``plain-lm``, listed by her open study with faithfulness on, marks it."""
    alice, _ = staff_client("alice")
    faithfulness_study(tmp_path, owner=alice, plain=("plain-lm",), status=Study.Status.OPEN)
    plain = RationaleSource.objects.get(name="plain-lm")

    rationales_import(file=write_jsonl(tmp_path / "late.jsonl", LATE_HIGHLIGHTS), dataset_name="faith-ds", user=alice)

    plain.refresh_from_db()
    assert plain.has_highlights
    assert plain.rationales.get(item__external_id="q0").highlights == [[0, 2]]


def test_the_owners_highlights_import_for_a_source_of_her_closed_study_without_faithfulness_is_accepted(tmp_path):
    """The review's probe: a closed utility study with faithfulness off uses ``plain-lm``; it reads no
    highlights, so Alice's own highlights import for ``plain-lm`` is accepted, as it was before the
    flag was fixed for every opened study (README: the flag is refused only where a study the
    importer may not change uses the source)."""
    alice, _ = staff_client("alice")
    faithfulness_study(tmp_path, owner=alice, plain=("plain-lm",), faithfulness=False, highlighted=False,
                       name="no-faith")
    plain = RationaleSource.objects.get(name="plain-lm")

    rationales_import(file=write_jsonl(tmp_path / "late.jsonl", LATE_HIGHLIGHTS), dataset_name="faith-ds", user=alice)

    plain.refresh_from_db()
    assert plain.has_highlights
    assert plain.rationales.get(item__external_id="q0").highlights == [[0, 2]]


def test_a_source_only_studies_without_faithfulness_use_may_turn_its_flag_off(tmp_path):
    """``good-lm`` and ``bad-lm`` are used by a closed study with faithfulness off: their flags are a
    setting like the others, off and on again (the page and the service alike); the study's scores,
    which compute no faithfulness, are unchanged."""
    alice, client = staff_client("alice")
    study = faithfulness_study(tmp_path, owner=alice, faithfulness=False, name="no-faith")
    before = study_score(study=study, similarity=False).results
    assert "faithfulness" not in before
    bad, good = RationaleSource.objects.get(name="bad-lm"), RationaleSource.objects.get(name="good-lm")

    assert content_change_problems(user=alice, model=RationaleSource, changes={bad.pk: ["has_highlights"]}) == ({}, {})
    bad.has_highlights = False
    content_row_save(user=alice, obj=bad, changed=["has_highlights"])
    url = reverse("admin:studies_rationalesource_change", args=[good.pk])
    unticked = client.post(url, {key: value for key, value in _form_data(client, good).items() if key != "has_highlights"})

    assert unticked.status_code == 302, unticked.context["adminform"].form.errors
    assert not RationaleSource.objects.filter(pk__in=[bad.pk, good.pk], has_highlights=True).exists()
    bad.has_highlights = True
    content_row_save(user=alice, obj=bad, changed=["has_highlights"])
    assert RationaleSource.objects.get(pk=bad.pk).has_highlights
    after = study_score(study=study, similarity=False).results
    assert "faithfulness" not in after and after["utility_shares"] == before["utility_shares"]


def test_a_source_also_used_by_a_closed_faithfulness_study_keeps_its_flag(tmp_path):
    """A source used by a study without faithfulness and by one with it: the second judges the flag."""
    alice, _ = staff_client("alice")
    study = faithfulness_study(tmp_path, owner=alice)
    other = study_create(name="no-faith", dataset=study.dataset, sources=list(study.sources.all()), owner=alice,
                         consent_text="I agree.", faithfulness_enabled=False)
    study_open(study=other, user=OPERATOR)
    bad = RationaleSource.objects.get(name="bad-lm")

    not_yours, fixed = content_change_problems(user=alice, model=RationaleSource,
                                               changes={bad.pk: ["has_highlights", "name"]})

    assert not_yours == {}
    # The name is fixed by both opened studies; the flag by the one with faithfulness on alone.
    assert fixed[bad.pk].startswith(f"name of rationale source {bad.pk} cannot change: studies 'faith-study', "
                                    "'no-faith' use it and were opened")
    assert (f"; has_highlights of rationale source {bad.pk} cannot be turned off: study 'faith-study' uses it "
            "with faithfulness on and was opened, so its sufficiency and comprehensiveness keep the source") in fixed[bad.pk]


def test_a_draft_studys_source_flag_stays_editable(tmp_path):
    alice, _ = staff_client("alice")
    faithfulness_study(tmp_path, owner=alice, status=Study.Status.DRAFT)
    bad = RationaleSource.objects.get(name="bad-lm")

    bad.has_highlights = False
    content_row_save(user=alice, obj=bad, changed=["has_highlights"])

    assert not RationaleSource.objects.get(pk=bad.pk).has_highlights


def test_registering_a_checkpoint_under_a_source_a_closed_study_uses_is_still_allowed(tmp_path):
    """What ``lifecycle.output_name_check`` asks before a fine-tuning or Quark job replaces a
    source's weights (``REGISTERED_FIELDS``: backend, model, settings, training record): not the
    highlights flag, so fixing it leaves that path as it was."""
    alice, _ = staff_client("alice")
    faithfulness_study(tmp_path, owner=alice)
    good = RationaleSource.objects.get(name="good-lm")

    assert "has_highlights" not in REGISTERED_FIELDS
    assert content_change_problems(user=alice, model=RationaleSource, changes={good.pk: REGISTERED_FIELDS}) == ({}, {})
