"""How precise will this study be? (issue 22, beyond): the planner's figures on the design
summary, the publish page and the planner's own page, the prior a researcher picks (the released
study's, or a scored pilot's), and hostile input for the difference to detect."""
from __future__ import annotations

import html
import re

import pytest
from django.core.cache import cache

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from annotations.services.withdrawal import participant_withdraw
from cockpit.precision import method_text
from scoring.metrics import planning
from scoring.selectors import plan_prior, study_precision
from scoring.services.score import study_score
from studies.services.studies import study_create
from tests.cockpit.conftest import staff_client
from tests.factories import (
    ItemFactory,
    MultipleChoiceDatasetFactory,
    RationaleFactory,
    RationaleSourceFactory,
)
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
    assert "Majority rule of these figures: plurality: the label more annotators gave than any other" in text
    if result.readings_coincide:
        assert "With two answer choices the other reading of the majority, strict majority" in text
    for row in result.other_sources:
        assert f"<td>{row.name}</td><td>{pct(row.useful)}</td><td>± {pct(row.useful_half_width)}</td>" \
               f"<td>{pct(row.not_useful)}</td><td>± {pct(row.not_useful_half_width)}</td>" in text.replace(" <", "<")


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
    # its units had one or two of the three workers it asked for, and the page says so
    assert (f"the pilot pilot (latest scored run {run.pk}, its units had 1.5 workers on average, 12 of 12 short of "
            "the 3 it asked for)") in text
    assert "Workers the pilot's units actually had: 6 with 1, 6 with 2" in text
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


# --- the audit's four problems ---------------------------------------------------------------------

def test_a_pilot_short_of_workers_is_planned_from_the_workers_its_units_had(researcher, study):
    """A pilot asked for three workers per unit; two came, so each unit was scored on two answers.
    Its shares (half useful, half not: one source's units were a tie after the rationale) are fitted
    to two workers, not three, and the page says how many the pilot's units actually had, apart
    from the design's one worker per unit."""
    user, client = researcher
    cache.clear()
    pilot = open_utility_study(name="short pilot", n_items=2, quota=3, source_names=["p0", "p1"], owner=user)
    seen: dict[int, int] = {}

    def answer(claim, step):
        """Wrong before; right after, but for p1's units whose second answer is wrong (a tie)."""
        if step == "before":
            return "no"
        seen[claim.unit_id] = seen.get(claim.unit_id, 0) + 1
        return "no" if claim.unit.source.name == "p1" and seen[claim.unit_id] == 2 else "yes"

    for worker in ("w1", "w2", "w3", "w4"):  # a worker sees an item once: two answers per unit
        work(pilot, worker, answer=answer)
    run = study_score(study=pilot, similarity=False)
    assert run.results["utility_shares"]["all"]["useful"] == 0.5
    assert run.results["utility_shares"]["all"]["not_useful"] == 0.5

    response = client.get(f"/admin/studies/study/{study.pk}/precision/", {"prior": f"pilot:{pilot.pk}"})
    assert response.status_code == 200
    text = page_text(response)
    result = expected(study, key=f"pilot:{pilot.pk}", user=user)
    # two workers right with probability q: a majority right q^2 = 0.5 of the time (a tie is wrong);
    # one worker per unit in this design is then right q = 0.707 of the time (three assumed: 0.5)
    for row in result.sources:
        assert abs(row.useful - 0.5 ** 0.5) < 0.01, row
    assert "With 200 items and 1 workers per unit" in text
    assert "its units had 2.0 workers on average, 4 of 4 short of the 3 it asked for" in text
    assert "Workers the pilot's units actually had: 4 with 2" in text
    assert_figures(text, result)


def test_a_pilot_that_stopped_units_once_decided_fits_them_at_its_workers(researcher):
    """A pilot that stops a unit once its result is decided (``stop_when_decided``) stopped both units
    after three agreeing answers of the five it asked for: their outcomes are the five workers' (no
    remaining answer could change them), so they are fitted at five and not called short. Fitted at
    the three answers they had, the per-worker rates come out higher than the workers' (they stopped
    because they agreed) and the label said "2 of 2 short of the 5"."""
    user, _ = researcher
    pilot = open_utility_study(name="decided pilot", n_items=2, n_sources=1, quota=5, owner=user,
                               stop_when_decided=True)
    for worker in ("w1", "w2", "w3"):  # wrong before, right after, all three: each unit decided
        work(pilot, worker)
    assert pilot.units.filter(decided_at__isnull=False).count() == 2
    study_score(study=pilot, similarity=False)
    prior = plan_prior(user=user, key=f"pilot:{pilot.pk}")
    assert "5 workers per unit" in prior.label and "short" not in prior.label, prior.label
    assert prior.workers == ""


