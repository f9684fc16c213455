"""The report page: every section the study's data supports (with n and intervals), a line for
each one it does not, the figures, the zip download, and the run's live state after "Score now"."""
from __future__ import annotations

import csv
import io
import json
import re
import zipfile

import numpy as np
import pytest
from django.db import transaction
from django.urls import reverse

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from scoring import metrics
from scoring.models import ScoreRun, UnitScore
from scoring.reports.download import table_csv
from scoring.reports.intervals import correlation_ratio_draws, percentile_ci, theils_u_draws
from scoring.reports.sections import report_sections, unit_frame
from scoring.reports.tables import Column, Table
from scoring.services import outcomes_import, study_score
from studies.models import Study
from studies.services.studies import study_create
from tests.factories import (
    DatasetFactory,
    GeneralizationQuestionFactory,
    ItemFactory,
    RationaleFactory,
    RationaleSourceFactory,
)
from tests.scoring.released import imported_study_create, strategyqa_items_create
from tests.work import work


@pytest.fixture(scope="module")
def _scored_once(django_db_setup, django_db_blocker, strategyqa_test_rows, strategyqa_dir):
    """The released outcomes (458 items, 1,374 outcomes) imported and scored once for this module,
    inside a transaction that stays open around its tests (each test still runs in its own
    savepoint, rolled back after it) and is rolled back after the last one."""
    with django_db_blocker.unblock():
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            # Named apart from the per-test ``imported_study`` fixture's, which the other tests build.
            dataset = strategyqa_items_create(strategyqa_test_rows, name="StrategyQA (report module)")
            study = imported_study_create(dataset, name="released outcomes (report module)")
            outcomes_import(study=study, file=strategyqa_dir / "rationale_utility.json", user=None)
            run = study_score(study=study, similarity=False)
        except BaseException:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)
            raise
    yield run.pk
    with django_db_blocker.unblock():
        transaction.set_rollback(True)
        atomic.__exit__(None, None, None)


@pytest.fixture
def scored_run(db, _scored_once):
    """A fresh copy of the module's scored run, so that a test may change it (in its savepoint)."""
    return ScoreRun.objects.get(pk=_scored_once)


@pytest.fixture
def collected_run(db):
    """A utility study answered by six workers through the questionnaire's services: two sources,
    one whose predicted answers are all right and one right on half the items."""
    dataset = DatasetFactory(name="report-ds")
    items = [ItemFactory(dataset=dataset, external_id=f"r{i}", gold_answer="yes", split="test") for i in range(6)]
    good, mixed = RationaleSourceFactory(name="good"), RationaleSourceFactory(name="mixed")
    for i, item in enumerate(items):
        RationaleFactory(item=item, source=good, predicted_answer="yes", prediction_correct=True)
        RationaleFactory(item=item, source=mixed, predicted_answer="yes" if i % 2 else "no",
                         prediction_correct=bool(i % 2))
    study = study_open(study=study_create(name="report study", dataset=dataset, sources=[good, mixed],
                                          annotators_per_unit=3, units_per_task=6, consent_text="ok"),
                       user=OPERATOR)

    def answer(claim, step):  # varied but repeatable answers: right after the rationale more often
        h = hash((claim.participant_id, claim.unit.item.external_id, claim.unit.source_id, step)) % 10
        return "yes" if h < (7 if step == "after" else 4) else "no"

    for n in range(6):
        work(study, f"{n:024x}", answer=answer)
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    return run


def sections_by_key(run, **kwargs):
    return {s.key: s for s in report_sections(run, **kwargs)}


def rows_by(table, key):
    return {row[key]: row for row in table.rows}


# --- intervals ---------------------------------------------------------------------------------


def test_theils_u_interval_brackets_the_value_and_matches_a_row_resampling_bootstrap():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 400)
    x = np.where(rng.random(400) < 0.7, y, rng.integers(-1, 2, 400))
    value = metrics.theils_u(x, y)
    low, high = percentile_ci(theils_u_draws(x, y))
    assert low < value < high
    # The multinomial draws have the distribution of resampling rows: compare with the slow way.
    idx = np.random.default_rng(5).integers(0, 400, size=(2000, 400))
    slow = [metrics.theils_u(x[i], y[i]) for i in idx]
    assert percentile_ci(np.array(slow)) == pytest.approx([low, high], abs=0.03)


