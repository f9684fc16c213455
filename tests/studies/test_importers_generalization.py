import json
import shlex
from collections import Counter
from datetime import datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from studies.models import GeneralizationQuestion, ImportRecord, StudyShare
from studies.services.generation.genu import genu_questions
from studies.services.importers import (
    ImportValidationError,
    generalization_questions_import,
    items_import_strategyqa,
    normalize_question,
)
from studies.services.sharing import study_share
from tests.studies.helpers import IMPORT, researcher, write_json

pytestmark = pytest.mark.django_db


def _expected(data):
    """Counts computed straight from the file: distinct (original, type, question) rows, identical
    repeats, and repeats with another answer."""
    seen: dict = {}
    identical = conflicting = 0
    for original, rows in data.items():
        for text, answer, qtype in rows:
            key = (normalize_question(original), qtype, text.strip())
            if key in seen:
                if seen[key] == answer:
                    identical += 1
                else:
                    conflicting += 1
                continue
            seen[key] = answer
    return seen, identical, conflicting


def test_real_test_file(strategyqa_dir, sqa_test_imported):
    path = strategyqa_dir / "generalisation_final_test.json"
    data = json.loads(path.read_text())
    seen, identical, conflicting = _expected(data)
    record = generalization_questions_import(file=path, dataset_name="StrategyQA")
    assert sum(len(v) for v in data.values()) == 2608 == record.summary["rows_in_file"]
    assert len(data) == 457 == record.summary["originals"]
    assert record.created == len(seen) == GeneralizationQuestion.objects.count()
    assert record.summary["identical_duplicates_merged"] == identical
    assert len(record.summary["conflicting_answers"]) == conflicting
    types = Counter(qtype for (_, qtype, _) in seen)
    for qtype, n in types.items():
        assert GeneralizationQuestion.objects.filter(qtype=qtype).count() == n
    answers = Counter(a for a in seen.values())
    assert GeneralizationQuestion.objects.filter(answer="yes").count() == answers["True"]
    assert GeneralizationQuestion.objects.filter(answer="no").count() == answers["False"]
    assert not GeneralizationQuestion.objects.exclude(validation_status="unvalidated").exists()
    flagged = GeneralizationQuestion.objects.filter(metadata__has_key="conflicting_answers")
    assert flagged.count() == conflicting


def test_reimport_changes_nothing(strategyqa_dir, sqa_test_imported):
    path = strategyqa_dir / "generalisation_final_test.json"
    first = generalization_questions_import(file=path, dataset_name="StrategyQA")
    again = generalization_questions_import(file=path, dataset_name="StrategyQA")
    assert (again.created, again.updated, again.unchanged) == (0, 0, first.created)


def test_dev_file_reports_every_non_boolean_answer(strategyqa_dir):
    items_import_strategyqa(file=strategyqa_dir / "strategyqa_processed_dev.json")
    path = strategyqa_dir / "generalisation_final_dev.json"
    data = json.loads(path.read_text())
    bad = [(o, i, r[1]) for o, rows in data.items() for i, r in enumerate(rows) if r[1] not in ("True", "False")]
    with pytest.raises(ImportValidationError) as exc:
        generalization_questions_import(file=path, dataset_name="StrategyQA")
    errors = exc.value.errors
    # The data README speaks of 16; the file holds len(bad) (15) such answers, each reported.
    assert len(errors) == len(bad) == 15
    assert all(e.field == "answer" and e.line == 1 and e.column for e in errors)
    text = path.read_text()
    for error, (original, index, answer) in zip(errors, bad, strict=True):
        assert repr(answer) in error.reason
        assert f"row {index + 1}" in error.record
        # the column points at the row [question, answer, type] itself
        assert text[error.column - 1:].startswith(json.dumps(data[original][index], ensure_ascii=False)[:20])
    assert GeneralizationQuestion.objects.count() == 0
    assert not ImportRecord.objects.filter(kind="generalization").exists()


def test_broken_rows_reported(tmp_path, sqa_test_imported, strategyqa_dir):
    data = json.loads((strategyqa_dir / "generalisation_final_test.json").read_text())
    originals = list(data)[:3]
    small = {o: data[o][:2] for o in originals}
    small[originals[0]][0] = ["", "True", "rephrase"]
    small[originals[1]][1] = [small[originals[1]][1][0], "True", "paraphrase"]
    small["Is this original question unknown?"] = [["Q?", "True", "similar"]]
    small[originals[2]][1] = "not a row"
    path = tmp_path / "generalisation_final_test.json"
    path.write_text(json.dumps(small, indent=2))
    with pytest.raises(ImportValidationError) as exc:
        generalization_questions_import(file=path, dataset_name="StrategyQA")
    fields = sorted(e.field for e in exc.value.errors)
    assert fields == ["", "original question", "question", "type"]
    assert all(e.line and e.line > 1 for e in exc.value.errors)
    assert GeneralizationQuestion.objects.count() == 0


