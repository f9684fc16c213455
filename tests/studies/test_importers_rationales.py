import json
from collections import Counter

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from studies.models import ImportRecord, Rationale, RationaleSource, StudyShare
from studies.services.importers import ImportValidationError, items_import_strategyqa, rationales_import
from studies.services.sharing import study_share
from tests.factories import DatasetFactory, ItemFactory, MultipleChoiceDatasetFactory
from tests.studies.helpers import IMPORT, researcher, write_jsonl

pytestmark = pytest.mark.django_db


@pytest.fixture
def utility_file(strategyqa_dir):
    return strategyqa_dir / "rationale_utility.json"


def test_rationale_utility_imports_as_three_sources(sqa_test_imported, utility_file):
    record = rationales_import(file=utility_file, dataset_name="StrategyQA", split="test")
    rows = [json.loads(line) for line in utility_file.read_text().splitlines() if line.strip()]
    per_source = Counter(r["rationale_source"] for r in rows)
    assert record.created == len(rows) == 1374
    assert set(per_source) == {"t5large", "t53b", "gpt3"}
    for name in per_source:
        source = RationaleSource.objects.get(name=name)
        assert source.kind == RationaleSource.Kind.IMPORTED
        assert source.rationales.count() == 458
        assert source.rationales.values("item").distinct().count() == 458
    # No predicted label in the release: nothing is claimed about correctness.
    assert not Rationale.objects.exclude(predicted_answer="").exists()
    assert not Rationale.objects.filter(prediction_correct__isnull=False).exists()
    first = rows[0]
    r = Rationale.objects.get(source__name=first["rationale_source"], item__question=first["question"])
    assert r.text == first["rationale"]
    assert r.generation_info["extra"]["rationale_utility"] == first["rationale_utility"]


def test_reimport_changes_nothing(sqa_test_imported, utility_file):
    rationales_import(file=utility_file, dataset_name="StrategyQA", split="test")
    stamps = list(Rationale.objects.order_by("id").values_list("id", "updated_at"))
    again = rationales_import(file=utility_file, dataset_name="StrategyQA", split="test")
    assert (again.created, again.updated, again.unchanged) == (0, 0, 1374)
    assert list(Rationale.objects.order_by("id").values_list("id", "updated_at")) == stamps


def test_question_in_two_splits_needs_a_split(strategyqa_dir, sqa_test_imported, utility_file):
    items_import_strategyqa(file=strategyqa_dir / "strategyqa_processed_train.json")
    with pytest.raises(ImportValidationError) as exc:
        rationales_import(file=utility_file, dataset_name="StrategyQA")
    assert exc.value.errors
    assert all("matches several items" in e.reason and "choose a split" in e.reason for e in exc.value.errors)
    assert Rationale.objects.count() == 0


def test_unknown_question_and_other_bad_rows_reported(tmp_path, sqa_test_imported, utility_file):
    rows = [json.loads(line) for line in utility_file.read_text().splitlines()[:6]]
    rows[1]["question"] = "Is this question in the dataset at all?"
    rows[2]["rationale"] = "  "
    rows[3]["rationale_source"] = ""
    rows[4]["ground_truth_label"] = not rows[4]["ground_truth_label"]
    path = write_jsonl(tmp_path / "broken.jsonl", rows)
    with pytest.raises(ImportValidationError) as exc:
        rationales_import(file=path, dataset_name="StrategyQA", split="test")
    found = {(e.line, e.field) for e in exc.value.errors}
    assert found == {(2, "question"), (3, "rationale"), (4, "rationale_source"), (5, "ground_truth_label")}
    unknown = next(e for e in exc.value.errors if e.line == 2)
    assert "no item of dataset 'StrategyQA', split 'test' has the question" in unknown.reason
    assert Rationale.objects.count() == 0 and RationaleSource.objects.count() == 0


def test_unknown_dataset(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [{"item_id": "x", "source": "s", "rationale": "r"}])
    with pytest.raises(ImportValidationError, match="unknown dataset 'Nope'"):
        rationales_import(file=path, dataset_name="Nope")


