import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from studies.models import Item
from studies.services.importers import ImportValidationError, items_import_strategyqa, normalize_question
from studies.services.importers.reading import parse_json_document, read_import_file
from studies.services.importers.values import split_from_name

pytestmark = pytest.mark.django_db


def test_file_over_the_limit_is_refused_before_reading(tmp_path, settings, sqa_test_file):
    settings.RL_MAX_IMPORT_BYTES = 1000
    with pytest.raises(ImportValidationError) as exc:
        items_import_strategyqa(file=sqa_test_file)
    message = str(exc.value)
    assert "over the import limit" in message and "RL_MAX_IMPORT_BYTES" in message
    assert Item.objects.count() == 0


def test_uploaded_file_over_the_limit_is_refused(settings):
    settings.RL_MAX_IMPORT_BYTES = 10
    upload = SimpleUploadedFile("big.json", b"[" + b" " * 100 + b"]")
    with pytest.raises(ImportValidationError, match="over the import limit"):
        read_import_file(upload)


class Unreadable(io.BytesIO):
    def read(self, *args):  # the limit must be checked from the size, never by reading
        raise AssertionError("read before the size check")


def test_size_is_checked_without_reading(settings):
    settings.RL_MAX_IMPORT_BYTES = 10
    with pytest.raises(ImportValidationError):
        read_import_file(Unreadable(b"x" * 50), filename="x.json")


def test_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(b'[\n{"qid": "\xff"}]')
    with pytest.raises(ImportValidationError) as exc:
        items_import_strategyqa(file=path)
    assert exc.value.errors[0].line == 2
    assert "UTF-8" in exc.value.errors[0].reason


def test_empty_file(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("  \n")
    with pytest.raises(ImportValidationError, match="empty"):
        items_import_strategyqa(file=path)


def test_missing_file():
    with pytest.raises(ImportValidationError, match="file not found"):
        items_import_strategyqa(file="/nonexistent/file.json")


def test_locator_positions_match_text():
    from studies.services.importers.reading import ImportFile

    text = '{\n  "a": [[1, 2], [3]],\n  "b": []\n}'
    doc = parse_json_document(ImportFile("x", text, "", len(text)), depth=2)
    assert doc.data == {"a": [[1, 2], [3]], "b": []}
    line2 = text.splitlines()[1]
    assert doc.where("a") == (2, line2.index("[[") + 1)
    assert doc.where("a", 0) == (2, line2.index("[1") + 1)
    assert doc.where("a", 1) == (2, line2.index("[3") + 1)
    assert doc.where("b") == (3, text.splitlines()[2].index("[]") + 1)


@pytest.mark.parametrize("a, b", [
    ("Does the Red Sea have biblical significance? ", "Does the Red Sea have biblical significance?"),
    ("Is the Louvre's pyramid known for being unbreakable? ,", "Is the Louvre's pyramid known for being unbreakable?"),
    ('Could "Alice\\\'s Adventures" join?', "Could \"Alice's Adventures\" join?"),
    ("Were  they devoid of it?'", "Were they devoid of it?"),
])
def test_question_normalisation_ignores_noise(a, b):
    assert normalize_question(a) == normalize_question(b)


def test_question_normalisation_keeps_words():
    assert normalize_question("Is a cat a mammal?") != normalize_question("Is a bat a mammal?")


@pytest.mark.parametrize("name, split", [
    ("strategyqa_processed_test.json", "test"), ("obqa_dev.jsonl", "dev"), ("train_complete.jsonl", "train"),
    ("generalisation_final_train.json", "train"), ("questions.json", None),
])
def test_split_from_name(name, split):
    assert split_from_name(name) == split
