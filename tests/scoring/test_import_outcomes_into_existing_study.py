"""``import_outcomes --study NAME`` (``outcomes_study_create``) uses an existing study of that name
only when it is an earlier import of outcomes: a study run here (a draft of any kind) would be
made an imported outcome and closed for good, so it is refused on the field ``study`` and nothing
is written."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from scoring.models import UnitScore
from studies.models import ImportRecord, RationaleSource, Study
from tests.factories import StudyFactory


@pytest.fixture
def three_gpt3_rows(utility_file, tmp_path):
    rows = [line for line in utility_file.read_text().splitlines() if '"gpt3"' in line][:3]
    assert len(rows) == 3
    path = tmp_path / "3gpt3rows.json"
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("kind", [Study.Kind.GENERALIZATION, Study.Kind.UTILITY])
def test_a_draft_run_here_is_refused_and_left_as_it_was(strategyqa_test_items, three_gpt3_rows, kind):
    bob = get_user_model().objects.create_user("bob", password="pw", is_staff=True)
    draft = StudyFactory(name="Bob gen", kind=kind, owner=bob, dataset=strategyqa_test_items)
    with pytest.raises(CommandError, match=rf"field 'study': study 'Bob gen' exists already as a {kind} study run "
                                           r"here \(draft\); outcomes are imported only into a utility study made by "
                                           r"an earlier import of outcomes"):
        call_command("import_outcomes", str(three_gpt3_rows), "--dataset", "StrategyQA", "--study", "Bob gen")
    draft.refresh_from_db()
    assert (draft.kind, draft.status, draft.is_imported_outcome) == (kind, Study.Status.DRAFT, False)
    assert not draft.sources.exists() and not draft.items.exists()
    assert not RationaleSource.objects.filter(name="gpt3").exists()
    assert not UnitScore.objects.exists() and not ImportRecord.objects.filter(kind="outcomes").exists()


def test_an_earlier_import_of_outcomes_is_imported_into_again(strategyqa_test_items, three_gpt3_rows):
    def run():
        call_command("import_outcomes", str(three_gpt3_rows), "--dataset", "StrategyQA", "--study", "Released")

    run()
    study = Study.objects.get(name="Released")
    assert (study.kind, study.status, study.is_imported_outcome) == (Study.Kind.UTILITY, Study.Status.CLOSED, True)
    run()
    assert UnitScore.objects.filter(study=study).count() == 3
