"""A generalization question its file gives twice with different answers keeps the first answer
and, imported with ``--validation-status valid``, is marked valid with the rest, so Gen-U, Figure 4
and consistency count it. SPEC is silent: results.json names the rule ("first answer in the file
kept; our choice"), counts such questions (``n_questions_conflicting_answers``) and gives the figures
with them left out beside the default (``conflicting_answers``); the report prints both."""
from __future__ import annotations

import pytest

from annotations.models import Unit
from annotations.services.units import study_units_build
from scoring.models import ScoreRun
from scoring.reports.sections import report_sections
from scoring.services import study_score
from scoring.services.results_folder import gen_u_note, generalization_note
from studies.models import GeneralizationQuestion, Study
from studies.services.importers import generalization_questions_import
from tests.factories import (
    DatasetFactory,
    ItemFactory,
    RationaleFactory,
    RationaleSourceFactory,
    StudyFactory,
)
from tests.scoring.test_majority_readings import settings_rules
from tests.scoring.test_services_score import collect, predict
from tests.studies.helpers import write_json

pytestmark = pytest.mark.django_db

FIRST_KEPT = ("a question its file gave twice with different answers keeps the first answer in the file and counts "
              "(the published figures); our choice, SPEC is silent")


def _section(run, key):
    return next(s for s in report_sections(run) if s.key == key)


@pytest.fixture
def imported(tmp_path):
    """An item with three generalization questions imported as the authors' validated set: "Is the
    sky azure?" is given twice, True then False (the first kept, yes), the others once."""
    dataset = DatasetFactory(name="SQA-conflicts")
    item = ItemFactory(dataset=dataset, question="Is the sky blue?", gold_answer="yes")
    source = RationaleSourceFactory(name="lm")
    RationaleFactory(item=item, source=source, prediction_correct=True, text="Air scatters blue light.")
    path = write_json(tmp_path / "generalisation_final_test.json", {"Is the sky blue?": [
        ["Is the sky azure?", "True", "rephrase"],
        ["Is the sky a colour?", "True", "similar"],
        ["Is the sky azure?", "False", "rephrase"],
        ["Is the sky red?", "False", "counterfactual"],
    ]})
    record = generalization_questions_import(file=path, dataset_name=dataset.name, validation_status="valid")
    assert len(record.summary["conflicting_answers"]) == 1
    questions = {q.text: q for q in GeneralizationQuestion.objects.filter(item=item)}
    assert questions["Is the sky azure?"].answer == "yes"
    assert {q.validation_status for q in questions.values()} == {"valid"}
    return dataset, item, source, questions


def test_gen_u_names_the_rule_counts_the_questions_and_gives_them_left_out(imported):
    dataset, item, source, questions = imported
    study = StudyFactory(dataset=dataset, annotators_per_unit=3)
    study.items.set([item])
    study.sources.set([source])
    study_units_build(study=study)
    collect(study, Unit.objects.get(study=study), [("no", "yes")] * 3)
    # s = +1 (F^I wrong, F^IR right) on the conflicting question and on "a colour?", 0 on "red?":
    # Gen-U +1 by default; with the conflicting question left out, +1 and 0 tie: the lowest, 0.
    for text, i_right in (("Is the sky azure?", False), ("Is the sky a colour?", False), ("Is the sky red?", True)):
        predict(questions[text], source, "I", i_right)
        predict(questions[text], source, "IR", True)

    run = study_score(study=study, similarity=False)

    assert run.status == ScoreRun.Status.DONE, run.error
    gen_u = run.results["gen_u"]
    assert run.results["gen_u_shares"]["lm"]["useful"] == 1.0  # the default, unchanged
    assert gen_u["n_questions_conflicting_answers"] == 1
    block = gen_u["conflicting_answers"]
    assert block["default"] == "first_kept" and block["rules"]["first_kept"] == FIRST_KEPT
    assert block["rules"]["left_out"] == "a question its file gave twice with different answers is left out"
    assert block["spec"].startswith("SPEC is silent")
    lm = block["by_source"]["lm"]
    assert (lm["first_kept"]["n_questions"], lm["first_kept"]["mean"], lm["first_kept"]["useful"]) == (3, 1.0, 1.0)
    assert (lm["left_out"]["n_questions"], lm["left_out"]["mean"], lm["left_out"]["unsure"]) == (2, 0.0, 1.0)
    assert any("1 generalization questions their file gave twice" in w for w in run.results["warnings"])

    section = _section(run, "gen_u")
    table = next(t for t in section.tables if t.name == "gen_u_conflicting_answers")
    rows = {(r["source"], r["reading"]): r for r in table.rows}
    assert rows[("lm", "first answer kept (default)")]["mean"] == 1.0
    assert rows[("lm", "left out")]["mean"] == 0.0
    assert any(FIRST_KEPT in note and "1 counted question(s) had conflicting answers" in note
               for note in section.notes)
    assert "1 question(s) given twice with different answers" in gen_u_note(run.results)


def test_figure_4_and_consistency_give_the_questions_with_conflicting_answers_left_out(imported):
    dataset, item, source, questions = imported
    study = StudyFactory(kind=Study.Kind.GENERALIZATION, dataset=dataset, annotators_per_unit=3)
    study.items.set([item])
    study.sources.set([source])
    study_units_build(study=study)
    answers = {"Is the sky azure?": ("no", "yes"), "Is the sky a colour?": ("yes", "yes"),
               "Is the sky red?": ("no", "no")}
    for unit in Unit.objects.filter(study=study).select_related("generalization_question"):
        collect(study, unit, [answers[unit.generalization_question.text]] * 3)

    run = study_score(study=study, similarity=False)

    assert run.status == ScoreRun.Status.DONE, run.error
    gen = run.results["generalization"]
    assert gen["all"]["accuracy_delta"] == pytest.approx(1 / 3)  # the default, unchanged
    assert gen["n_questions_conflicting_answers"] == 1
    block = gen["conflicting_answers"]
    assert block["default"] == "first_kept" and block["n_questions_conflicting_answers"] == 1
    everything = block["by_source"]["all"]
    assert everything["first_kept"]["accuracy_delta"] == pytest.approx(1 / 3)
    assert everything["first_kept"]["n_questions"] == 3
    assert (everything["left_out"]["accuracy_delta"], everything["left_out"]["n_questions"]) == (0.0, 2)
    # One bundle (the item's questions with lm): consistent before only without the conflicting question.
    assert block["consistency"]["first_kept"]["before"]["consistency"] == 0.0
    assert block["consistency"]["left_out"]["before"]["consistency"] == 1.0

    section = _section(run, "generalization")
    table = next(t for t in section.tables if t.name == "generalization_conflicting_answers")
    rows = {(r["source"], r["reading"]): r for r in table.rows}
    assert rows[("all", "left out")]["accuracy_delta"] == 0.0
    assert any(FIRST_KEPT in note and "first answer kept (default) 0.000 before" in note
               and "left out 1.000 before" in note for note in section.notes)
    assert "1 question(s) given twice with different answers" in generalization_note(gen)
    rules = settings_rules(study)
    assert rules["conflicting_answers"].startswith(FIRST_KEPT)
    assert "gen_u.conflicting_answers, generalization.conflicting_answers" in rules["conflicting_answers"]