def test_correlation_ratio_interval_brackets_the_value_and_constant_data_is_a_point():
    rng = np.random.default_rng(1)
    cats = rng.integers(-1, 2, 300)
    values = cats * 0.1 + rng.normal(0, 0.2, 300)
    value = metrics.correlation_ratio(cats, values)
    low, high = percentile_ci(correlation_ratio_draws(cats, values))
    assert low < value < high
    assert percentile_ci(correlation_ratio_draws([1, 0, 1], [0.5, 0.5, 0.5])) == [0.0, 0.0]
    assert percentile_ci(theils_u_draws([], [])) == [None, None]


def test_correlation_ratio_draws_are_zero_when_the_values_are_all_equal_whatever_rounding_leaves():
    # Seven units all at similarity 0.1: the report published eta 1.889, CI [0.378, 1.890], before.
    draws = correlation_ratio_draws([1, -1, 1, -1, 1, -1, 0], [0.1] * 7)
    assert draws.max() == 0.0
    assert percentile_ci(draws) == [0.0, 0.0]
    rng = np.random.default_rng(3)
    values = 0.1 + rng.integers(0, 2, 40) * np.spacing(0.1)
    draws = correlation_ratio_draws(rng.integers(-1, 2, 40), values, n_resamples=500)
    assert ((draws >= 0.0) & (draws <= 1.0)).all()


# --- sections --------------------------------------------------------------------------------


def test_utility_study_sections_carry_n_and_intervals(scored_run):
    scored_run.refresh_from_db()  # as stored: PostgreSQL's jsonb keeps its keys in its own order
    sections = sections_by_key(scored_run)

    assert [r["source"] for r in sections["utility"].tables[0].rows] == ["gpt3", "t53b", "t5large", "all"]
    shares = rows_by(sections["utility"].tables[0], "source")
    assert {k: r["n"] for k, r in shares.items()} == {"gpt3": 458, "t53b": 458, "t5large": 458, "all": 1374}
    gpt3 = shares["gpt3"]
    assert gpt3["useful_ci_low"] <= gpt3["useful"] <= gpt3["useful_ci_high"]
    assert sections["utility"].figures == ["utility_shares"]
    # Absent sections say why.
    assert "task accuracy" in sections["theils_u"].absent
    assert "similarity" in sections["similarity"].absent.lower()
    assert "generalization study" in sections["generalization"].absent
    assert "raw annotations" in sections["agreement"].absent


def test_collected_study_has_theils_u_with_n_and_intervals_and_agreement(collected_run):
    sections = sections_by_key(collected_run)
    u = sections["theils_u"].tables[0]
    assert {r["measure"] for r in u.rows} == {"U(utility | task accuracy)"}
    by_source = rows_by(u, "source")
    stored = collected_run.results["theils_u_utility_given_task_accuracy"]
    assert set(by_source) == {"good", "mixed", "all"}
    for source, row in by_source.items():
        assert row["value"] == pytest.approx(stored[source])
        assert row["ci_low"] <= row["value"] + 1e-12 and row["value"] <= row["ci_high"] + 1e-12
    assert by_source["all"]["n"] == 12 and by_source["mixed"]["n"] == 6
    agreement = rows_by(sections["agreement"].tables[0], "step")
    assert agreement["before"]["n_annotations"] == agreement["after"]["n_annotations"] == 36
    assert "property annotations" in sections["properties"].absent
    assert "opt-in" in sections["faithfulness"].absent
    assert sections["consistency"].absent


def test_both_directions_on_request(collected_run):
    assert {r["measure"] for r in sections_by_key(collected_run)["theils_u"].tables[0].rows} == {
        "U(utility | task accuracy)"}
    u = sections_by_key(collected_run, both_directions=True)["theils_u"].tables[0]
    reverse_rows = [r for r in u.rows if r["measure"] == "U(task accuracy | utility)"]
    assert {r["source"] for r in reverse_rows} == {"good", "mixed", "all"}
    frame = UnitScore.objects.filter(study=collected_run.study, source__name="mixed").values_list(
        "task_correct", "utility")
    tc, ut = zip(*frame, strict=True)
    expected = metrics.theils_u(np.array(tc, dtype=int), np.array(ut))
    assert rows_by_measure_source(u, "U(task accuracy | utility)", "mixed")["value"] == pytest.approx(expected)


