"""A study copied from a bundle gets an entry token and a completion code of its own
(``Study.entry_token``, ``Study.completion_code``): a bundle carries neither, so a copy never
answers the original's entry URL, on this installation or on another."""
from __future__ import annotations

import io
import zipfile

import pytest

from annotations.platforms import handoff
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from scoring.services.bundle import bundle_import, bundle_stream
from tests.annotations.factories import make_study

pytestmark = pytest.mark.django_db


def test_a_bundles_copy_has_its_own_entry_token_and_completion_code(client):
    study = make_study(name="token-origin")
    study_close(user=OPERATOR, study=study)
    data = b"".join(bundle_stream(study=study, user=None))

    copy = bundle_import(file=io.BytesIO(data), name="token-copy", owner=None)

    assert copy.entry_token != study.entry_token and copy.completion_code != study.completion_code
    assert handoff.study_for_token(study.entry_token) == study
    assert handoff.study_for_token(copy.entry_token) == copy
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        contents = b"".join(archive.read(name) for name in archive.namelist())
    assert study.entry_token.encode() not in contents
