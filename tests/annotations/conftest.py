"""Fixtures of the questionnaire tests."""
from __future__ import annotations

import pytest

from tests.annotations.factories import ParticipantFactory, make_study

# The local Prolific server, for the questionnaire tests that need a platform's sync (held work), and
# the stubbed MTurk client, for those that enter an MTurk study through one of its HITs.
from tests.annotations.platforms.conftest import aws_env, mturk, prolific, prolific_server  # noqa: F401


@pytest.fixture
def utility_study(db):
    return make_study()


@pytest.fixture
def participant(db):
    return ParticipantFactory()
