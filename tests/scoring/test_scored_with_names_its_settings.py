"""A default is a claim: every output of a run's unit numbers names what they were scored with, as
the run recorded it (``export_units.scored_with_run``, the one owner), and a setting or default
changed after the run does not change what an old run's output says. Which answers counted (the
summary, both exports, units.csv), the similarity model and layer (units.csv), Gen-U's tie rule and
unparsed reading (``gen_u_method_text``), and the bootstrap of a run that did not record it."""
from __future__ import annotations

import csv
import io

import pandas as pd
import pytest

from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_approve
from scoring.api.export_units import scored_with_run, source_summaries
from scoring.models import ScoreRun
from scoring.reports import intervals
from scoring.reports.intervals import run_bootstrap
from scoring.reports.sections import drawn_ci_notes
from scoring.selectors import results_for_reader
from scoring.services import score_run_export, study_score
from scoring.services.genu import gen_u_method_text
from scoring.services.results_folder import bootstrap_note
from scoring.services.score import COUNTED, FAILED_ANY
from studies.lm import genu as genu_rule
from studies.models import Study
from tests.scoring.test_other_readings import _check, _task
from tests.scoring.test_services_score import collect, make_unit
from tests.scoring.test_what_figures_rest_on import _gen_u_run

pytestmark = pytest.mark.django_db

COUNTED_COLUMNS = ("counted_answers", "counted_tasks_failing_a_check", "other_readings")


def _units_csv(run, folder) -> list[dict]:
    score_run_export(run=run, out_dir=folder)
    with (folder / "units.csv").open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _export(client, study, name: str) -> pd.DataFrame:
    response = client.get(f"/api/v1/studies/{study.pk}/export/{name}/", {"file_format": "csv"})
    assert response.status_code == 200, response.content[:300]
    return pd.read_csv(io.BytesIO(b"".join(response.streaming_content)), keep_default_na=False)


def test_the_summary_and_both_exports_say_which_answers_the_run_counted(utility_study, admin_client, tmp_path):
    """The probe: one approved task and two counted tasks that failed every attention check. The
    published share useful is 1.0; without the failing tasks it is 0.0. Every place that gives the
    unit numbers says which answers were counted, that two counted tasks failed a check, and what
    the other readings give, as the run recorded it."""
    study, items, good, _ = utility_study
    Study.objects.filter(pk=study.pk).update(annotators_per_unit=3)
    study.refresh_from_db()
    unit = make_unit(study, items[0], good, quota=3)
    c1, c2 = _check(study, 1), _check(study, 2)
    approved = _task(study, unit, "yes", "no", checks=[(c1, "no"), (c2, "no")])
    assignment_approve(user=OPERATOR, study=study, assignment=approved)
    for _ in range(2):  # every check wrong; submitted, not reviewed: they count until rejected
        _task(study, unit, "no", "yes", checks=[(c1, "yes"), (c2, "yes")])
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    reading = run.results["counted_answers"]["other_readings"]["without_tasks_failing_any_check"]
    assert reading["utility_shares"]["all"]["useful"] == 0.0

    row = source_summaries(study=study, user=None)[0]
    assert row["share_useful"] == 1.0
    assert row["counted_answers"] == (f"{COUNTED}: 1 approved tasks and 2 submitted, not yet reviewed; "
                                      f"attention checks: {FAILED_ANY}")
    assert row["counted_tasks_failing_a_check"] == 2
    assert row["other_readings"].startswith("results.json counted_answers.other_readings gives ")
    assert ("without_tasks_failing_any_check: 4 answers left out, 1 units scored, useful 0.000, unsure 0.000, "
            "not useful 1.000") in row["other_readings"]
    expected = {name: row[name] for name in COUNTED_COLUMNS}

    served = admin_client.get(f"/api/v1/studies/{study.pk}/summary/").json()
    assert {name: served[0][name] for name in COUNTED_COLUMNS} == expected
    scores = _export(admin_client, study, "scores")
    answers = _export(admin_client, study, "annotations")
    answers = answers[answers["unit_id"] != ""]  # the attention checks have no unit
    for frame in (scores, answers):
        assert len(frame)
        assert set(frame["counted_answers"]) == {expected["counted_answers"]}
        assert set(frame["counted_tasks_failing_a_check"].astype(str)) == {"2"}
        assert set(frame["other_readings"]) == {expected["other_readings"]}
    units = _units_csv(run, tmp_path)
    assert {(r["counted_answers"], r["counted_tasks_failing_a_check"]) for r in units} == {
        (expected["counted_answers"], "2")}

    # A third failing task after the run: the run's numbers, and what they say they counted, are the run's.
    _task(study, make_unit(study, items[1], good, quota=3), "no", "yes", checks=[(c1, "yes")])
    assert {name: source_summaries(study=study, user=None)[0][name] for name in COUNTED_COLUMNS} == expected


