"""An LM output that did not parse: the published task accuracy and Gen-U leave it out (the
default), and SPEC does not say how it counts, so results.json and the report give the other
reading, counted as wrong, beside the default, named (``task_accuracy_readings``,
``gen_u["unparsed_rules"]``)."""
from __future__ import annotations

import math

import pytest
from django.urls import reverse

from annotations.models import Unit
from annotations.services.units import study_units_build
from scoring.models import ScoreRun, UnitScore
from scoring.reports.sections import report_sections
from scoring.services import study_score
from scoring.services.results_folder import task_accuracy_note
from studies.services.questions import generalization_questions_set_validation
from tests.factories import (
    GeneralizationQuestionFactory,
    ItemFactory,
    RationaleFactory,
    RationaleSourceFactory,
    StudyFactory,
)
from tests.scoring.test_services_score import collect, predict

pytestmark = pytest.mark.django_db

SPEC_SAYS = "SPEC does not say how an LM output that did not parse counts"


def _section(run, key):
    return next(s for s in report_sections(run) if s.key == key)


def test_task_accuracy_gives_the_items_without_a_rationale_counted_as_wrong_beside_the_default(admin_client):
    study = StudyFactory(annotators_per_unit=5)
    good, bad = RationaleSourceFactory(name="good-lm"), RationaleSourceFactory(name="bad-lm")
    items = [ItemFactory(dataset=study.dataset, gold_answer="yes", gold_rationale="The sky is blue.") for _ in range(4)]
    for item in items:
        RationaleFactory(item=item, source=good, prediction_correct=True, text="The sky is blue indeed.")
    # bad-lm's output parsed, and its answer was right, on items 0 and 1; on items 2 and 3 it did not
    # parse, so it has no rationale of them and the design makes no unit.
    for item in items[:2]:
        RationaleFactory(item=item, source=bad, prediction_correct=True, text="Blue it is.")
    study.items.set(items)
    study.sources.set([good, bad])
    study_units_build(study=study)
    for unit in Unit.objects.filter(study=study).order_by("id"):
        collect(study, unit, [("no", "yes")] * 5)

    run = study_score(study=study, similarity=False)

    assert run.status == ScoreRun.Status.DONE, run.error
    r = run.results
    # The published figures and their keys are as before: left out, bad-lm is right on 2 of its 2 units.
    assert r["task_accuracy"] == {"bad-lm": 1.0, "good-lm": 1.0, "all": 1.0}
    assert r["task_accuracy_n"] == {"bad-lm": 2, "good-lm": 4, "all": 6}
    assert r["n_items_without_rationale"] == {"bad-lm": 2, "good-lm": 0}
    keys = list(r)
    assert keys[keys.index("task_accuracy"):keys.index("task_accuracy") + 3] == [
        "task_accuracy", "n_items_without_rationale", "task_accuracy_readings"]
    readings = r["task_accuracy_readings"]
    assert readings["default"] == "items_left_out"
    assert set(readings["rules"]) == {"items_left_out", "items_counted_wrong"}
    assert readings["spec"].startswith(SPEC_SAYS)
    # Counted as wrong: bad-lm 2 right of 2 units + 2 items = 0.5; all 6 of 6 + 2 = 0.75.
    assert readings["by_source"] == {
        "bad-lm": {"n_correct": 2, "n_units": 2, "n_items_without_rationale": 2,
                   "items_left_out": 1.0, "items_counted_wrong": 0.5},
        "good-lm": {"n_correct": 4, "n_units": 4, "n_items_without_rationale": 0,
                    "items_left_out": 1.0, "items_counted_wrong": 1.0},
        "all": {"n_correct": 6, "n_units": 6, "n_items_without_rationale": 2,
                "items_left_out": 1.0, "items_counted_wrong": 0.75},
    }

    # The results folder's note beside task accuracy (units.csv, the bundle) names both readings.
    assert task_accuracy_note(r).endswith(
        "items without a rationale of the source left out: bad-lm 2 (counted as wrong instead: bad-lm 0.500; "
        "task_accuracy_readings)")

    section = _section(run, "theils_u")
    table = next(t for t in section.tables if t.name == "task_accuracy_readings")
    assert [(row["source"], row["reading"], row["n_correct"], row["n"], row["accuracy"]) for row in table.rows] == [
        ("bad-lm", "left out (default)", 2, 2, 1.0), ("bad-lm", "counted as wrong", 2, 4, 0.5),
        ("good-lm", "left out (default)", 4, 4, 1.0), ("good-lm", "counted as wrong", 4, 4, 1.0),
        ("all", "left out (default)", 6, 6, 1.0), ("all", "counted as wrong", 6, 8, 0.75)]
    notes = " ".join(section.notes)
    assert (f"{SPEC_SAYS} (section 8 says only that parse failures are recorded with the raw output, never dropped "
            "silently). Task accuracy and U(utility | task accuracy) use the default reading, 'left out'") in notes
    html = admin_client.get(reverse("admin:scoring_scorerun_report", args=[run.pk])).content.decode()
    assert "Task accuracy with the items a source has no rationale for left out or counted as wrong" in html
    assert "counted as wrong" in html and "left out (default)" in html