def rows_by_measure_source(table, measure, source):
    return next(r for r in table.rows if r["measure"] == measure and r["source"] == source)


def test_an_older_run_keeps_its_numbers_without_intervals(collected_run):
    newer = study_score(study=collected_run.study, similarity=False)
    old = sections_by_key(collected_run)["theils_u"]
    assert all(r["ci_low"] is None and r["n"] is None for r in old.tables[0].rows)
    assert "later run replaced" in " ".join(old.notes)
    assert sections_by_key(newer)["theils_u"].tables[0].rows[0]["ci_low"] is not None


def results_with(**parts) -> dict:
    base = {"study": {"kind": "generalization"}, "n_units": 4, "n_units_scored": 4, "warnings": []}
    return {**base, **parts}


def summary(n, before, after, lo, hi):
    return {"n": n, "accuracy_before": before, "accuracy_after": after, "accuracy_delta": after - before,
            "accuracy_delta_ci": [lo, hi]}


@pytest.mark.django_db
def test_generalization_sections_compare_with_gold_and_show_consistency(imported_study):
    from tests.factories import RationaleSourceFactory

    RationaleSourceFactory(name="gold-src", kind="gold")
    results = results_with(
        generalization={
            "by_type": {"rephrase": summary(6, 0.5, 0.75, 0.0, 0.5)},
            "by_utility": {"useful": summary(6, 0.25, 0.75, 0.25, 0.75)},
            "by_source": {"gold-src": summary(3, 0.5, 0.75, 0.0, 0.5), "lm": summary(3, 0.5, 0.5, -0.3, 0.3)},
            "consistency": {"all_generalization_questions": {
                "before": {"n_bundles": 2, "accuracy": 0.5, "consistency": 0.0, "relative_consistency": 0.2},
                "after": {"n_bundles": 2, "accuracy": 0.75, "consistency": 0.5, "relative_consistency": 0.9}}},
        },
        agreement={"before": {"n_units": 4, "n_annotations": 12, "krippendorff_alpha": 0.4, "fleiss_kappa": 0.38}},
        properties_model={"formula": "useful ~ factual + (1 | question) + (1 | source)", "method": "VB",
                          "n_rationales": 80, "terms": {"factual": {"log_odds": 1.2, "ci": [0.4, 2.0]}},
                          "constant_properties_dropped": ["grammatical"]},
    )
    run = ScoreRun.objects.create(study=imported_study, status=ScoreRun.Status.DONE, results=results)
    sections = sections_by_key(run)

    gen = sections["generalization"]
    by_source = rows_by(next(t for t in gen.tables if t.name == "generalization_by_source"), "key")
    assert by_source["gold-src"]["reference"] == "gold (for comparison)"
    assert by_source["lm"]["minus_gold"] == pytest.approx(-0.25)
    assert gen.figures == ["generalization"]
    rc = sections["consistency"].tables[0].rows
    assert [(r["step"], r["relative_consistency"]) for r in rc] == [("before", 0.2), ("after", 0.9)]
    assert sections["agreement"].tables[0].rows[0]["n_annotations"] == 12
    assert "utility outcomes" in sections["utility"].absent
    props = sections["properties"]
    assert props.tables[0].rows == [{"term": "factual", "log_odds": 1.2, "ci_low": 0.4, "ci_high": 2.0}]
    assert props.tables[0].html_rows()[0] == [("factual", False), ("1.200", True), ("[0.400, 2.000]", True)]
    assert "n = 80 rationales" in props.tables[0].title and "grammatical" in " ".join(props.notes)


# --- page, figures, download -------------------------------------------------------------------


