"""A rationale-properties study answered by workers through the questionnaire pages is scored: the
scorer reads the properties answer as the page stores it (``{name: "yes" | "no"}``, read by
``annotations.services.steps.property_marks``), with the utility borrowed from a scored utility
study of the same items and sources."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from annotations.models import Annotation, Claim
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from annotations.services.steps import RATIONALE_PROPERTIES
from scoring.models import ScoreRun, UnitScore
from scoring.reports.sections import properties_section
from scoring.services import study_score
from scoring.services.score import PROPERTIES_ANSWERS_RULE
from studies.models import Study
from studies.services.studies import study_create
from tests.annotations.pages import FIELD, entry_url, form_fields, start
from tests.api.conftest import grant
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db

N_ITEMS = 24


def _useful(item) -> bool:
    return int(item.external_id.rsplit("q", 1)[1]) % 3 != 0  # 16 useful, 8 not


def _factual(item) -> bool:
    n = int(item.external_id.rsplit("q", 1)[1])
    return _useful(item) != (n in (1, 3))  # factual mostly where useful, two exceptions either way


def _answer_properties_through_the_pages(study: Study) -> None:
    """One worker, in their own browser, answers every rationale of ``study`` on the questionnaire
    page: factual as ``_factual`` says, grammatical always, the other properties no."""
    client = Client()
    task = start(client, entry_url(study))
    for _ in range(N_ITEMS + 5):
        page = client.get(task).content.decode()
        if not FIELD["claim"].search(page):
            break
        fields = form_fields(page)
        item = Claim.objects.select_related("unit__item").get(pk=fields["claim"]).unit.item
        marks = {name: "no" for name, _ in RATIONALE_PROPERTIES}
        marks.update(grammatical="yes", factual="yes" if _factual(item) else "no")
        response = client.post(task + "answer", {**fields, "answer": "", **marks})
        assert response.status_code == 302, response.content.decode()[:500]
    assert client.post(task + "submit").status_code in (200, 302)


def _scored_lender(*, useful: tuple[str, str], other: tuple[str, str]):
    """(its owner, a scored utility study of ``N_ITEMS`` items): one worker answers (before, after)
    ``useful`` where ``_useful`` says, else ``other``."""
    owner = grant(get_user_model().objects.create_user(username="olga", password="pw", is_staff=True),
                  "studies.view_study", "studies.change_study")
    utility = open_utility_study(name="lender", n_items=N_ITEMS, n_sources=1, quota=1, owner=owner)
    work(utility, "w1", answer=lambda claim, step: (useful if _useful(claim.unit.item) else other)[step == "after"])
    assert study_score(study=utility).status == ScoreRun.Status.DONE
    return owner, utility


def _properties_study(owner, utility) -> Study:
    """An open rationale-properties study of the lender's items and sources, answered through the pages."""
    props = study_open(study=study_create(
        name="props", dataset=utility.dataset, kind=Study.Kind.RATIONALE_PROPERTIES, sources=utility.sources.all(),
        annotators_per_unit=1, units_per_task=N_ITEMS, owner=owner, consent_text="I agree."), user=OPERATOR)
    _answer_properties_through_the_pages(props)
    return props


def test_a_properties_study_answered_by_workers_is_scored(settings):
    settings.RL_SCORING_SIMILARITY = False
    owner, utility = _scored_lender(useful=("no", "yes"), other=("yes", "no"))
    assert UnitScore.objects.filter(study=utility, utility=1).count() == 16

    props = _properties_study(owner, utility)
    stored = Annotation.objects.filter(claim__study=props, step=Annotation.Step.PROPERTIES)
    assert stored.count() == N_ITEMS
    assert {value for a in stored for value in a.payload.values()} == {"yes", "no"}  # as the page stores it

    run = study_score(study=props)

    assert (run.status, run.error) == (ScoreRun.Status.DONE, "")
    model = run.results["properties_model"]
    assert "factual" in model["terms"], model["terms"]  # the marks as the page stores them are read
    assert model["n_rationales"] == N_ITEMS
    assert model["utility_from"]["studies"][0]["id"] == utility.pk
    assert model["answers_read"] == PROPERTIES_ANSWERS_RULE  # fitted once, on the published reading: said
    assert f"Answers read: {PROPERTIES_ANSWERS_RULE}." in properties_section(run.results).notes
    # Marked by nobody or by everyone: every property but factual is constant and dropped.
    assert sorted(model["constant_properties_dropped"]) == sorted(
        name for name, _ in RATIONALE_PROPERTIES if name != "factual")
    term = model["terms"]["factual"]
    assert term["ci"][0] < term["log_odds"] < term["ci"][1] and term["log_odds"] > 0


def test_a_properties_study_whose_borrowed_utility_has_no_useful_rationale_says_why_it_is_not_scored(settings):
    """The model's outcome is useful vs not (``OUTCOME_UNSURE_NOT_USEFUL``): utilities of unsure and
    not useful only are one outcome, below the cut-off, and the failed run says so (it tried the fit,
    which statsmodels refused, and the run said only that there was nothing to score)."""
    settings.RL_SCORING_SIMILARITY = False
    owner, utility = _scored_lender(useful=("yes", "yes"), other=("yes", "no"))
    assert set(UnitScore.objects.filter(study=utility).values_list("utility", flat=True)) == {0, -1}
    props = _properties_study(owner, utility)

    run = study_score(study=props)

    assert run.status == ScoreRun.Status.FAILED
    assert "has nothing to score yet. Properties model not fitted: 24 rationales have both property annotations " \
           "and a utility, 0 of them useful (need at least 10, with both useful and not-useful outcomes" in run.error
