"""Per-study access, audited over every page (issue 10 item 9): the URL patterns of every admin
(lists, change, history and delete pages, custom views) are enumerated, not listed by hand, so a
new admin page is audited the day it is added. Two staff users who neither own nor share another
researcher's study probe it: one holding no permission, one holding every model permission of the
apps. Neither may read a page about that study (403 or 404, or the admin's "doesn't exist"), nor
find its name on any list, nor change it with an action; the same for the researcher preview and
the API (reads, exports, and the item / rationale / source lists)."""
from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.forms.models import model_to_dict
from django.test import Client
from django.urls import URLPattern, URLResolver
from rest_framework.test import APIClient

from annotations.models import Participant
from annotations.services.links import open_link_create
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from scoring.models import ScoreRun
from scoring.services import study_score
from studies.admin.scoping import StudyScopedAdmin
from studies.api.tokens import api_token_create
from studies.models import Study
from tests.annotations.factories import AttentionCheckFactory, add_qualification
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db

SECRET = "olgas-secret-study"
APPS = ("studies", "annotations", "scoring")


def _staff(username: str, *, perms: bool) -> object:
    user = get_user_model().objects.create_user(username=username, password="pw", is_staff=True)
    if perms:
        user.user_permissions.add(*Permission.objects.filter(content_type__app_label__in=APPS))
    return get_user_model().objects.get(pk=user.pk)


@pytest.fixture
def world():
    olga = get_user_model().objects.create_user(username="olga", password="pw", is_staff=True)
    theirs = open_utility_study(name=SECRET, owner=olga, quota=1, item_ids=["library-q0", "library-q1"],
                                source_names=["library-s0", "library-s1"], platform="link")
    # Datasets, items and sources are a library, open to holders of their view permission: name
    # them apart from the study, whose name must not show.
    theirs.dataset.name = "library-dataset"
    theirs.dataset.save()
    work(theirs, "5a9d64f5f6dfdd0001eaa73d", platform="link")
    study_score(study=theirs, similarity=False)
    # The rows a study has on its pages beyond answers and scores: an attention check, a
    # qualification test and a grant, a publication with its participant links, an open link.
    AttentionCheckFactory(study=theirs)
    add_qualification(theirs)
    study_publish(user=OPERATOR, study=theirs, platform_name="link")
    open_link_create(study=theirs, user=OPERATOR, completion_code="LAB-2026", max_participants=2)
    return theirs, {"nobody": _staff("nobody", perms=False), "sam": _staff("sam", perms=True)}


def _object_of(model, model_admin, study):
    """A row of ``model`` that belongs to ``study`` (None for models not kept per study)."""
    if model is Study:
        return study
    if not isinstance(model_admin, StudyScopedAdmin):
        return None
    return model._default_manager.filter(**{f"{model_admin.study_path}__in": [study.pk]}).first()


def _fill(route: str, values: dict) -> str | None:
    """The route with its parameters filled in, or None when one has no value."""
    missing = []

    def sub(m):
        name = m.group(2)
        if name not in values:
            missing.append(name)
            return ""
        return str(values[name])

    path = re.sub(r"<(?:(\w+):)?(\w+)>", sub, route)
    return None if missing else path