def test_report_page_shows_every_section_with_its_numbers(admin_client, scored_run):
    url = reverse("admin:scoring_scorerun_report", args=[scored_run.pk])
    html = admin_client.get(url).content.decode()
    assert "Utility per source (SPEC section 2)" in html and "t53b" in html
    assert re.search(r"<td class=\"num\">458</td>", html)
    assert "Not in this report:" in html and "Figure 4" in html
    assert reverse("admin:scoring_scorerun_figure", args=[scored_run.pk, "utility_shares", "png"]) in html
    assert reverse("admin:scoring_scorerun_download", args=[scored_run.pk]) in html
    # The finishing time ends the sentence once: no "a.m.." (a date format without a full stop).
    assert not re.search(r"\.\.", html.split('id="report-summary"')[1].split("</p>")[0])


def test_report_page_gives_both_directions_when_asked(admin_client, collected_run):
    url = reverse("admin:scoring_scorerun_report", args=[collected_run.pk])
    html = admin_client.get(url).content.decode()
    assert "U(utility | task accuracy)" in html and "U(task accuracy | utility)" not in html
    assert "U(task accuracy | utility)" in admin_client.get(url + "?both=1").content.decode()


def test_figures_render_as_png_and_svg_and_missing_ones_are_404(admin_client, scored_run):
    png = admin_client.get(reverse("admin:scoring_scorerun_figure", args=[scored_run.pk, "utility_shares", "png"]))
    assert png.status_code == 200 and png["Content-Type"] == "image/png"
    assert png.content[:8] == b"\x89PNG\r\n\x1a\n"
    svg = admin_client.get(reverse("admin:scoring_scorerun_figure", args=[scored_run.pk, "utility_shares", "svg"]))
    assert svg["Content-Type"] == "image/svg+xml" and b"<svg" in svg.content
    for name, fmt in (("generalization", "png"), ("utility_shares", "gif"), ("nope", "png")):
        assert admin_client.get(reverse("admin:scoring_scorerun_figure", args=[scored_run.pk, name, fmt])).status_code == 404


def test_download_is_a_zip_of_tables_figures_and_results(admin_client, collected_run):
    scored_run = collected_run
    response = admin_client.get(reverse("admin:scoring_scorerun_download", args=[scored_run.pk]))
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    assert f"run{scored_run.pk}.zip" in response["Content-Disposition"]
    zf = zipfile.ZipFile(io.BytesIO(response.content))
    names = set(zf.namelist())
    assert {"results.json", "README.txt", "tables/utility_shares.csv", "tables/theils_u.csv",
            "figures/utility_shares.png", "figures/utility_shares.svg"} <= names
    assert json.loads(zf.read("results.json")) == scored_run.results
    shares = {r["source"]: r for r in csv.DictReader(io.StringIO(zf.read("tables/utility_shares.csv").decode()))}
    assert shares["all"]["n"] == "12"
    assert float(shares["mixed"]["useful_ci_low"]) <= float(shares["mixed"]["useful"])
    assert "tables/agreement.csv" in names
    u = list(csv.DictReader(io.StringIO(zf.read("tables/theils_u.csv").decode())))
    assert {r["measure"] for r in u} == {"U(utility | task accuracy)", "U(task accuracy | utility)"}
    readme = zf.read("README.txt").decode()
    assert "Generalization" in readme and "not in this report" in readme


def test_csv_cells_are_neutralised_against_formulas():
    table = Table("t", "t", [Column("source", "Source"), Column("v", "v", "float")],
                  [{"source": "=HYPERLINK(\"http://x\")", "v": -0.5}, {"source": "+cmd", "v": 1.0}])
    rows = list(csv.reader(io.StringIO(table_csv(table))))
    assert rows[1][0].startswith("'=") and rows[2][0].startswith("'+")
    assert rows[1][1] == "-0.5"  # numbers stay numbers


def test_download_of_a_run_not_done_is_404(admin_client, imported_study):
    run = ScoreRun.objects.create(study=imported_study)
    assert admin_client.get(reverse("admin:scoring_scorerun_download", args=[run.pk])).status_code == 404
    assert report_sections(run) == []


def test_report_escapes_untrusted_source_names(admin_client, scored_run):
    scored_run.results["utility_shares"]["<script>alert(1)</script>"] = scored_run.results["utility_shares"]["gpt3"]
    scored_run.save()
    html = admin_client.get(reverse("admin:scoring_scorerun_report", args=[scored_run.pk])).content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;" in html