def test_gen_u_gives_the_answers_that_did_not_parse_counted_as_wrong_beside_the_default(utility_study, admin_client):
    study, items, good, _ = utility_study
    study.items.set(items[:3])
    study.sources.set([good])
    study_units_build(study=study)
    units = {u.item_id: u for u in Unit.objects.filter(study=study)}
    collect(study, units[items[0].pk], [("no", "yes")] * 5)  # useful (+1)
    collect(study, units[items[1].pk], [("yes", "no")] * 5)  # not useful (-1)
    collect(study, units[items[2].pk], [("yes", "yes")] * 5)  # unsure (0)
    # (F^I right, F^IR right), None: the output did not parse. Per question s, left out / counted wrong:
    answers = {
        0: [(True, True), (True, True), (None, True), (None, True), (None, True)],  # 0 0 . . . / 0 0 +1 +1 +1
        1: [(True, None), (False, True)],  # . +1 / -1 +1 (a tie: the lowest, -1)
        2: [(None, None)],  # . / -1: no Gen-U when left out
    }
    questions = []
    for k, pairs in answers.items():
        for n, (i_ok, ir_ok) in enumerate(pairs):
            question = GeneralizationQuestionFactory(item=items[k], text=f"g{k}-{n}?", answer="yes")
            questions.append(question)
            predict(question, good, "I", bool(i_ok), parsed=i_ok is not None)
            predict(question, good, "IR", bool(ir_ok), parsed=ir_ok is not None)
    generalization_questions_set_validation(questions=questions, status="valid")

    run = study_score(study=study, similarity=False)

    assert run.status == ScoreRun.Status.DONE, run.error
    # The published figures stay the default's: item 0 scores 0 on 2 questions, item 1 +1 on 1, item 2 none.
    assert {u.item_id: u.gen_u for u in UnitScore.objects.filter(study=study)} == {
        items[0].pk: 0, items[1].pk: 1, items[2].pk: None}
    gen_u = run.results["gen_u"]
    assert gen_u["unparseable"]["good-lm"]["questions_left_out_unparseable"] == 5
    assert run.results["theils_u_utility_given_gen_u"] == {"good-lm": 1.0, "all": 1.0}
    unparsed = gen_u["unparsed_rules"]
    keys = list(gen_u)
    assert keys.index("unparsed_rules") == keys.index("tie_rules") + 1
    assert (unparsed["default"], unparsed["tie_rule"]) == ("left_out", gen_u["tie_rules"]["default"])
    assert set(unparsed["rules"]) == {"left_out", "counted_wrong"}
    assert unparsed["spec"].startswith(SPEC_SAYS)
    assert unparsed["by_source"] == {"good-lm": {
        "left_out": {"n": 2, "mean": 0.5, "useful": 0.5, "unsure": 0.5, "not_useful": 0.0, "n_questions": 3},
        "counted_wrong": {"n": 3, "mean": pytest.approx(-1 / 3), "useful": pytest.approx(1 / 3), "unsure": 0.0,
                          "not_useful": pytest.approx(2 / 3), "n_questions": 8},
    }}
    # The default's figures are tie_rules' (the default rule), so one reading is never two numbers.
    assert {k: v for k, v in unparsed["by_source"]["good-lm"]["left_out"].items() if k != "n_questions"} == \
        gen_u["tie_rules"]["by_source"]["good-lm"]["lowest"]
    # Theil's U(utility | Gen-U): left out, utility (+1, -1) against Gen-U (0, +1): 1. Counted wrong,
    # utility (+1, -1, 0) against Gen-U (+1, -1, -1): 1 - H(utility | Gen-U) / H(utility) = 1 - (2/3 ln 2) / ln 3.
    counted = 1 - (2 / 3) * math.log(2) / math.log(3)
    assert unparsed["theils_u_utility_given_gen_u"] == {
        "left_out": {"good-lm": 1.0, "all": 1.0},
        "counted_wrong": {"good-lm": pytest.approx(counted), "all": pytest.approx(counted)}}

    section = _section(run, "gen_u")
    table = next(t for t in section.tables if t.name == "gen_u_unparsed_rules")
    assert [(row["reading"], row["n"], row["n_questions"], row["mean"], row["theils_u"]) for row in table.rows] == [
        ("left out (default)", 2, 3, 0.5, 1.0), ("counted as wrong", 3, 8, pytest.approx(-1 / 3), pytest.approx(counted))]
    assert any(note.startswith(f"{SPEC_SAYS} (section 8") and "use the default reading, 'left out'" in note
               and "under the 'lowest' tie rule" in note for note in section.notes)
    u_notes = " ".join(_section(run, "theils_u").notes)
    assert (f"U(utility | Gen-U) leaves out a question whose F^I or F^IR answer did not parse (the default; "
            f"{SPEC_SAYS}") in u_notes
    assert f"with those answers counted as wrong it is good-lm {counted:.4f}, all {counted:.4f}" in u_notes
    html = admin_client.get(reverse("admin:scoring_scorerun_report", args=[run.pk])).content.decode()
    assert "Gen-U with the answers that did not parse left out or counted as wrong" in html
