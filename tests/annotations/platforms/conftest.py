"""Fixtures of the crowd-platform tests: an MTurk client wrapped by botocore's Stubber (every
request is checked against the real MTurk service model and nothing reaches AWS), a local
Prolific API server, and studies with real units and assignments built by the questionnaire's
services."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import boto3
import pytest
from botocore.stub import Stubber
from django.utils import timezone

from annotations.models import Assignment, Participant
from annotations.platforms import use_platform
from annotations.platforms.mturk import SANDBOX_ENDPOINT, MTurkPlatform
from annotations.platforms.prolific import ProlificPlatform
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from annotations.services.steps import steps_for
from studies.services.studies import study_update
from tests.annotations.factories import make_study
from tests.annotations.platforms.prolific_server import FakeProlific

PUBLIC_URL = "https://rl.example.org"
PROLIFIC_TOKEN = "test-prolific-token-7f3a9c"


@pytest.fixture(autouse=True)
def _public_url(settings):
    settings.RL_PUBLIC_URL = PUBLIC_URL


@pytest.fixture
def aws_env(monkeypatch):
    """Fake credentials and no config files: a request that escaped the Stubber would fail to
    authenticate rather than reach a real account."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def mturk(aws_env, settings):
    """(platform, stubber): the real MTurkPlatform on a stubbed boto3 client, installed as the
    "mturk" platform for the services. Every test must consume exactly the responses it queued.
    These test the integration itself, so MTurk is treated as open here (``RL_MTURK_CLOSED_ON``
    empty, as for an operator whose endpoint still answers); the closure has its own tests
    (test_mturk_closed.py)."""
    settings.RL_MTURK_CLOSED_ON = ""
    client = boto3.client("mturk", region_name="us-east-1", endpoint_url=SANDBOX_ENDPOINT)
    stubber = Stubber(client)
    stubber.activate()
    platform = MTurkPlatform(client=client, endpoint=SANDBOX_ENDPOINT)
    with use_platform("mturk", platform):
        yield platform, stubber
    stubber.deactivate()


@pytest.fixture
def prolific_server():
    server = FakeProlific(token=PROLIFIC_TOKEN)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def prolific(prolific_server, settings):
    settings.RL_PROLIFIC_TOKEN = PROLIFIC_TOKEN
    settings.RL_PROLIFIC_API_URL = prolific_server.api_url
    platform = ProlificPlatform()
    with use_platform("prolific", platform):
        yield platform, prolific_server


@pytest.fixture
def study(db):
    """4 items x 2 sources x 5 annotators = 40 answers in tasks of 3 units: 14 tasks."""
    return make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, status="draft", reward=Decimal("2.00"),
                      estimated_minutes_per_task=Decimal("6.0"))


def on_platform(study, platform: str):
    """``study``, a draft, set to run on ``platform`` through the study page's service: a study is
    published only on its own platform (``common.publish_platform``)."""
    return study_update(study=study, user=None, platform=platform)


def publish_on(study, platform: str, **kwargs):
    """``study`` published on ``platform`` as the operator: a draft on another platform is set to
    run on it first (``on_platform``)."""
    if study.platform != platform:
        on_platform(study, platform)
    return study_publish(user=OPERATOR, study=study, platform_name=platform, **kwargs)


def open_study(study):
    study_open(study=study, user=OPERATOR)  # the one way to open: builds the units
    return study


def start_assignment(study, *, platform: str, worker_id: str, assignment_id: str, task_id: str = "") -> Assignment:
    participant, _ = Participant.objects.get_or_create(platform=platform, external_id=worker_id)
    return assignment_start(study=study, participant=participant, platform_assignment_id=assignment_id,
                            platform_task_id=task_id, consented=True)


def complete_assignment(assignment: Assignment, *, correct: bool = True, minutes: float | None = None) -> Assignment:
    """Answer every step of every claim through the questionnaire's services, then submit."""
    study = assignment.study
    claims = list(assignment.claims.select_related("unit__item", "attention_check"))
    steps = [(claim, step) for claim in claims
             for step in steps_for(kind=study.kind, is_attention_check=bool(claim.attention_check_id))]
    # With ``minutes``, each step's recorded time shares them, as the pages record a step's display
    # to its answer (the pace the pay reading judges).
    duration_ms = round(minutes * 60_000 / len(steps)) if minutes is not None and steps else None
    for claim, step in steps:
        if claim.attention_check_id:
            label = claim.attention_check.correct_answer
        else:
            gold = claim.unit.item.gold_answer
            label = gold if correct else ("no" if gold == "yes" else "yes")
        annotation_submit(assignment=assignment, claim=claim, step=step, answer=label, duration_ms=duration_ms)
    assignment_submit(assignment=assignment)
    if minutes is not None:
        # Task times are data the test controls: start the clock ``minutes`` before submission.
        submitted = timezone.now()
        started = submitted - dt.timedelta(minutes=minutes)
        Assignment.objects.filter(pk=assignment.pk).update(created_at=started, consented_at=started,
                                                           submitted_at=submitted)
    assignment.refresh_from_db()
    return assignment


def submitted(study, *, platform: str, worker_id: str, assignment_id: str, task_id: str = "",
              minutes: float | None = None, correct: bool = True) -> Assignment:
    return complete_assignment(
        start_assignment(study, platform=platform, worker_id=worker_id, assignment_id=assignment_id, task_id=task_id),
        minutes=minutes, correct=correct)
