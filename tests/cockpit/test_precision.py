"""How precise will this study be? (issue 22, beyond): the planner's figures on the design
summary, the publish page and the planner's own page, the prior a researcher picks (the released
study's, or a scored pilot's), and hostile input for the difference to detect."""
from __future__ import annotations

import html
import re

import pytest

from scoring.selectors import plan_prior, study_precision
from scoring.services.score import study_score
from tests.cockpit.conftest import staff_client
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def page_text(response) -> str:
    return html.unescape(re.sub(r"\s+", " ", response.content.decode()))


def expected(study, *, key="released", user=None, difference=None):
    prior = plan_prior(user=user, key=key)
    return study_precision(study=study, prior=prior, n_items=study.items.count(), difference=difference)[0]


def pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def assert_figures(text: str, result) -> None:
    assert "How precise will this study be?" in text or "items and" in text
    for row in result.sources:
        assert f"<td>{row.name}</td><td>{pct(row.useful)}</td><td>± {pct(row.useful_half_width)}</td>" \
               f"<td>{pct(row.not_useful)}</td><td>± {pct(row.not_useful_half_width)}</td>" in text.replace(" <", "<")
    if result.detectable_difference is None:
        assert "(paired by item): <strong>none: even the largest possible difference is missed" in text
    else:
        assert f"(paired by item): <strong>{pct(result.detectable_difference)}</strong>" in text
    assert "McNemar's exact test" in text and "majority vote (a tie counts as wrong)" in text


@pytest.fixture
def researcher():
    return staff_client("rhea")


@pytest.fixture
def study(researcher):
    user, _ = researcher
    # One worker per unit (the released shares allow the largest differences then) on 200 items.
    return open_utility_study(name="plan", n_items=200, quota=1, source_names=["gpt3", "t5large"], owner=user)


def test_design_summary_shows_the_planned_precision_and_its_method(researcher, study):
    _, client = researcher
    response = client.get(f"/admin/studies/study/{study.pk}/change/")
    assert response.status_code == 200
    text = page_text(response)
    result = expected(study)
    assert [row.name for row in result.sources] == ["gpt3", "t5large"]
    assert result.n_items == 200 and result.raters == 1 and result.detectable_difference is not None
    assert_figures(text, result)
    assert "the released StrategyQA study (Joshi et al. 2023" in text
    assert f"/admin/studies/study/{study.pk}/precision/" in text


def test_publish_page_shows_the_planned_precision(researcher, study):
    _, client = researcher
    response = client.get(f"/admin/annotations/publication/publish/{study.pk}/")
    assert response.status_code == 200
    text = page_text(response)
    assert 'id="precision-card"' in text
    assert_figures(text, expected(study))


def test_items_needed_for_an_entered_difference(researcher, study):
    _, client = researcher
    response = client.get(f"/admin/studies/study/{study.pk}/precision/", {"prior": "released", "difference": "0.12"})
    assert response.status_code == 200
    text = page_text(response)
    result = expected(study, difference=0.12)
    assert result.items_needed is not None and result.items_needed > 200
    assert f"Items needed to detect a difference of 0.120 with 80% power: <strong>{result.items_needed}</strong>" in text
    assert_figures(text, result)
    # The method line names the simulations each figure ran: the search for the items needed runs
    # fewer per size than the intervals do, and says so.
    assert result.items_needed_sims == 1000 and result.n_sims == 2000
    assert "searched with 1,000 simulated studies per candidate number of items" in text


@pytest.mark.parametrize("value,reason", [
    ("abc", "Enter a number."), ("NaN", "Enter a number."), ("Infinity", "Enter a number."),
    ("1e999999", "less than or equal to 0.995"), ("-0.1", "greater than or equal to 0.005"), ("0", "greater than or equal"),
    ("2", "less than or equal to 0.995"), ("0.12345", "no more than 4 digits in total"),
    ("0.9", "is more than this prior allows with 1 workers per unit"), ("'; drop table", "Enter a number."),
])
def test_hostile_difference_gets_a_clear_error(researcher, study, value, reason):
    _, client = researcher
    response = client.get(f"/admin/studies/study/{study.pk}/precision/", {"difference": value})
    assert response.status_code == 400
    text = page_text(response)
    assert "Difference to detect:" in text and reason in text
    assert "Items needed" not in text
    assert_figures(text, expected(study))  # the page still shows the plan with the default prior


