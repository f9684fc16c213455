"""Fixtures of the questionnaire tests."""
from __future__ import annotations

import pytest

from tests.annotations.factories import ParticipantFactory, add_qualification, make_study

# The local Prolific server, for the questionnaire tests that need a platform's sync (held work), and
# the stubbed MTurk client, for those that enter an MTurk study through one of its HITs.
from tests.annotations.platforms.conftest import aws_env, mturk, prolific, prolific_server  # noqa: F401


@pytest.fixture
def utility_study(db):
    return make_study()


@pytest.fixture
def participant(db):
    return ParticipantFactory()


@pytest.fixture
def qualified_study(db):
    """A plain-link study of 8 items, 2 units a task, quota 5, with a qualification test (pass mark 2)."""
    study = make_study(n_items=8, n_sources=1, units_per_task=2, quota=5)
    add_qualification(study)
    return study
