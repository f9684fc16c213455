"""Fixtures of the questionnaire tests."""
from __future__ import annotations

import pytest

from tests.annotations.factories import ParticipantFactory, make_study


@pytest.fixture
def utility_study(db):
    return make_study()


@pytest.fixture
def participant(db):
    return ParticipantFactory()