def test_report_needs_staff(client, scored_run):
    for name in ("report", "download", "state_json"):
        response = client.get(reverse(f"admin:scoring_scorerun_{name}", args=[scored_run.pk]))
        assert response.status_code == 302 and "/login/" in response["Location"]


# --- "Score now" and the run's state -----------------------------------------------------------


def test_score_now_opens_the_runs_state_which_leads_to_the_report(admin_client, imported_study, utility_file,
                                                                    django_capture_on_commit_callbacks, settings):
    settings.RL_SCORING_SIMILARITY = False
    outcomes_import(study=imported_study, file=utility_file, user=None)
    url = reverse("admin:scoring_scorerun_score")
    assert admin_client.get(url).status_code == 405

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = admin_client.post(url, {"study": imported_study.pk})
    run = ScoreRun.objects.get(study=imported_study)
    assert response.status_code == 302 and response["Location"] == reverse("admin:scoring_scorerun_state", args=[run.pk])
    page = admin_client.get(response["Location"]).content.decode()
    assert "Queued" in page and reverse("admin:scoring_scorerun_state_json", args=[run.pk]) in page
    state = admin_client.get(reverse("admin:scoring_scorerun_state_json", args=[run.pk])).json()
    assert state["status"] == "pending" and state["report_url"] is None

    for callback in callbacks:  # the task runs (eager Celery in the test settings)
        callback()
    state = admin_client.get(reverse("admin:scoring_scorerun_state_json", args=[run.pk])).json()
    assert state["status"] == "done" and state["label"] == "Done"
    assert state["report_url"] == reverse("admin:scoring_scorerun_report", args=[run.pk])


def test_a_failed_run_shows_its_error(admin_client, imported_study):
    run = study_score(study=imported_study, similarity=False)  # no outcomes imported: nothing to score
    assert run.status == ScoreRun.Status.FAILED
    state = admin_client.get(reverse("admin:scoring_scorerun_state_json", args=[run.pk])).json()
    assert state["status"] == "failed" and "has no units" in state["error"]
    page = admin_client.get(reverse("admin:scoring_scorerun_state", args=[run.pk])).content.decode()
    assert "Failed" in page and "has no units" in page


@pytest.mark.filterwarnings("ignore:Results are not stored in backend")
def test_a_running_run_shows_the_stage_its_task_reached(admin_client, imported_study, utility_file, settings):
    """The stages travel through the Celery task's state in the result backend (scoring writes to
    the database only at its end): an eager run of the task leaves its last stage there."""
    from celery import current_app

    from scoring.run_stages import score_progress
    from scoring.tasks import score_study_task

    settings.RL_SCORING_SIMILARITY = False
    outcomes_import(study=imported_study, file=utility_file, user=None)
    run = ScoreRun.objects.create(study=imported_study, task_id="report-test-task", by_operator=True)  # as the operator queues it
    score_study_task.apply(args=(imported_study.pk, run.pk), task_id=run.task_id)
    assert score_progress(run.task_id) == {"stage": "storing the unit scores", "step": 5, "steps": 5}

    # A run still running shows the stage and step its task last told.
    running = ScoreRun.objects.create(study=imported_study, task_id="report-test-running")
    ScoreRun.STATUS.move(running, ScoreRun.Status.RUNNING)
    current_app.backend.store_result(running.task_id, {"stage": "Gen-U", "step": 2, "steps": 5}, "PROGRESS")
    state = admin_client.get(reverse("admin:scoring_scorerun_state_json", args=[running.pk])).json()
    assert state["label"] == "Running: Gen-U (step 2 of 5)"
    assert state["progress"] == {"stage": "Gen-U", "step": 2, "steps": 5}
    page = admin_client.get(reverse("admin:scoring_scorerun_state", args=[running.pk])).content.decode()
    assert 'value="2" max="5"' in page
    # A run whose worker died is queued again, and says so.
    ScoreRun.STATUS.move(running, ScoreRun.Status.PENDING, attempts=1)
    state = admin_client.get(reverse("admin:scoring_scorerun_state_json", args=[running.pk])).json()
    assert state["label"] == "Queued again: the worker stopped during start 1" and state["progress"] is None
    ScoreRun.STATUS.move(running, ScoreRun.Status.RUNNING, attempts=2)
    # A task that told nothing (or an unknown id) shows "Running" without a stage.
    running.task_id = "never-started"
    running.save(update_fields=["task_id"])
    state = admin_client.get(reverse("admin:scoring_scorerun_state_json", args=[running.pk])).json()
    assert state["label"] == "Running" and state["progress"] is None


