"""The import row cap (issue 20 item 12): a 53 MB CSV of 2.5 million rows, under the byte limit,
grew a web worker to 2.3 GB. Records are counted while they are parsed; the one after
``RL_IMPORT_MAX_ROWS`` refuses the file with its line, before any more rows are made, and nothing
is written."""
from __future__ import annotations

import json
import tracemalloc

import pytest

from studies.models import Dataset, ImportRecord, Item
from studies.services.importers import (
    ImportValidationError,
    import_run,
    items_import_strategyqa,
)
from studies.services.importers.reading import parse_csv, read_import_file

pytestmark = pytest.mark.django_db


def items_csv(tmp_path, n: int, *, bad_after: int | None = None):
    path = tmp_path / "items.csv"
    with open(path, "w") as fh:
        fh.write("id,question,answer\n")
        for i in range(n):
            answer = "maybe" if bad_after is not None and i >= bad_after else "yes"
            fh.write(f"q{i},Is item {i} true?,{answer}\n")
    return path


def refusal(exc: ImportValidationError) -> str:
    assert len(exc.errors) == 1, exc.lines()[:5]
    return str(exc.errors[0])


def test_a_csv_over_the_cap_is_refused_at_the_first_row_over_it_and_nothing_is_written(tmp_path, settings):
    settings.RL_IMPORT_MAX_ROWS = 1000
    # rows past the cap are bad: they are never parsed, so only the cap is reported
    path = items_csv(tmp_path, 5000, bad_after=1000)
    with pytest.raises(ImportValidationError) as err:
        import_run(kind="items", file=path, dataset_name="big", task_format="yes_no")
    said = refusal(err.value)
    assert said.startswith("line 1002: the file has more than 1,000 records, the import limit (RL_IMPORT_MAX_ROWS)")
    assert "split it into files of at most 1,000 records" in said
    assert not Dataset.objects.exists() and not Item.objects.exists() and not ImportRecord.objects.exists()


def test_a_file_at_the_cap_imports(tmp_path, settings):
    settings.RL_IMPORT_MAX_ROWS = 300
    record = import_run(kind="items", file=items_csv(tmp_path, 300), dataset_name="big", task_format="yes_no")
    assert record.created == 300 and Item.objects.count() == 300


def test_json_lines_over_the_cap_are_refused_with_the_line(tmp_path, settings):
    settings.RL_IMPORT_MAX_ROWS = 10
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Is {i} odd?", "answer": "no"}) + "\n\n"
                            for i in range(50)))
    with pytest.raises(ImportValidationError) as err:
        import_run(kind="items", file=path, dataset_name="big", task_format="yes_no")
    assert refusal(err.value).startswith("line 21: the file has more than 10 records")  # blank lines not counted
    assert not Item.objects.exists()


def test_a_json_list_over_the_cap_is_refused_with_its_line_and_column(sqa_test_file, settings):
    settings.RL_IMPORT_MAX_ROWS = 100
    with pytest.raises(ImportValidationError) as err:
        items_import_strategyqa(file=sqa_test_file)
    said = refusal(err.value)
    assert said.startswith("line ") and ", column " in said and "more than 100 records" in said
    assert not Item.objects.exists()


def test_the_outcomes_import_has_the_same_cap(imported_study_file, settings):
    from scoring.services import outcomes_import

    study, path = imported_study_file
    settings.RL_IMPORT_MAX_ROWS = 50
    with pytest.raises(ImportValidationError, match="more than 50 records"):
        outcomes_import(study=study, file=path, user=None)


@pytest.fixture
def imported_study_file(sqa_test_imported, strategyqa_dir):
    from studies.models import Study

    study = Study.objects.create(name="released", dataset=Dataset.objects.get(name="StrategyQA"), split="test")
    return study, strategyqa_dir / "rationale_utility.json"


def test_parsing_stops_at_the_cap_so_memory_stays_bounded(tmp_path, settings):
    """200,000 rows (4.6 MB) with a cap of 1,000: the parse holds the file's text and at most
    1,000 rows, not 200,000 of them (about 90 MB of row dicts without the cap)."""
    settings.RL_IMPORT_MAX_ROWS = 1000
    f = read_import_file(items_csv(tmp_path, 200_000))
    tracemalloc.start()
    try:
        with pytest.raises(ImportValidationError, match="more than 1,000 records"):
            parse_csv(f)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * f.size + 2_000_000, (peak, f.size)


def test_an_openbookqa_object_over_the_cap_is_refused_for_the_cap(openbookqa_dir, settings):
    """The one-object OpenBookQA form falls back to JSON lines when it is not one JSON object; a
    file over the cap is refused for the cap, not retried as lines."""
    from studies.services.importers import items_import_openbookqa

    settings.RL_IMPORT_MAX_ROWS = 100
    with pytest.raises(ImportValidationError) as err:
        items_import_openbookqa(file=openbookqa_dir / "obqa_dev.jsonl")
    assert "more than 100 records, the import limit (RL_IMPORT_MAX_ROWS)" in refusal(err.value)
    assert not Item.objects.exists()


def test_the_first_thousand_problems_are_listed_and_the_rest_counted(tmp_path, admin_client):
    """A file may have a problem on each of its records: the answer lists the first 1,000 with
    their line, field and reason and counts the others, instead of carrying every one of them."""
    path = items_csv(tmp_path, 1500, bad_after=0)  # every answer is "maybe"
    with pytest.raises(ImportValidationError) as err:
        import_run(kind="items", file=path, dataset_name="bad", task_format="yes_no")
    exc = err.value
    assert len(exc.errors) == 1000 and exc.unlisted == 500
    assert exc.errors[-1].line == 1001 and exc.errors[-1].field == "answer"
    assert "nothing imported: 1,500 problems (the first 1,000 are listed)" in exc.summary()

    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.urls import reverse

    page = admin_client.post(reverse("admin:studies_import_data"), {
        "kind": "items", "file": SimpleUploadedFile("bad.csv", path.read_bytes()), "dataset": "bad",
        "task_format": "yes_no"}).content.decode()
    assert "1000 problems" in page and "The file has 500 more problems after these, not listed." in page
    assert not Item.objects.exists()
