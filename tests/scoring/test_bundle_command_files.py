"""``manage.py study_bundle`` and the files it is given: an export replaces FILE only once the new
bundle is whole, and an import of a path that cannot be read is a clear refusal naming it, as the
item importers' (``importers.reading``)."""
from __future__ import annotations

import io
import os

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from studies.models import Study
from tests.scoring.test_bundle import _worked_study

pytestmark = pytest.mark.django_db


def test_a_failed_export_leaves_the_bundle_there_before(tmp_path, monkeypatch):
    study = _worked_study()
    path = tmp_path / "study.zip"
    call_command("study_bundle", "export", str(study.pk), str(path), stdout=io.StringIO())
    good = path.read_bytes()

    def broken(*, study, user):
        yield good[:500]
        raise RuntimeError("the database went away")

    monkeypatch.setattr("scoring.management.commands.study_bundle.bundle_stream", broken)
    with pytest.raises(CommandError, match=f"Did not write {path}: the database went away"):
        call_command("study_bundle", "export", str(study.pk), str(path), stdout=io.StringIO())

    assert path.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.zip"]  # no temporary file left


def test_an_export_into_a_missing_folder_is_a_clear_error(tmp_path):
    study = _worked_study()
    path = tmp_path / "nowhere" / "study.zip"
    with pytest.raises(CommandError, match=f"Cannot write {path}"):
        call_command("study_bundle", "export", str(study.pk), str(path), stdout=io.StringIO())
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("case", ["missing", "folder", "not utf-8"])
def test_importing_a_path_that_cannot_be_read_is_refused_naming_it(tmp_path, case):
    if case == "missing":
        path, name, reason = tmp_path / "missing.zip", "missing.zip", f"file not found: {tmp_path / 'missing.zip'}"
    elif case == "folder":
        path = tmp_path / "a-folder.zip"
        path.mkdir()
        name, reason = "a-folder.zip", f"a folder, not a file: {path}"
    else:
        path = tmp_path / os.fsdecode(b"bundle-\xff.zip")
        path.write_bytes(b"PK")
        name, reason = "bundle-\ufffd.zip", "the file name is not valid Unicode"

    with pytest.raises(CommandError) as refused:
        call_command("study_bundle", "import", str(path), "--name", "never", stdout=io.StringIO())
    assert str(refused.value).startswith(f"{name}: nothing imported: file: {reason}")
    assert not Study.objects.filter(name="never").exists()