def test_generalization_study_report_from_answers_has_figure_4_with_gold_for_comparison(admin_client):
    """A utility study and then a generalization study over the same items, answered through the
    questionnaire's services: with the gold rationale workers get every question right after it, with
    the LM's they stay wrong."""
    dataset = DatasetFactory(name="gen-ds")
    items = [ItemFactory(dataset=dataset, external_id=f"g{i}", gold_answer="yes", split="test") for i in range(2)]
    lm, gold = RationaleSourceFactory(name="lm-src"), RationaleSourceFactory(name="gold-src", kind="gold")
    for item in items:
        for source in (lm, gold):
            RationaleFactory(item=item, source=source, predicted_answer="yes", prediction_correct=True)
        GeneralizationQuestionFactory(item=item, qtype="rephrase", answer="yes")
        GeneralizationQuestionFactory(item=item, qtype="counterfactual", answer="no")

    def design(name, **kind):
        return study_open(study=study_create(name=name, dataset=dataset, sources=[lm, gold], annotators_per_unit=1,
                                             units_per_task=2, consent_text="ok", **kind),
                          user=OPERATOR)

    utility = design("gen-utility")
    for n in range(2):
        work(utility, f"a{n:023x}")
    assert study_score(study=utility, similarity=False).status == ScoreRun.Status.DONE

    def answer(claim, step):
        right = claim.unit.generalization_question.answer
        wrong = "no" if right == "yes" else "yes"
        return right if step == "after" and claim.unit.source_id == gold.pk else wrong

    gen = design("gen-study", kind=Study.Kind.GENERALIZATION)
    for n in range(4):
        work(gen, f"b{n:023x}", answer=answer)
    run = study_score(study=gen, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error

    sections = sections_by_key(run)
    tables = {t.name: t for t in sections["generalization"].tables}
    by_type = rows_by(tables["generalization_by_type"], "key")
    assert {k: (r["n"], r["accuracy_delta"]) for k, r in by_type.items()} == {
        "counterfactual": (4, 0.5), "rephrase": (4, 0.5)}
    by_source = rows_by(tables["generalization_by_source"], "key")
    assert by_source["gold-src"]["reference"] == "gold (for comparison)" and by_source["gold-src"]["accuracy_delta"] == 1.0
    assert by_source["lm-src"]["minus_gold"] == pytest.approx(-1.0)
    assert set(rows_by(tables["generalization_by_utility"], "key")) <= {"useful", "unsure", "not_useful"}
    consistency = {(r["bundles"], r["step"]): r for r in sections["consistency"].tables[0].rows}
    after = consistency[("all generalization questions", "after")]
    assert (after["n"], after["consistency"]) == (4, 0.5) and after["relative_consistency"] is not None
    assert sections["generalization"].figures == ["generalization"]
    assert "utility outcomes" in sections["utility"].absent
    html = admin_client.get(reverse("admin:scoring_scorerun_report", args=[run.pk])).content.decode()
    assert "gold (for comparison)" in html and "Relative consistency" in html
    svg = admin_client.get(reverse("admin:scoring_scorerun_figure", args=[run.pk, "generalization", "svg"]))
    assert b"gold (for comparison)" in svg.content and b"by original utility" in svg.content
    # The bars' aggregation is named, and the other reading drawn beside them.
    assert b"majority per unit, a tie wrong" in svg.content and b"per answer" in svg.content


def test_faithfulness_section_when_the_study_has_it(db):
    dataset = DatasetFactory(name="faith-ds")
    source = RationaleSourceFactory(name="highlighter", has_highlights=True)
    probs = [(0.9, 0.8, 0.3), (0.7, 0.7, 0.6)]
    for i, (full, hl, without) in enumerate(probs):
        item = ItemFactory(dataset=dataset, external_id=f"f{i}", gold_answer="yes", split="test")
        RationaleFactory(item=item, source=source, predicted_answer="yes", prediction_correct=True,
                         faithfulness={"p_full": full, "p_highlight": hl, "p_without": without})
    study = study_open(study=study_create(name="faith", dataset=dataset, sources=[source], annotators_per_unit=1,
                                          units_per_task=2, consent_text="ok", faithfulness_enabled=True),
                       user=OPERATOR)
    work(study, "c" * 24)
    run = study_score(study=study, similarity=False)

    section = sections_by_key(run)["faithfulness"]
    rows = rows_by(section.tables[0], "source")
    assert rows["highlighter"]["n"] == 2
    assert rows["highlighter"]["sufficiency"] == pytest.approx(((0.9 - 0.8) + 0) / 2)
    assert rows["test (all sources)"]["comprehensiveness"] == pytest.approx(((0.9 - 0.3) + (0.7 - 0.6)) / 2)
    assert any("select-then-predict" in note for note in section.notes)


MATH_NAME = "$\\foo$"  # what mathtext would parse, and fail on


def test_a_source_named_like_math_is_drawn_as_text_in_the_figures_and_the_zip(admin_client, imported_study,
                                                                              utility_file, tmp_path):
    """Issue 20 item 13: an imported source named ``$\\foo$`` made the figures and the zip answer 500
    (matplotlib's mathtext); labels are text, never math."""
    rows = [json.loads(line) for line in utility_file.read_text().splitlines() if line.strip()]
    renamed = [dict(r, rationale_source=MATH_NAME) if r["rationale_source"] == "gpt3" else r for r in rows]
    path = tmp_path / "outcomes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in renamed))
    outcomes_import(study=imported_study, file=path, user=None)
    run = study_score(study=imported_study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    assert MATH_NAME in run.results["utility_shares"]

    svg = admin_client.get(reverse("admin:scoring_scorerun_figure", args=[run.pk, "utility_shares", "svg"]))
    assert svg.status_code == 200
    assert MATH_NAME in svg.content.decode()  # the name as written, as SVG text
    png = admin_client.get(reverse("admin:scoring_scorerun_figure", args=[run.pk, "utility_shares", "png"]))
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"
    download = admin_client.get(reverse("admin:scoring_scorerun_download", args=[run.pk]))
    assert download.status_code == 200
    names = zipfile.ZipFile(io.BytesIO(download.content)).namelist()
    assert {"figures/utility_shares.png", "figures/utility_shares.svg"} <= set(names)


def _peeked_or_not(name: str, *, peeked: bool) -> ScoreRun:
    """A utility study of 8 items x 2 sources, one worker per unit, every answer fixed by its unit;
    ``peeked``: the researcher scored it once mid-collection ("Score now"), so its unit scores were
    written in another order than the study's units."""
    from annotations.services.errors import NoWorkAvailable

    dataset = DatasetFactory(name=f"{name}-ds")
    items = [ItemFactory(dataset=dataset, external_id=f"{name}q{i}", gold_answer="yes", split="test") for i in range(8)]
    sources = [RationaleSourceFactory(name=f"{name}-good"), RationaleSourceFactory(name=f"{name}-mixed")]
    predicted = {"good": "yyyyyyyy", "mixed": "ynnyynyn"}
    after = {"good": "yynyyyny", "mixed": "nyyynnyy"}
    for i, item in enumerate(items):
        for source in sources:
            answer = "yes" if predicted[source.name.split("-")[1]][i] == "y" else "no"
            RationaleFactory(item=item, source=source, predicted_answer=answer, prediction_correct=answer == "yes")
    study = study_open(study=study_create(name=name, dataset=dataset, sources=sources, annotators_per_unit=1,
                                          units_per_task=4, consent_text="ok"), user=OPERATOR)

    def answer(claim, step):
        i = int(claim.unit.item.external_id.rsplit("q", 1)[1])
        return "no" if step == "before" else ("yes" if after[claim.unit.source.name.split("-")[1]][i] == "y" else "no")

    workers = [f"{name[:3]}{n:021x}" for n in range(6)]
    order = [workers[3]] + workers[:3] + workers[4:] if peeked else workers
    for n, worker in enumerate(order):
        try:
            work(study, worker, answer=answer)
        except NoWorkAvailable:
            pass
        if peeked and n == 0:
            assert study_score(study=study, similarity=False).status == ScoreRun.Status.DONE
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE and run.results["n_units_scored"] == 16, run.error
    return run


@pytest.mark.django_db
def test_the_reports_intervals_do_not_depend_on_the_order_unit_scores_were_written():
    """The report resamples the unit scores by position: read in the order they were written, a
    study scored once mid-collection printed other intervals for U(utility | task accuracy) than the
    same answers scored once (0.297 vs 0.289 under the same seed)."""
    def intervals(run):
        table = {s.key: s for s in report_sections(run)}["theils_u"].tables[0]
        return {(r["measure"], r["source"].split("-")[-1]): (r["n"], r["value"], r["ci_low"], r["ci_high"])
                for r in table.rows}

    def in_unit_order(run):  # the rows as scoring reads its units (``score._units_frame``: by unit id)
        from annotations.models import Unit

        scores = {(u.item_id, u.source_id): u for u in UnitScore.objects.filter(study_id=run.study_id)}
        return [(u.source.name, scores[u.item_id, u.source_id].utility, scores[u.item_id, u.source_id].task_correct)
                for u in Unit.objects.filter(study_id=run.study_id).select_related("source").order_by("id")]

    peeked, direct = _peeked_or_not("peeked", peeked=True), _peeked_or_not("direct", peeked=False)
    # the peek wrote the first worker's units' scores first: not the units' order
    assert list(UnitScore.objects.filter(study_id=peeked.study_id).order_by("id").values_list("item_id", flat=True)) != (
        sorted(UnitScore.objects.filter(study_id=peeked.study_id).values_list("item_id", flat=True)))
    frame = unit_frame(peeked, peeked)
    assert list(frame[["source", "utility", "task_correct"]].itertuples(index=False, name=None)) == in_unit_order(peeked)
    assert peeked.results["bootstrap"] == direct.results["bootstrap"]
    assert intervals(peeked) == intervals(direct)


def test_the_gen_u_figure_names_what_each_all_bar_pools_and_a_u_that_says_nothing():
    """The human "all" bar pools every source (a gold one too) and the Gen-U "all" only those with
    Gen-U: before, both read "all", with no n, side by side; and a U of 1 because utility does not
    vary was titled as a perfect association."""
    from scoring import plots

    share = {"useful": 0.0, "unsure": 0.0, "not_useful": 1.0}
    results = {
        "utility_shares": {"gold": {**share, "useful": 1.0, "not_useful": 0.0, "n": 4}, "lm": {**share, "n": 4},
                           "all": {**share, "useful": 0.5, "not_useful": 0.5, "n": 8}},
        "gen_u_shares": {"lm": {**share, "n": 4}, "all": {**share, "n": 4}},
        "theils_u_utility_given_gen_u": {"lm": 1.0, "all": 1.0},
        "theils_u_degenerate": {"theils_u_utility_given_gen_u": {"lm": "utility_constant", "all": "utility_constant"}},
    }
    svg = plots.gen_u_vs_utility_figure(results, "svg").decode()
    assert f"{plots.ALL_HUMAN}" in svg and f"{plots.ALL_GEN_U}" in svg
    assert "(n=8)" in svg and "(n=4)" in svg
    assert "U says nothing" in svg
    # The same pools on both sides: "all" stays "all".
    same = {**results, "utility_shares": {k: v for k, v in results["utility_shares"].items() if k != "gold"},
            "theils_u_degenerate": {}}
    same["utility_shares"]["all"] = {**share, "n": 4}
    plain = plots.gen_u_vs_utility_figure(same, "svg").decode()
    assert plots.ALL_HUMAN not in plain and plots.ALL_GEN_U not in plain
    assert "U says nothing" not in plain
