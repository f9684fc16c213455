"""A default is a claim: every setting that changes a published number is named where the number is
printed, and nothing is called SPEC's that SPEC does not say. Early stopping names the figures that
rest on fewer answers, in words that fit the study's kind; a source's generation summary tells two
prompts apart by their demonstrations and template text; the faithfulness block names SPEC's y_hat
rule and which sources follow it; the properties model names its cut-offs as ours; the counted
answers name what expires a task, what an accepted flag sets aside and what a speeding task is."""
from __future__ import annotations

import random

import pandas as pd
import pytest

from scoring.metrics.faithfulness import CAVEATS, SPEC_RULE
from scoring.services import score
from scoring.services.score import _counted_answers, _early_stopping, _faithfulness, _fit_properties, _sources
from studies.models import Study
from tests.factories import RationaleFactory, RationaleSourceFactory, StudyFactory

pytestmark = pytest.mark.django_db


# --- 1. early stopping --------------------------------------------------------------------------


def test_early_stopping_names_the_figures_that_rest_on_fewer_answers_in_a_utility_study():
    from tests.scoring.test_early_stopping_score import run

    _study, stopped_run, _ = run(stop=True)
    early = stopped_run.results["early_stopping"]
    assert early["affects"] == ["ties", "agreement", "agreement_by_item", "counted_answers.other_readings"]
    assert "the utility of every unit" in early["note"]
    assert "counted_answers.other_readings" in early["note"] and "fewer answers" in early["note"]
    assert "agreement (SPEC section 2) is computed on the answers collected" in early["note"]


def test_early_stopping_in_a_generalization_study_names_the_per_answer_figures_not_utility():
    study = StudyFactory(kind=Study.Kind.GENERALIZATION, stop_when_decided=True, annotators_per_unit=5)
    early = _early_stopping(study)
    assert "utility" not in early["note"]
    assert "accuracy_delta" in early["note"] and "delta_per_answer" in early["note"]
    for key in ("agreement", "generalization.*.delta_per_answer", "generalization.*.accuracy_before_per_answer",
                "generalization.*.n_answers_after"):
        assert key in early["affects"]
    # its other readings of the counted answers leave answers out of units that already have fewer, too
    assert "counted_answers.other_readings" in early["affects"]
    assert "counted_answers.other_readings" in early["note"] and "already have fewer" in early["note"]


# --- 2. what a source's rationales were made with ----------------------------------------------


def test_generation_summary_tells_apart_prompts_with_the_same_seed_and_template_name(utility_study):
    study, items, good, _bad = utility_study
    lm = RationaleSourceFactory(name="gpt-lm", kind="lm", backend="causal", model_name_or_path="/models/gpt")
    study.sources.add(lm, good)
    study.items.add(*items)
    base = {"model": "/models/gpt", "decoding": {"max_new_tokens": 50}, "template": "custom", "seed": 0}
    infos = [
        {**base, "demonstrations": ["a", "b"], "template_text": "Q: {question}"},
        {**base, "demonstrations": ["a", "b"], "template_text": "Q: {question}"},
        {**base, "demonstrations": ["c", "d"], "template_text": "Q: {question}"},   # other few-shot prompt
        {**base, "demonstrations": ["a", "b"], "template_text": "Question: {question}"},  # other custom template
    ]
    for item, info in zip(items, infos, strict=True):
        RationaleFactory(item=item, source=lm, generation_info=info)

    combos = _sources(study)["gpt-lm"]["generation"]

    assert len(combos) == 3 and sorted(c["n_rationales"] for c in combos) == [1, 1, 2]
    assert all(c["seed"] == 0 and c["template"] == "custom" for c in combos)  # the existing keys keep their meaning
    top = combos[0]
    assert top["n_rationales"] == 2
    assert top["demonstrations_hash"] == score.generation_hash(["a", "b"])
    assert top["template_text_hash"] == score.generation_hash("Q: {question}")
    assert len(top["demonstrations_hash"]) == 12
    assert len({(c["demonstrations_hash"], c["template_text_hash"]) for c in combos}) == 3
    # rationales with no generation record (imported, gold) record no hash
    assert _sources(study)["good-lm"]["generation"][0]["demonstrations_hash"] is None


# --- 3. faithfulness: SPEC's y_hat rule ----------------------------------------------------------


def test_faithfulness_names_specs_y_hat_rule_and_the_sources_that_depart_from_it(utility_study):
    study, items, good, bad = utility_study
    study.faithfulness_enabled = True
    study.save()
    for source, rule in ((good, "full"), (bad, "highlight")):
        source.has_highlights = True
        source.save()
        study.sources.add(source)
        for item in items:
            r = item.rationales.get(source=source)
            r.faithfulness = {"p_full": 0.9, "p_highlight": 0.8, "p_without": 0.3, "y_hat_from": rule}
            r.save()
    study.items.add(*items)

    faith = _faithfulness(study).results["faithfulness"]

    assert faith["spec_rule"] == {"y_hat_from": "highlight", "reading": SPEC_RULE,
                                  "sources_following": ["bad-lm"], "sources_departing": ["good-lm"]}
    assert "not SPEC's definition" in faith["caveats"]["y_hat_from_full"]
    assert "SPEC section 6" in CAVEATS["y_hat_from_full"]