def test_a_pilot_prior_says_when_a_worker_withdrew_after_its_run(researcher, study):
    """The prior is the pilot's latest run's shares: a participant who withdrew after that run is
    still in them until the pilot is scored again, and the page says so, by the run's one staleness
    rule (``scores_staleness``); before, it read as if nothing had changed."""
    user, client = researcher
    cache.clear()
    pilot = open_utility_study(name="withdrawn pilot", n_items=2, quota=2, source_names=["p0"], owner=user)
    for worker in ("w1", "w2"):
        work(pilot, worker)
    study_score(study=pilot, similarity=False)
    url = f"/admin/studies/study/{study.pk}/precision/"
    assert "no longer matches its answers" not in page_text(client.get(url, {"prior": f"pilot:{pilot.pk}"}))

    participant_withdraw(user=user, study=pilot, worker_id="w1")
    text = page_text(client.get(url, {"prior": f"pilot:{pilot.pk}"}))
    assert "The pilot's latest scored run" in text and "no longer matches its answers" in text, text[-2000:]
    assert "4 counted answers were withdrawn since" in text
    assert "score the pilot again" in text


@pytest.fixture
def mc_study(researcher):
    """A design on a multiple-choice dataset of eight choices (a-h), five workers per unit."""
    user, _ = researcher
    labels = list("abcdefgh")
    dataset = MultipleChoiceDatasetFactory(name="eight", choice_labels=labels)
    sources = [RationaleSourceFactory(name="gpt3"), RationaleSourceFactory(name="t5large")]
    for i in range(60):
        item = ItemFactory(dataset=dataset, external_id=f"mc{i}", split="test", gold_answer="a",
                           choices=[{"label": x, "text": f"choice {x}"} for x in labels])
        for source in sources:
            RationaleFactory(item=item, source=source, text=f"Because {i}.", predicted_answer="a")
    study = study_create(name="mc plan", dataset=dataset, split="test", sources=sources, annotators_per_unit=5,
                         units_per_task=10, owner=user, consent_text="I agree.")
    return study_open(study=study, user=OPERATOR)


def test_multiple_choice_plans_all_its_choices_and_both_readings_of_the_majority(researcher, mc_study):
    """Eight answer choices are simulated as eight (not six), the figures name the plurality rule
    they use, and the strict majority's shares (scoring's other reading) are shown beside them."""
    _, client = researcher
    response = client.get(f"/admin/studies/study/{mc_study.pk}/precision/")
    assert response.status_code == 200
    text = page_text(response)
    result = expected(mc_study)
    assert result.choices == 8 and result.raters == 5
    assert "among the 8 answer choices" in text
    assert len(result.other_sources) == 2
    assert "Under the other reading of the majority, strict majority: more than half of the annotators" in text
    assert_figures(text, result)
    for row, other in zip(result.sources, result.other_sources, strict=True):
        prior = planning.released_priors()[row.name]
        for got, rule in ((row, "plurality"), (other, "strict_majority")):
            useful, not_useful = planning.expected_shares(prior, 5, 8, rule)
            assert abs(got.useful - useful) < 0.01 and abs(got.not_useful - not_useful) < 0.01, (rule, got)
    # the design summary shows the same figures and the same readings
    assert_figures(page_text(client.get(f"/admin/studies/study/{mc_study.pk}/change/")), result)


def test_a_viewed_plan_is_not_simulated_again(researcher, study, monkeypatch):
    """The figures are kept in the cache per design and prior: a second view does not simulate."""
    _, client = researcher
    cache.clear()
    first = page_text(client.get(f"/admin/studies/study/{study.pk}/precision/", {"difference": "0.12"}))

    def no_simulation(*args, **kwargs):
        raise AssertionError("simulated again")

    monkeypatch.setattr(planning, "precision", no_simulation)
    again = client.get(f"/admin/studies/study/{study.pk}/precision/", {"difference": "0.12"})
    def figures(text: str) -> str:
        return text.split('id="precision">', 1)[1].split("</div>", 1)[0]

    assert again.status_code == 200 and figures(page_text(again)) == figures(first)
    assert "Items needed to detect a difference of 0.120" in figures(first)
    assert "Figures computed once per design and prior, then kept in the cache." in first


def test_a_large_design_says_how_many_studies_it_simulated(study):
    """A design of 10,000 items runs 200 simulated studies (at most 2,000,000 units per source), and
    the method line says so and why."""
    prior = planning.released_priors()["all"]
    result = planning.precision((prior,), prior, n_items=10_000, raters=5, choices=2)
    text = method_text(result)
    assert result.n_sims == 200 and result.n_sims_asked == 2000
    assert text.startswith("Method: 200 simulated studies of this design (not the planner's usual 2,000: to bound "
                           "a page's time and memory a source is simulated on at most 2,000,000 units, so a design "
                           "of 10,000 items runs 200 studies, never fewer than 200")


def test_a_study_of_imported_outcomes_has_no_planner_page_as_it_has_no_panel():
    """Its study page shows no precision panel; before, the planner's own URL still planned it
    with 5 workers per unit, a default nobody chose (an outcomes file gives no design)."""
    from django.urls import reverse

    from studies.models import Study
    from tests.annotations.factories import imported_outcomes_study, make_study

    dana, client = staff_client("dana")
    outcomes = imported_outcomes_study(dana)
    made = make_study(status=Study.Status.DRAFT, n_items=2, owner=dana)
    study_page = page_text(client.get(reverse("admin:studies_study_change", args=[outcomes.pk])))
    assert "How precise will this study be" not in study_page

    refused = client.get(reverse("admin:studies_study_precision", args=[outcomes.pk]))

    assert refused.status_code == 404
    assert "workers per unit" not in page_text(refused)
    assert client.get(reverse("admin:studies_study_precision", args=[made.pk])).status_code == 200
