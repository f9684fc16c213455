"""Whether a run computes similarity (BERTScore) is the caller's choice, or, when it makes none (the
web page's and Celery's runs: ``study_score(study=...)``), the setting ``RL_SCORING_SIMILARITY``'s.
The results record which (``similarity_requested``: {value, from}), and where the setting turned it
off the warning and the report's similarity section name the setting, not only "not requested"."""
from __future__ import annotations

import pytest

from scoring.reports.sections import similarity_section
from scoring.services import study_score
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def _study():
    study = open_utility_study(name="sim-asked", n_items=2, n_sources=1, quota=1, gold="yes")
    work(study, "P" + "0" * 23)
    return study


def test_the_setting_that_turned_similarity_off_is_named(settings):
    settings.RL_SCORING_SIMILARITY = False
    run = study_score(study=_study())  # as the web page's and Celery's runs call it
    assert run.status == "done", run.error
    warning = next(w for w in run.results["warnings"] if w.startswith("Similarity (BERTScore) was not requested"))
    assert "RL_SCORING_SIMILARITY" in warning, warning
    assert "RL_SCORING_SIMILARITY" in similarity_section(run.results, None).absent
    assert run.results["similarity_requested"] == {"value": False, "from": "RL_SCORING_SIMILARITY"}


def test_a_callers_choice_is_recorded_as_the_callers(settings):
    settings.RL_SCORING_SIMILARITY = True  # the caller's False wins, and the results say whose it was
    run = study_score(study=_study(), similarity=False)
    assert run.status == "done", run.error
    assert run.results["similarity_requested"] == {"value": False, "from": "caller"}
    warning = next(w for w in run.results["warnings"] if w.startswith("Similarity (BERTScore) was not requested"))
    assert "RL_SCORING_SIMILARITY" not in warning and "caller" in warning
