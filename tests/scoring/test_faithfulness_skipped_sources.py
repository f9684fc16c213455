"""A study source without highlights has no faithfulness (``score._faithfulness`` passes it by):
the results name it in ``faithfulness.skipped_sources``, with a warning, so the published
sufficiency and comprehensiveness say which of the study's sources they leave out. Before, such a
source was dropped from the figures with no mention."""
from __future__ import annotations

import pytest

from scoring.services import study_score
from studies.models import Study
from tests.cockpit.conftest import staff_client
from tests.studies.test_source_fixed_fields import faithfulness_study

pytestmark = pytest.mark.django_db


def test_a_study_source_without_highlights_is_named_as_skipped_with_a_warning(tmp_path):
    alice, _ = staff_client("alice")
    study = faithfulness_study(tmp_path, owner=alice, plain=("plain-lm",))

    run = study_score(study=study, similarity=False)

    faith = run.results["faithfulness"]
    assert sorted(faith["per_source"]) == ["bad-lm", "good-lm"]
    assert faith["skipped_sources"] == ["plain-lm"]
    assert run.results["test_sufficiency"] == pytest.approx(-0.1)  # over good-lm and bad-lm only
    assert any(w.startswith("Faithfulness leaves out plain-lm: the study lists them but they have no highlights")
               for w in run.warnings), run.warnings


def test_a_study_whose_sources_all_have_highlights_skips_none(tmp_path):
    alice, _ = staff_client("alice")
    study = faithfulness_study(tmp_path, owner=alice, status=Study.Status.CLOSED)

    run = study_score(study=study, similarity=False)

    assert run.results["faithfulness"]["skipped_sources"] == []
    assert not any("Faithfulness leaves out" in w for w in run.warnings)
