"""Fixtures of the API tests: researchers with tokens, and a utility study with answers and scores."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.cache import cache
from django.core.management import call_command
from rest_framework.test import APIClient

import studies.admin.access  # noqa: F401  (registers the token admin even before the integrator wires it)
from annotations.models import Annotation
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from scoring.models import ScoreRun, UnitScore
from scoring.services import study_score
from studies.api.tokens import api_token_create
from tests.work import open_utility_study, work

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
        _, key = api_token_create(user=user, name="test", read_only=read_only, by=None)
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
    run: object = None


def build_study(owner, *, name: str = "utility-study", n_items: int = 2, quota: int = 3, seed: int = 0) -> StudyData:
    """A closed, scored utility study of ``n_items`` items x 2 sources (gpt3, t5), built the way
    the app does it: designed and opened (``open_utility_study``), answered by workers through the
    questionnaire's services (``work``), closed with ``study_close`` and scored with
    ``study_score``. Every worker answers "no" before and "yes" (the gold) after a gpt3 rationale,
    and "yes" before and "no" after a t5 one, whose rationales predict the wrong answer: gpt3 is
    useful, t5 not useful.

    A task holds one unit of each item and a worker sees each item once, so the ``quota`` x 2
    places of an item take ``2 * quota`` workers, each answering ``n_items`` units."""
    study = open_utility_study(
        name=name, n_items=n_items, quota=quota, owner=owner, gold="yes",
        source_names=[f"{name}-gpt3", f"{name}-t5"], predicts=["yes", "no"],
    )
    sources = sorted(study.sources.all(), key=lambda s: s.name != f"{name}-gpt3")
    useful_source = sources[0].pk

    def answer(claim, step):
        useful = claim.unit.source_id == useful_source
        return ("yes" if useful else "no") if step == "after" else ("no" if useful else "yes")

    data = StudyData(study=study, items=list(study.items.order_by("pk")), sources=sources, participants=[])
    for w in range(2 * quota):
        assignment = work(study, f"PID-{name}-{w}-{seed}", answer=answer, shown_for=4 + w)
        data.assignments.append(assignment)
        data.participants.append(assignment.participant)
    assert not study.units.exclude(n_completed=quota).exists(), "the workers left places open"
    study_close(user=OPERATOR, study=study)
    data.run = study_score(study=study, similarity=False)
    assert data.run.status == ScoreRun.Status.DONE, data.run.error
    data.annotations = list(Annotation.objects.filter(claim__study=study).select_related("claim").order_by("pk"))
    data.scores = list(UnitScore.objects.filter(study=study).order_by("pk"))
    return data


@pytest.fixture
def study_data(researcher) -> StudyData:
    return build_study(researcher)


@pytest.fixture
def other_study_data(other_researcher) -> StudyData:
    return build_study(other_researcher, name="olgas-study", seed=1)


@pytest.fixture(scope="module")
def schema(tmp_path_factory, django_db_blocker):
    """The project's OpenAPI schema as ``manage.py spectacular`` writes it: --fail-on-warn turns any
    drf-spectacular warning or error into a failure; --validate checks the result against the
    OpenAPI 3 meta-schema."""
    path = tmp_path_factory.mktemp("schema") / "schema.yml"
    with django_db_blocker.unblock():
        call_command("spectacular", "--fail-on-warn", "--validate", "--file", str(path))
    return yaml.safe_load(path.read_text())