def test_csv_by_item_id_with_predictions_sets_correctness(tmp_path):
    dataset = DatasetFactory(name="YN")
    ItemFactory(dataset=dataset, external_id="i1", gold_answer="yes")
    ItemFactory(dataset=dataset, external_id="i2", gold_answer="no")
    path = tmp_path / "model.csv"
    path.write_text("item_id,rationale,predicted_answer\ni1,Because so.,True\ni2,Because not.,yes\n")
    rationales_import(file=path, dataset_name="YN", source_name="my-model")
    r1, r2 = Rationale.objects.order_by("item__external_id")
    assert (r1.predicted_answer, r1.prediction_correct) == ("yes", True)
    assert (r2.predicted_answer, r2.prediction_correct) == ("yes", False)
    assert r1.source.name == "my-model"


def test_multiple_choice_prediction_labels(tmp_path):
    dataset = MultipleChoiceDatasetFactory(name="MCX")
    ItemFactory(dataset=dataset, external_id="m1", gold_answer="c", choices=[
        {"label": x, "text": x.upper()} for x in "abcd"])
    ItemFactory(dataset=dataset, external_id="m2", gold_answer="a", choices=[
        {"label": x, "text": x.upper()} for x in "abcd"])
    rows = [{"item_id": "m1", "source": "s", "rationale": "r", "predicted_answer": "(c)"},
            {"item_id": "m2", "source": "s", "rationale": "r", "predicted_answer": "e"}]
    with pytest.raises(ImportValidationError) as exc:
        rationales_import(file=write_jsonl(tmp_path / "p.jsonl", rows), dataset_name="MCX")
    (error,) = exc.value.errors
    assert (error.line, error.field) == (2, "predicted_answer")
    assert "'e' is not one of a, b, c, d" in error.reason


def test_identical_duplicates_merge_but_conflicts_are_errors(tmp_path):
    dataset = DatasetFactory(name="YN2")
    ItemFactory(dataset=dataset, external_id="i1")
    row = {"item_id": "i1", "source": "s", "rationale": "Same."}
    record = rationales_import(file=write_jsonl(tmp_path / "a.jsonl", [row, row]), dataset_name="YN2")
    assert record.created == 1 and record.summary["identical_duplicates_merged"] == 1
    with pytest.raises(ImportValidationError) as exc:
        rationales_import(file=write_jsonl(tmp_path / "b.jsonl", [row, dict(row, rationale="Other.")]),
                          dataset_name="YN2")
    assert exc.value.errors[0].line == 2 and "line 1" in exc.value.errors[0].reason


def test_command(sqa_test_imported, utility_file, capsys):
    call_command("import_rationales", str(utility_file), "--dataset", "StrategyQA", "--split", "test")
    out = capsys.readouterr().out
    assert "1374 created" in out and '"gpt3": 458' in out
    with pytest.raises(CommandError, match="unknown dataset"):
        call_command("import_rationales", str(utility_file), "--dataset", "Missing")


def test_every_table_importer_names_missing_columns_alike(tmp_path):
    """One column-resolution step (importers.rows.resolve_columns) behind the table importers:
    a column the user names that the file lacks, or a role no column fills, is said the same way
    by the rationales and items importers (and outcomes), with the file's columns, before any row."""
    from studies.services.importers import ItemColumns, RationaleColumns, items_import_table

    dataset = DatasetFactory(name="YN")
    ItemFactory(dataset=dataset, external_id="i1", gold_answer="yes")
    path = tmp_path / "t.csv"
    path.write_text("item_id,text,label\ni1,Because so.,yes\n")
    with pytest.raises(ImportValidationError) as rationales:
        rationales_import(file=path, dataset_name="YN", source_name="m",
                          columns=RationaleColumns(rationale="explanation_text"))
    with pytest.raises(ImportValidationError) as items:
        items_import_table(file=path, dataset_name="YN", columns=ItemColumns(id="item_id", question="question_text",
                                                                              answer="label"))
    assert rationales.value.errors[0].reason == (
        "the file has no column(s) 'explanation_text'; its columns are 'item_id', 'label', 'text'")
    assert items.value.errors[0].reason == (
        "the file has no column(s) 'question_text'; its columns are 'item_id', 'label', 'text': map them with the "
        "column options")
    path.write_text("label,text\nyes,Because so.\n")
    with pytest.raises(ImportValidationError) as lacking:
        rationales_import(file=path, dataset_name="YN", source_name="m")
    assert lacking.value.errors[0].reason == (
        "the file lacks an item id or a question column; its columns are 'label', 'text'")