def test_identical_duplicate_rows_merge(tmp_path, sqa_test_imported, strategyqa_dir):
    data = json.loads((strategyqa_dir / "generalisation_final_test.json").read_text())
    original = next(iter(data))
    row = data[original][0]
    path = write_json(tmp_path / "g_test.json", {original: [row, list(row)]})
    record = generalization_questions_import(file=path, dataset_name="StrategyQA", validation_status="valid")
    assert record.created == 1 and record.summary["identical_duplicates_merged"] == 1
    assert GeneralizationQuestion.objects.get().validation_status == "valid"


def test_command_lists_errors(strategyqa_dir):
    items_import_strategyqa(file=strategyqa_dir / "strategyqa_processed_dev.json")
    with pytest.raises(CommandError) as exc:
        call_command("import_generalization", str(strategyqa_dir / "generalisation_final_dev.json"))
    assert "15 problem(s)" in str(exc.value)
    assert "'Anna Magdalena Bach' is not True or False" in str(exc.value)


def _readme_commands(name: str) -> list[list[str]]:
    """The README's shell lines running ``manage.py <name>``, split like a shell would."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    return [shlex.split(line.split("manage.py", 1)[1]) for line in readme.splitlines()
            if f"manage.py {name} " in line and line.strip().startswith(".venv/bin/python")]


def test_readme_import_marks_the_released_questions_validated_with_their_provenance(strategyqa_dir, shared_data):
    """The README's first hour, as written: StrategyQA test items, then the released generalization
    questions. They are taken as the validated set (our reading of SPEC section 4), so Gen-U must be able to use them as they come in."""
    (items_cmd,) = _readme_commands("import_strategyqa")
    (questions_cmd,) = _readme_commands("import_generalization")
    here = str(shared_data)

    def run(args):
        call_command(*[a.replace("../shared/data", here) for a in args], stdout=StringIO())

    run(items_cmd)
    run(questions_cmd)
    data = json.loads((strategyqa_dir / "generalisation_final_test.json").read_text())
    seen, _, _ = _expected(data)
    record = ImportRecord.objects.get(kind="generalization")
    assert GeneralizationQuestion.objects.count() == len(seen)
    assert not GeneralizationQuestion.objects.exclude(validation_status="valid").exists()
    assert record.summary["validation_status_set"] == "valid"
    provenance = GeneralizationQuestion.objects.first().metadata["validation"]
    assert provenance["status"] == "valid" and provenance["set_by"] == "import"
    assert provenance["file"] == "generalisation_final_test.json" and provenance["sha256"] == record.sha256
    assert abs(datetime.fromisoformat(provenance["at"]) - record.imported_at) < timedelta(minutes=5)
    # Gen-U's question filter (validated questions only, the paper's) takes every one of them.
    item_ids = GeneralizationQuestion.objects.values_list("item_id", flat=True)
    assert genu_questions(item_ids=item_ids).count() == len(seen)


def test_a_view_share_reader_may_not_add_questions_to_the_owners_dataset(olgas, tmp_path):
    rex = researcher("rex", IMPORT)
    study_share(study=olgas.study, user=olgas.olga, with_user=rex, level=StudyShare.Level.VIEW)
    path = write_json(tmp_path / "generalisation_final_train.json",
                      {"Olga's train question?": [["Planted by rex?", "True", "rephrase"]]})

    said = {}
    for name in (olgas.dataset.name, "no-such-ds"):
        with pytest.raises(ImportValidationError) as refused:
            generalization_questions_import(file=path, dataset_name=name, user=rex)
        said[name] = str(refused.value).replace(name, "NAME")

    assert said[olgas.dataset.name] == said["no-such-ds"]  # answered as a missing dataset
    assert not GeneralizationQuestion.objects.filter(text="Planted by rex?").exists()
    assert not ImportRecord.objects.exists()
    # The owner adds them as before.
    record = generalization_questions_import(file=path, dataset_name=olgas.dataset.name, user=olgas.olga)
    assert record.created == 1