def test_a_run_that_recorded_no_counted_answers_says_so_never_todays_rule():
    """Runs written by older code (their results are written here, as such a run left them)."""
    said = scored_with_run(ScoreRun(pk=9, results={"majority_readings": {}}), user=None)
    assert said["counted_answers"].startswith("not recorded: this run's results.json has no counted_answers")
    assert COUNTED not in said["counted_answers"]
    assert said["counted_tasks_failing_a_check"] is None and said["other_readings"] is None
    imported = scored_with_run(ScoreRun(pk=10, results={"study": {"is_imported_outcome": True}}), user=None)
    assert imported["counted_answers"].startswith("none counted here: imported outcomes")


def test_units_csv_names_the_similarity_model_and_layer_of_its_run(utility_study, settings, tmp_path):
    """units.csv printed ``similarity`` with no model or layer (layers 6 and 2 gave 0.8392 and 0.9162
    under the same header); it now carries the unit-score export's columns, read from the run, so a
    layer set after the run changes nothing it says."""
    pytest.importorskip("bert_score")
    study, items, good, _ = utility_study
    settings.RL_SIMILARITY_NUM_LAYERS = 2
    for item in items[:2]:
        collect(study, make_unit(study, item, good), [("no", "yes")] * 5)
    run = study_score(study=study, similarity=True)
    assert run.status == ScoreRun.Status.DONE, run.error
    similarity = run.results["similarity"]
    assert similarity["num_layers"] == 2
    expected = f"{similarity['name']}, layer 2, files {similarity['fingerprint'][:19]}; {similarity['method']}"
    assert scored_with_run(run, user=None)["similarity_model"] == expected

    rows = _units_csv(run, tmp_path / "a")
    assert rows and all(row["similarity"] for row in rows)
    assert {(row["score_run"], row["similarity_model"]) for row in rows} == {(str(run.pk), expected)}
    assert {row["majority_rule"] for row in rows} == {scored_with_run(run, user=None)["majority_rule"]}

    settings.RL_SIMILARITY_NUM_LAYERS = 6  # changed after the run
    assert {row["similarity_model"] for row in _units_csv(run, tmp_path / "b")} == {expected}


def test_gen_u_method_names_the_tie_rule_and_unparsed_reading_the_run_recorded(utility_study, monkeypatch):
    """``gen_u_method_text`` wrote today's ``TIE_RULE`` and unparsed reading whatever the run used;
    ``scored_with_run`` and ``results_for_reader`` (which rebuilds the method when it withholds an
    answerer) call it for old runs. Today's rule changed after the run: the run's text is unchanged."""
    run = _gen_u_run(utility_study)
    gen_u = run.results["gen_u"]
    assert gen_u["tie_rules"]["default"] == "lowest" and gen_u["unparsed_rules"]["default"] == "left_out"
    recorded = gen_u["method"]
    assert "ties to the lowest score; questions whose answer did not parse left out" in recorded

    monkeypatch.setattr(genu_rule, "TIE_RULE", "highest")  # today's default, changed after the run
    assert gen_u_method_text(gen_u) == recorded
    assert scored_with_run(run, user=None)["gen_u_method"] == recorded
    assert results_for_reader(run, user=None)["gen_u"]["method"] == recorded

    # A run from before the tie rules were recorded by name keeps its own words (results.json
    # gen_u.tie_rule); one from before the unparsed reading was recorded says it was not.
    old = {key: value for key, value in gen_u.items() if key not in ("tie_rules", "unparsed_rules", "method")}
    text = gen_u_method_text(old)
    assert "ties as results.json gen_u.tie_rule records: A tie in the mode of the per-question scores goes to " \
           "the lowest score (-1 before 0 before +1)" in text
    assert "highest" not in text.split("; F^I")[0]
    assert "how questions whose answer did not parse counted is not recorded by this run" in text
    oldest = {key: value for key, value in old.items() if key != "tie_rule"}
    assert "tie rule not recorded by this run (today's rule: ties to the highest score)" in gen_u_method_text(oldest)


def test_a_run_that_did_not_record_its_bootstrap_is_told_by_run_bootstrap_never_todays_defaults(
        utility_study, monkeypatch):
    """``bootstrap_note`` said 2,000 resamples, seed 0, while ``run_bootstrap`` drew with today's
    ``DEFAULT_RESAMPLES``/``DEFAULT_SEED``: the fallback is run_bootstrap's, fixed to what runs drew
    with before the record, and every note reads it."""
    run = _gen_u_run(utility_study)
    recorded = run.results["bootstrap"]
    assert bootstrap_note(run.results) == (f"{recorded['confidence']:.0%} intervals: percentile bootstrap over "
                                           f"units, {recorded['n_resamples']:,} resamples (seed {recorded['seed']}).")
    old = {key: value for key, value in run.results.items() if key != "bootstrap"}  # as older code left it

    monkeypatch.setattr(intervals, "DEFAULT_RESAMPLES", 500)  # today's defaults, changed after the run
    monkeypatch.setattr(intervals, "DEFAULT_SEED", 3)
    boot, was_recorded = run_bootstrap(old)
    assert not was_recorded and boot == {"n_resamples": 2000, "seed": 0, "confidence": 0.95}
    note = bootstrap_note(old)
    assert note == ("This run did not record its bootstrap settings; runs from before they were recorded drew 95% "
                    "intervals: percentile bootstrap over units, 2,000 resamples (seed 0).")
    assert "2,000 resamples (seed 0)" in " ".join(drawn_ci_notes(old))