# A view share reads the study; it does not let its reader write rationales into the owner's
# dataset or under the owner's source.
def _rationales_refusal(path, *, user, dataset_name: str, **options) -> ImportValidationError:
    with pytest.raises(ImportValidationError) as refused:
        rationales_import(file=path, dataset_name=dataset_name, user=user, **options)
    return refused.value


def _olgas_rationale_unchanged(olgas) -> None:
    olgas.rationale.refresh_from_db()
    assert olgas.rationale.text == "Olga's train rationale."
    assert not ImportRecord.objects.exists()


def test_a_view_share_reader_may_not_import_rationales_into_the_owners_dataset(olgas, tmp_path):
    rex = researcher("rex", IMPORT)
    study_share(study=olgas.study, user=olgas.olga, with_user=rex, level=StudyShare.Level.VIEW)
    path = tmp_path / "rex.csv"
    path.write_text(f"item_id,source,rationale\ntrain-0,{olgas.source.name},Rex's text.\n")

    said = {name: str(_rationales_refusal(path, user=rex, dataset_name=name)).replace(name, "NAME")
            for name in (olgas.dataset.name, "no-such-ds")}

    # Answered as a missing dataset: the same words, and no name he may not import into suggested.
    assert said[olgas.dataset.name] == said["no-such-ds"]
    assert "unknown dataset 'NAME' (known: none you may see)" in said["no-such-ds"]
    _olgas_rationale_unchanged(olgas)


def test_a_view_share_readers_rationales_under_the_owners_source_are_refused_as_a_taken_name(olgas, tmp_path):
    # Rex reads every dataset (studies.view_dataset), so the dataset is his to import into; Olga's
    # source he reads only through the view share, so it is answered as a source he may not see.
    rex = researcher("rex", IMPORT, "studies.view_dataset")
    study_share(study=olgas.study, user=olgas.olga, with_user=rex, level=StudyShare.Level.VIEW)
    RationaleSource.objects.create(name="olgas-unlisted-src", kind=RationaleSource.Kind.IMPORTED)  # in no study
    path = tmp_path / "rex.csv"

    said = {}
    for name in (olgas.source.name, "olgas-unlisted-src"):
        path.write_text(f"item_id,source,rationale\ntrain-0,{name},Rex's text.\n")
        refused = _rationales_refusal(path, user=rex, dataset_name=olgas.dataset.name)
        said[name] = [(e.line, e.field, e.reason.replace(name, "NAME")) for e in refused.errors]
        by_option = _rationales_refusal(path, user=rex, dataset_name=olgas.dataset.name, source_name=name)
        assert [e.reason.replace(name, "NAME") for e in by_option.errors] == [said[name][0][2]]

    assert said[olgas.source.name] == said["olgas-unlisted-src"]
    assert said[olgas.source.name] == [
        (2, "source", "the source name 'NAME' is taken by a source you may not see: choose another source name")]
    _olgas_rationale_unchanged(olgas)


def test_the_owner_and_a_change_share_holder_still_import_rationales(olgas, tmp_path):
    cora = researcher("cora", "studies.change_study", IMPORT)
    study_share(study=olgas.study, user=olgas.olga, with_user=cora, level=StudyShare.Level.CHANGE)
    path = tmp_path / "cora.csv"
    path.write_text(f"item_id,source,rationale\ntrain-0,{olgas.source.name},Cora's text.\n")

    record = rationales_import(file=path, dataset_name=olgas.dataset.name, user=cora)

    assert (record.created, record.updated, record.unchanged) == (0, 1, 0)
    olgas.rationale.refresh_from_db()
    assert olgas.rationale.text == "Cora's text."
    path.write_text(f"item_id,source,rationale\ntrain-0,{olgas.source.name},Olga's again.\n")
    record = rationales_import(file=path, dataset_name=olgas.dataset.name, user=olgas.olga)
    assert (record.created, record.updated, record.unchanged) == (0, 1, 0)
    olgas.rationale.refresh_from_db()
    assert olgas.rationale.text == "Olga's again."
