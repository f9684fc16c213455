"""Figure 4 and Gen-U count every generalization question not marked invalid
(``studies.selectors.QUESTION_RULE``), validated or not; SPEC section 4 says humans validate the
questions but not which ones the figures count. Where unvalidated questions count, results.json
gives the figures on validated questions only beside the published ones
(``generalization.unvalidated_questions``, ``gen_u.unvalidated_questions``, keyed like
``conflicting_answers``), the warnings say which reading the published figures use, and the report
prints the other reading. With every question validated there is only the rule and the count."""
from __future__ import annotations

import pytest

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from scoring.models import ScoreRun
from scoring.reports.sections import gen_u_section, generalization_section
from scoring.services.score import study_score
from studies.models import GeneralizationQuestion, GenUPrediction, Study
from studies.services.questions import generalization_questions_set_validation
from tests.annotations.factories import make_study
from tests.work import work

pytestmark = pytest.mark.django_db

VALID = GeneralizationQuestion.Validation.VALID


def _study(kind: str, *, validate_all: bool = False) -> tuple[Study, list[GeneralizationQuestion]]:
    """A study of 2 items x 2 generalization questions (answer "yes"), one source; the first
    question of each item (every question with ``validate_all``) marked valid, then opened."""
    study = make_study(kind=kind, n_items=2, n_sources=1, n_genq=2, quota=2, units_per_task=4,
                       status=Study.Status.DRAFT)
    questions = list(GeneralizationQuestion.objects.filter(item__in=study.items.all()).order_by("item_id", "pk"))
    chosen = questions if validate_all else questions[::2]
    generalization_questions_set_validation(questions=chosen, status="valid")
    questions = list(GeneralizationQuestion.objects.filter(item__in=study.items.all()).order_by("item_id", "pk"))
    assert [q.validation_status == VALID for q in questions] == [True, validate_all] * 2
    return study_open(study=study, user=OPERATOR), questions


def _wrong_after_on_validated(claim, step: str) -> str:
    """Before the rationale always wrong; after it right on unvalidated questions only."""
    question = claim.unit.generalization_question
    if step == "after" and question.validation_status != VALID:
        return question.answer
    return "no"


def _score_generalization(validate_all: bool = False) -> ScoreRun:
    study, _ = _study(Study.Kind.GENERALIZATION, validate_all=validate_all)
    for worker in ("5a9d64f5f6dfdd0001eaa701", "5a9d64f5f6dfdd0001eaa702"):
        work(study, worker, answer=_wrong_after_on_validated)
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    return run


def test_figure_4_gives_the_validated_only_reading_beside_the_published_one():
    run = _score_generalization()
    r = run.results
    gen = r["generalization"]
    # The published figures count the unvalidated questions too.
    assert (gen["all"]["n"], gen["all"]["accuracy_delta"]) == (4, 0.5)
    assert (gen["n_questions_validated"], gen["n_questions_unvalidated"]) == (2, 2)
    block = gen["unvalidated_questions"]
    assert block["default"] == "not_invalid" and set(block["rules"]) == {"not_invalid", "validated_only"}
    assert "not marked invalid" in block["rules"]["not_invalid"] and block["n_questions_unvalidated"] == 2
    assert "does not say which questions the figures count" in block["spec"]
    validated = block["validated_only"]
    assert (validated["n_questions"], validated["n_units_scored"]) == (2, 2)
    assert (validated["all"]["n"], validated["all"]["accuracy_before"], validated["all"]["accuracy_after"],
            validated["all"]["accuracy_delta"]) == (2, 0.0, 0.0, 0.0)
    assert {k: v["accuracy_delta"] for k, v in validated["by_type"].items()} == {
        k: 0.0 for k in gen["by_type"] if any(
            q.qtype == k for q in GeneralizationQuestion.objects.filter(validation_status=VALID))}
    assert {k: v["n"] for k, v in validated["by_utility"].items()} == {"unknown": 2}
    questions_only = validated["consistency"]["all_generalization_questions"]
    assert (questions_only["before"]["consistency"], questions_only["after"]["consistency"]) == (0.0, 0.0)
    assert gen["consistency"]["all_generalization_questions"]["after"]["consistency"] == 0.0

    # The warning says which reading the published figures use and where the other one is.
    warning = next(w for w in r["warnings"] if "generalization questions nobody validated" in w)
    assert warning.startswith("Figure 4 includes 2 generalization questions nobody validated (the published "
                              "figures count every question not marked invalid when scored")
    assert "is the other reading, not theirs" in warning and "the default is" not in warning
    assert "generalization.unvalidated_questions.validated_only" in warning

    # The report prints the other reading beside the published figures.
    section = generalization_section(r)
    table = next(t for t in section.tables if t.name == "generalization_unvalidated_questions")
    rows = {(row["reading"], row["key"]): row["accuracy_delta"] for row in table.rows}
    assert rows[("validated and unvalidated (default)", "all")] == 0.5
    assert rows[("validated only", "all")] == 0.0
    notes = " ".join(section.notes)
    assert "Figure 4 and its consistency use the default, validated and unvalidated (default)" in notes


