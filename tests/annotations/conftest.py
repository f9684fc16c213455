"""Fixtures of the questionnaire tests."""
from __future__ import annotations

import pytest

from tests.annotations.factories import ParticipantFactory, make_study

# The local Prolific server, for the questionnaire tests that need a platform's sync (held work).
from tests.annotations.platforms.conftest import prolific, prolific_server  # noqa: F401


@pytest.fixture
def utility_study(db):
    return make_study()


@pytest.fixture
def participant(db):
    return ParticipantFactory()