@pytest.mark.parametrize("value", ["pilot:999999", "pilot:abc", "pilot:", "x" * 5000, "released\x00"])
def test_hostile_prior_gets_a_clear_error(researcher, study, value):
    _, client = researcher
    response = client.get(f"/admin/studies/study/{study.pk}/precision/", {"prior": value})
    assert response.status_code == 400
    # a NUL is refused before any view, with its own message (lab's middleware)
    reason = "contains a NUL character" if "\x00" in value else "Expected shares from: Select a valid choice."
    assert reason in page_text(response)


def test_a_scored_pilot_is_the_prior_once_picked(researcher, study):
    """A pilot scored from real work: its per-source shares become the expected shares."""
    user, client = researcher
    pilot = open_utility_study(name="pilot", n_items=6, quota=3, source_names=["gpt3", "t5large"], owner=user)
    for worker in ("w1", "w2", "w3"):
        # wrong before (the test's answerer says "no" before, the gold is "yes"), right after: useful
        work(pilot, worker)
    run = study_score(study=pilot, similarity=False)
    assert run.results["utility_shares"]["all"]["useful"] == 1.0
    # another researcher's scored study is not offered
    other, _ = staff_client("otto")
    theirs = open_utility_study(name="theirs", n_items=2, quota=1, owner=other)
    work(theirs, "w9")
    study_score(study=theirs, similarity=False)

    page = client.get(f"/admin/studies/study/{study.pk}/precision/")
    text = page_text(page)
    assert f'value="pilot:{pilot.pk}"' in text and f'value="pilot:{theirs.pk}"' not in text
    response = client.get(f"/admin/studies/study/{study.pk}/precision/", {"prior": f"pilot:{pilot.pk}"})
    assert response.status_code == 200
    text = page_text(response)
    result = expected(study, key=f"pilot:{pilot.pk}", user=user)
    assert f"the pilot pilot (latest scored run {run.pk}, 3 workers per unit)" in text
    assert all(row.useful > 0.95 for row in result.sources)  # everything was useful in the pilot
    assert_figures(text, result)
    refused = client.get(f"/admin/studies/study/{study.pk}/precision/", {"prior": f"pilot:{theirs.pk}"})
    assert refused.status_code == 400


def test_a_design_too_small_says_no_difference_is_detectable(researcher):
    user, client = researcher
    small = open_utility_study(name="small", n_items=10, quota=3, source_names=["gpt3"], owner=user)
    text = page_text(client.get(f"/admin/studies/study/{small.pk}/change/"))
    result = expected(small)
    assert result.detectable_difference is None
    assert_figures(text, result)


def test_a_stranger_sees_no_plan(study):
    _, client = staff_client("stranger")
    assert client.get(f"/admin/studies/study/{study.pk}/precision/").status_code == 404



def test_a_pilot_without_pooled_shares_gets_a_clear_error(researcher, study):
    """A pilot is offered once its latest finished run has utility shares; one without the share over all
    sources (a run written before results.json carried it) gets a clear error and the released prior's
    figures, not a failed page."""
    user, client = researcher
    pilot = open_utility_study(name="early pilot", n_items=4, quota=1, source_names=["gpt3"], owner=user)
    work(pilot, "w1")
    run = study_score(study=pilot, similarity=False)
    run.results["utility_shares"].pop("all")
    run.save(update_fields=["results"])
    response = client.get(f"/admin/studies/study/{study.pk}/precision/", {"prior": f"pilot:{pilot.pk}"})
    assert response.status_code == 400
    text = page_text(response)
    assert "Expected shares from: The pilot 'early pilot' has no utility shares in its latest scored run." in text
    assert_figures(text, expected(study))