def test_every_question_validated_gives_no_other_reading():
    gen = _score_generalization(validate_all=True).results["generalization"]
    assert gen["question_filter"] == "validated questions only" and gen["n_questions_unvalidated"] == 0
    block = gen["unvalidated_questions"]
    assert block["n_questions_unvalidated"] == 0 and "validated_only" not in block
    assert (gen["all"]["n"], gen["all"]["accuracy_delta"]) == (4, 0.0)


def test_gen_u_gives_the_validated_only_reading_when_it_counts_unvalidated_questions():
    # A utility study whose Gen-U predictions (as a Gen-U job told to answer unvalidated questions
    # stores them) score each validated question +1 and each unvalidated one -1: the item's tie goes
    # to the lowest score, so the published Gen-U is not useful and the validated-only one useful.
    study, questions = _study(Study.Kind.UTILITY)
    work(study, "5a9d64f5f6dfdd0001eaa703")
    source = study.sources.get()
    for question in questions:
        valid = question.validation_status == VALID
        for answerer, correct in (("I", not valid), ("IR", valid)):
            GenUPrediction.objects.create(
                generalization_question=question, rationale_source=source, answerer=answerer,
                answerer_model=f"t5-base-{answerer}", correct=correct,
                predicted_answer=question.answer if correct else "no")
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    r = run.results
    name = source.name
    assert r["gen_u_shares"][name]["not_useful"] == 1.0
    block = r["gen_u"]["unvalidated_questions"]
    assert block["default"] == "not_invalid" and block["n_questions_unvalidated"] == 2
    by_source = block["by_source"][name]
    assert (by_source["not_invalid"]["not_useful"], by_source["not_invalid"]["n_questions"]) == (1.0, 4)
    assert (by_source["validated_only"]["useful"], by_source["validated_only"]["n_questions"]) == (1.0, 2)
    assert set(block["theils_u_utility_given_gen_u"]) == {"not_invalid", "validated_only"}
    assert block["consistency_validated_only"][name]["F^IR"]["consistency"] == 1.0
    warning = next(w for w in r["warnings"] if w.startswith("Gen-U includes 2 generalization questions"))
    assert "the published Gen-U counts every question not marked invalid" in warning
    assert "gen_u.unvalidated_questions gives the figures on validated questions only" in warning

    section = gen_u_section(r)
    table = next(t for t in section.tables if t.name == "gen_u_unvalidated_questions")
    rows = {row["reading"]: row for row in table.rows if row["source"] == name}
    assert rows["validated only"]["useful"] == 1.0 and rows["validated and unvalidated (default)"]["not_useful"] == 1.0


def test_gen_u_on_validated_questions_only_gives_no_other_reading():
    study, questions = _study(Study.Kind.UTILITY)
    work(study, "5a9d64f5f6dfdd0001eaa704")
    source = study.sources.get()
    for question in questions:
        if question.validation_status == VALID:  # the Gen-U job's default: validated questions only
            for answerer in ("I", "IR"):
                GenUPrediction.objects.create(generalization_question=question, rationale_source=source,
                                              answerer=answerer, answerer_model=f"t5-base-{answerer}", correct=True,
                                              predicted_answer=question.answer)
    gen_u = study_score(study=study, similarity=False).results["gen_u"]
    assert gen_u["question_filter"] == "validated questions only"
    assert gen_u["unvalidated_questions"]["n_questions_unvalidated"] == 0
    assert "by_source" not in gen_u["unvalidated_questions"]
