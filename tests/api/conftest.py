"""Fixtures of the API tests: researchers with tokens, and a utility study with answers and scores."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient

import studies.admin.access  # noqa: F401  (registers the token admin even before the integrator wires it)
from annotations.models import Annotation, Assignment, Claim, Participant, Unit
from scoring.models import ScoreRun, UnitScore
from studies.api.tokens import api_token_create
from tests.factories import (
    DatasetFactory,
    ItemFactory,
    RationaleFactory,
    RationaleSourceFactory,
    StudyFactory,
)

WRITE_PERMISSIONS = ["studies.add_study", "studies.add_importrecord", "scoring.add_scorerun"]


def grant(user, *perms: str):
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    # Permissions are cached on the instance.
    for attr in ("_perm_cache", "_user_perm_cache", "_group_perm_cache"):
        user.__dict__.pop(attr, None)
    return user


@pytest.fixture(autouse=True)
def _clear_throttle_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def make_user(db):
    def make(username: str, *, staff: bool = False, superuser: bool = False, perms=()) -> object:
        User = get_user_model()
        user = User.objects.create_user(username=username, password="pw-" + username, is_staff=staff)
        if superuser:
            user.is_superuser = True
            user.is_staff = True
            user.save()
        return grant(user, *perms)

    return make


@pytest.fixture
def researcher(make_user):
    return make_user("dana", perms=WRITE_PERMISSIONS)


@pytest.fixture
def other_researcher(make_user):
    return make_user("olga", perms=WRITE_PERMISSIONS)


@pytest.fixture
def staff_raw(make_user):
    return make_user("lee", staff=True, perms=["studies.view_raw_worker_ids"])


@pytest.fixture
def staff_plain(make_user):
    return make_user("sam-staff", staff=True)


@pytest.fixture
def client_for():
    """An APIClient authenticated with a fresh API token of ``user``."""

    def make(user, *, read_only: bool = False) -> APIClient:
        _, key = api_token_create(user=user, name="test", read_only=read_only)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        return client

    return make


@pytest.fixture
def anon():
    return APIClient()


@dataclass
class StudyData:
    study: object
    items: list
    sources: list
    participants: list
    assignments: list = field(default_factory=list)
    annotations: list = field(default_factory=list)
    scores: list = field(default_factory=list)


def build_study(owner, *, name: str = "utility-study", n_items: int = 2, n_workers: int = 3, seed: int = 0) -> StudyData:
    """A closed utility study: ``n_items`` items x 2 sources, each worker answering every unit
    before and after the rationale, scored (the first source useful, the second not useful)."""
    dataset = DatasetFactory(name=f"{name}-dataset")
    items = [ItemFactory(dataset=dataset, gold_answer="yes", split="test") for _ in range(n_items)]
    sources = [RationaleSourceFactory(name=f"{name}-gpt3"), RationaleSourceFactory(name=f"{name}-t5")]
    study = StudyFactory(name=name, dataset=dataset, owner=owner, status="closed", annotators_per_unit=n_workers)
    study.items.set(items)
    study.sources.set(sources)
    units = []
    for item in items:
        for source in sources:
            rationale = RationaleFactory(item=item, source=source, text=f"Because {item.pk}/{source.pk}.")
            units.append(
                Unit.objects.create(
                    study=study, item=item, source=source, rationale=rationale, question_key=f"item:{item.pk}",
                    quota=n_workers, n_claimed=n_workers, n_completed=n_workers,
                )
            )
    data = StudyData(study=study, items=items, sources=sources, participants=[])
    now = timezone.now()
    for w in range(n_workers):
        participant = Participant.objects.create(platform="prolific", external_id=f"PID-{name}-{w}-{seed}")
        data.participants.append(participant)
        # A worker sees each question once: split the units over one assignment per source.
        for s_index, source in enumerate(sources):
            assignment = Assignment.objects.create(
                study=study, participant=participant, status="submitted", expires_at=now + timedelta(hours=1),
                submitted_at=now,
            )
            data.assignments.append(assignment)
            for position, unit in enumerate(u for u in units if u.source_id == source.pk):
                claim = Claim.objects.create(
                    assignment=assignment, unit=unit, study=study, participant=participant,
                    question_key=f"{unit.question_key}:{s_index}", position=position, completed_at=now,
                )
                before = "no" if s_index == 0 else "yes"
                after = "yes" if s_index == 0 else "no"
                for step, answer, ms in (("before", before, 4000 + w), ("after", after, 6000 + w)):
                    data.annotations.append(
                        Annotation.objects.create(
                            claim=claim, step=step, answer=answer, shown_at=now, duration_ms=ms
                        )
                    )
    for unit in units:
        useful = unit.source_id == sources[0].pk
        data.scores.append(
            UnitScore.objects.create(
                study=study, item=unit.item, source=unit.source, n_annotators=n_workers,
                before_majority="no" if useful else "yes", after_majority="yes" if useful else "no",
                before_correct=not useful, after_correct=useful, utility=1 if useful else -1,
                task_correct=useful, gen_u=1 if useful else 0, similarity=0.5,
            )
        )
    ScoreRun.objects.create(
        study=study, status="done", results={"study": {"id": study.pk}, "sources": {"x": {"useful": 0.5}}},
        finished_at=now,
    )
    return data


@pytest.fixture
def study_data(researcher) -> StudyData:
    return build_study(researcher)


@pytest.fixture
def other_study_data(other_researcher) -> StudyData:
    return build_study(other_researcher, name="olgas-study", seed=1)