def _routes(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _routes(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern)


def admin_pages(study) -> list[tuple[str, str]]:
    """``(kind, path)`` of every admin page, its parameters pointing at ``study``'s rows."""
    participant = Participant.objects.filter(assignments__study=study).first()
    run = ScoreRun.objects.filter(study=study).first()
    pages = []
    for model, model_admin in admin.site._registry.items():
        base = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        obj = _object_of(model, model_admin, study)
        values = {"study_id": study.pk, "participant_id": participant.pk, "run_id": run.pk}
        if obj is not None:
            values["object_id"] = obj.pk
            values["pk"] = obj.pk
        for route in _routes(model_admin.get_urls()):
            route = route.lstrip("^").rstrip("$")
            if route.startswith("(?P"):
                continue  # the admin's catch-all redirect
            if route == "":
                pages.append(("list", base))
                continue
            path = _fill(route, values)
            if path is None:
                continue
            bound = any(k in route for k in ("<", "object_id", "study_id", "participant_id", "run_id", "pk"))
            pages.append(("bound" if bound or path != route else "view", base + path))
    return pages


def test_the_audit_reaches_every_kind_of_page(world):
    theirs, _ = world
    pages = admin_pages(theirs)
    paths = [p for _, p in pages]
    for expected in (f"/admin/studies/study/{theirs.pk}/change/", f"/admin/annotations/publication/publish/{theirs.pk}/",
                     f"/admin/studies/study/{theirs.pk}/progress/", "/admin/annotations/annotation/",
                     "/admin/scoring/scorerun/"):
        assert expected in paths, expected
    assert any("/report" in p for p in paths) and any("/workers/" in p for p in paths)


@pytest.mark.parametrize("who", ["nobody", "sam"])
def test_no_admin_page_shows_another_researchers_study(world, who):
    theirs, users = world
    client = Client()
    client.force_login(users[who])
    leaks = []
    for kind, path in admin_pages(theirs):
        response = client.get(path)
        body = response.content.decode(errors="replace")
        if response.status_code in (403, 404):
            continue
        if response.status_code == 302:
            after = client.get(response["Location"])
            if "doesn’t exist" in after.content.decode() or "/login/" in response["Location"]:
                continue
            if kind == "list" or SECRET not in after.content.decode():
                continue
        if response.status_code == 200 and kind in ("list", "view") and SECRET not in body:
            continue
        if response.status_code == 405:
            continue  # a POST-only view: probed with the actions below
        leaks.append((path, response.status_code))
    assert leaks == []


def test_no_admin_action_changes_another_researchers_rows(world):
    theirs, users = world
    client = Client()
    client.force_login(users["sam"])
    for model, model_admin in admin.site._registry.items():
        obj = _object_of(model, model_admin, theirs)
        if obj is None:
            continue
        before = model_to_dict(obj)
        changelist = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        for name in model_admin.get_actions(_request_for(users["sam"])):
            if name == "delete_selected":
                data = {"action": name, "_selected_action": [obj.pk], "post": "yes"}
            else:
                data = {"action": name, "_selected_action": [obj.pk]}
            client.post(changelist, data)
            assert model._default_manager.filter(pk=obj.pk).exists(), (model, name)
            obj.refresh_from_db()
            assert model_to_dict(obj) == before, (model, name)


def _request_for(user):
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = user
    return request


@pytest.mark.parametrize("who", ["nobody", "sam"])
def test_the_preview_of_another_researchers_study_is_not_found(world, who):
    theirs, users = world
    client = Client()
    client.force_login(users[who])
    for query in ("", "?n=0&step=after"):
        response = client.get(f"/w/preview/{theirs.pk}/{query}")
        assert response.status_code in (403, 404), (query, response.status_code)
        assert "Because" not in response.content.decode()


@pytest.mark.parametrize("who", ["nobody", "sam"])
def test_the_api_shows_nothing_of_another_researchers_study(world, who):
    theirs, users = world
    _, key = api_token_create(user=users[who], name="audit", read_only=True, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    for path in ("", "results/", "summary/", "export/annotations/", "export/scores/",
                 "export/annotations/?file_format=csv", "export/scores/?file_format=jsonl"):
        response = client.get(f"/api/v1/studies/{theirs.pk}/{path}")
        assert response.status_code == 404, (path, response.status_code)
    per_study = ["studies/", "assignments/", "annotations/", "scores/", "score-runs/",
                 f"assignments/?study={theirs.pk}", f"annotations/?study={theirs.pk}", f"scores/?study={theirs.pk}",
                 f"items/?study={theirs.pk}", f"rationales/?study={theirs.pk}",
                 f"rationale-sources/?study={theirs.pk}", f"generalization-questions/?study={theirs.pk}"]
    # The library (datasets, items, sources, rationales) is open to holders of its view
    # permission (sam), and to nobody else; never what a study holds.
    library = ["datasets/", "items/", "rationale-sources/", "rationales/", "generalization-questions/"]
    for path in per_study + library:
        response = client.get(f"/api/v1/{path}")
        assert response.status_code == 200, (path, response.status_code)
        assert SECRET not in response.content.decode(), path
        if path in per_study or who == "nobody":
            assert response.json()["results"] == [], path

