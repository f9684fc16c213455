"""Where a value comes from is said as SPEC says it: a report heading names the SPEC section, not a
paper table SPEC never numbers; gold is shown for comparison, not as Figure 4's reference; a figure
only issue 21 quotes says so (the project's rule: never call a value the paper's unless SPEC says
the paper says it)."""
from __future__ import annotations

import re

import pytest

from scoring import plots
from scoring.reports import sections
from scoring.services import score
from scoring.similarity import MINILM_NAME, SimilarityModel, paper_correlation_ratio

TABLE_NUMBER = re.compile(r"\bTables? \d")


def test_report_headings_name_spec_sections_not_paper_tables():
    titles = [sections.utility_section({}).title,
              sections.theils_u_section({}, None, both_directions=False).title,
              sections.agreement_section({}).title]
    assert titles == ["Utility per source (SPEC section 2)", "Theil's U: what predicts utility (SPEC section 3)",
                      "Annotator agreement before and after the rationale (SPEC section 2)"]
    assert not TABLE_NUMBER.search(sections.__doc__ + " ".join(titles)) and "paper's order" not in sections.__doc__


def test_recorded_texts_name_no_paper_table_and_say_what_is_our_reading():
    for text in score.EARLY_STOPPING_FEWER.values():
        assert not TABLE_NUMBER.search(text) and "agreement (SPEC section 2)" in text
    assert not TABLE_NUMBER.search(score.__doc__)
    assert "our reading of SPEC section 7's \"their interactions\"" in score.PROPERTIES_INTERACTIONS_RULE


def test_quoted_eta_column_says_where_it_is_stated_and_how_it_is_attached():
    minilm = SimilarityModel(name=MINILM_NAME, path="/m", num_layers=6)
    results = {"correlation_ratio_utility_similarity": {"gpt3": 0.177, "all": 0.114},
               "similarity": {**minilm.as_json(), "paper": paper_correlation_ratio("StrategyQA", minilm)}}
    section = sections.similarity_section(results, None)
    labels = {column.key: column.label for column in section.tables[0].columns}
    assert labels["paper_eta"] == "Quoted η (overall: SPEC section 3; per source: issue 21)"
    assert "Published" not in " ".join(labels.values())
    assert any("a source named exactly gpt3, t53b or t5large in a dataset named StrategyQA (any case), whatever its "
               "split" in note for note in section.notes)


def test_gold_is_drawn_for_comparison_not_as_figure_4s_reference():
    row = {"n": 4, "accuracy_delta": 0.25, "accuracy_delta_ci": [0.0, 0.5]}
    results = {"generalization": {"by_type": {"rephrase": row}, "by_source": {"gold-src": row, "lm": row}}}
    svg = plots.generalization_figure(results, "svg", gold=("gold-src",)).decode()
    assert "gold (for comparison)" in svg and "gold rationales" not in svg
    assert "reference" not in plots.generalization_figure.__doc__


@pytest.mark.django_db
def test_a_study_without_gold_is_told_there_is_nothing_to_compare_with():
    row = {"n": 4, "accuracy_before": 0.5, "accuracy_after": 0.75, "accuracy_delta": 0.25,
           "accuracy_delta_ci": [0.0, 0.5]}
    section = sections.generalization_section({"generalization": {"by_type": {"rephrase": row},
                                                                  "by_source": {"lm": row}}})
    table = next(t for t in section.tables if t.name == "generalization_by_source")
    assert "our addition: SPEC section 4 lists gold as one of the sources" in table.title
    assert not any("reference" in note for note in section.notes)
    assert any("no gold row to compare with" in note for note in section.notes)