# --- 4. the properties model's cut-offs ----------------------------------------------------------


def _property_data(n: int) -> pd.DataFrame:
    rng = random.Random(3)
    rows = []
    for k in range(n):
        factual, novel = rng.random() < 0.5, rng.random() < 0.5
        useful = int(rng.random() < (0.8 if factual else 0.2))
        rows.append({"item_id": k, "source_id": k % 2, "factual": int(factual), "novel": int(novel),
                     "utility": 1 if useful else -1, "useful": useful})
    return pd.DataFrame(rows)


def test_properties_model_names_its_cut_offs_as_ours():
    model = _fit_properties(_property_data(30), ["factual", "novel"]).results["properties_model"]
    assert model["interactions"] is False  # 30 < 10 rationales x 4 terms
    assert str(score.PROPERTIES_RATIONALES_PER_TERM) in model["interactions_rule"]
    assert "Our cut-off" in model["interactions_rule"] and "SPEC section 7" in model["interactions_rule"]
    assert model["min_rationales"]["n"] == score.PROPERTIES_MIN_RATIONALES == 10
    assert "Our cut-off" in model["min_rationales"]["rule"]


def test_properties_model_cut_off_is_the_named_constant(monkeypatch):
    monkeypatch.setattr(score, "PROPERTIES_RATIONALES_PER_TERM", 5)
    monkeypatch.setattr(score, "PROPERTIES_MIN_RATIONALES", 5)
    formula, interactions, warnings = score._properties_formula({"a": "p0", "b": "p1"}, 20)
    assert interactions is True and "** 2" in formula and not warnings


# --- 5. what expires a task ----------------------------------------------------------------------


def test_counted_answers_name_the_expiry_settings(settings):
    study = StudyFactory(estimated_minutes_per_task=6)
    settings.RL_ASSIGNMENT_MINUTES = None
    settings.RL_FIRST_ANSWER_MINUTES = None
    unset = _counted_answers(study).results["counted_answers"]["expiry_rule"]
    assert "RL_ASSIGNMENT_MINUTES unset" in unset and "RL_FIRST_ANSWER_MINUTES unset" in unset
    assert "at least 10 minutes" in unset and "that is 30 and 10 minutes" in unset
    settings.RL_ASSIGNMENT_MINUTES = 45
    settings.RL_FIRST_ANSWER_MINUTES = 12
    named = _counted_answers(study).results["counted_answers"]["expiry_rule"]
    assert "45 minutes (RL_ASSIGNMENT_MINUTES)" in named and "12 minutes (RL_FIRST_ANSWER_MINUTES)" in named
    assert "that is 45 and 12 minutes" in named and "left out" in named


# --- 6. accepted flags and speeders --------------------------------------------------------------


def test_counted_answers_name_the_flag_and_speeder_rules_with_the_apps_own_threshold_and_timing():
    """Both count in the published figures; the results say so, with the threshold of the pay quote
    (``cost.MIN_PLAUSIBLE_SECONDS_PER_QUESTION``) and the timing of the review page, not copies."""
    from annotations.selectors.cost import MIN_PLAUSIBLE_SECONDS_PER_QUESTION
    from annotations.selectors.review import ACCEPTED_FLAG_SCOPE, SECONDS_PER_QUESTION_RULE

    counted = _counted_answers(StudyFactory()).results["counted_answers"]
    assert ACCEPTED_FLAG_SCOPE in counted["accepted_flag_rule"] and "count in the published" in counted["accepted_flag_rule"]
    assert (counted["flags_accepted"], counted["units_with_accepted_flags"],
            counted["answers_in_units_with_accepted_flags"]) == (0, 0, 0)
    assert f"below {MIN_PLAUSIBLE_SECONDS_PER_QUESTION:g}" in counted["speeder_rule"]
    assert SECONDS_PER_QUESTION_RULE in counted["speeder_rule"] and "count in the published" in counted["speeder_rule"]
    assert counted["speeder_threshold_seconds_per_question"] == MIN_PLAUSIBLE_SECONDS_PER_QUESTION
    assert (counted["tasks_speeding"], counted["answers_speeding"], counted["tasks_untimed"]) == (0, 0, 0)
    assert score.READING_RULES["without_units_with_accepted_flags"].endswith(ACCEPTED_FLAG_SCOPE)
    assert score.READING_RULES["without_speeding_tasks"].endswith(counted["speeder_rule"])
