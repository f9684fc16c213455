"""Per-study access in the admin (issue 10 item 9): a staff researcher sees, changes and pays for
only the studies they own or that are shared with them, whatever model permissions they hold, and
sees raw worker ids only with ``studies.view_raw_worker_ids``. Regression tests: on the old code
every staff user listed every study, its workers' raw ids and another researcher's publish page."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.test import Client

from annotations.models import Annotation, Assignment, Claim, Participant, Unit
from scoring.models import ScoreRun, UnitScore
from scoring.services import study_score
from studies.models import Study
from tests.factories import staff
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db

@pytest.fixture
def two_studies():
    olga = get_user_model().objects.create_user(username="olga", password="pw")
    dana, _ = staff("dana-owner")
    mine = open_utility_study(name="danas-study", owner=dana, quota=1)
    theirs = open_utility_study(name="olgas-study", owner=olga, quota=1)
    for study, worker in ((mine, "PID-DANA-WORKER"), (theirs, "PID-OLGA-WORKER")):
        work(study, worker)
        study_score(study=study, similarity=False)
    return dana, mine, theirs


CHANGELISTS = {
    "cockpit study": ("studies", "study", Study, "pk"),
    "units": ("annotations", "unit", Unit, "study"),
    "assignments": ("annotations", "assignment", Assignment, "study"),
    "claims": ("annotations", "claim", Claim, "study"),
    "answers": ("annotations", "annotation", Annotation, "claim__study"),
    "participants": ("annotations", "participant", Participant, "assignments__study"),
    "score runs": ("scoring", "scorerun", ScoreRun, "study"),
    "unit scores": ("scoring", "unitscore", UnitScore, "study"),
}


@pytest.mark.parametrize("name", list(CHANGELISTS))
def test_lists_and_change_pages_hold_only_visible_studies(two_studies, name):
    _, mine, theirs = two_studies
    app, model_name, model, path = CHANGELISTS[name]
    user, client = staff("sam")
    theirs.shared_with.add(user)  # sam sees olga's study only
    response = client.get(f"/admin/{app}/{model_name}/")
    assert response.status_code == 200
    shown = {row.pk for row in response.context["cl"].queryset}
    assert shown == set(model.objects.filter(**{f"{path}__in": [theirs.pk]}).values_list("pk", flat=True))
    assert shown  # the study has rows of every kind
    hidden = model.objects.filter(**{f"{path}__in": [mine.pk]}).first()
    page = client.get(f"/admin/{app}/{model_name}/{hidden.pk}/change/", follow=True)
    assert "doesn’t exist" in page.content.decode()
    assert mine.name not in client.get(f"/admin/{app}/{model_name}/").content.decode()  # not even in a filter


def test_a_staff_user_without_rights_reaches_nothing(two_studies):
    _, client = staff("nobody", all_model_perms=False)
    for app, model_name, *_ in CHANGELISTS.values():
        assert client.get(f"/admin/{app}/{model_name}/").status_code == 403
    assert client.get(f"/admin/annotations/publication/publish/{two_studies[1].pk}/").status_code == 403


def test_raw_worker_ids_only_with_the_permission(two_studies):
    dana, mine, _ = two_studies
    client = Client()
    client.force_login(dana)
    participant = Participant.objects.get(external_id="PID-DANA-WORKER")
    pages = [
        "/admin/annotations/participant/", f"/admin/annotations/participant/{participant.pk}/change/",
        "/admin/annotations/annotation/", "/admin/annotations/assignment/",
        f"/admin/annotations/assignment/{Assignment.objects.get(study=mine).pk}/change/",
    ]
    for page in pages:
        assert "PID-DANA-WORKER" not in client.get(page).content.decode(), page
    listing = client.get("/admin/annotations/participant/")
    assert str(participant).split(":")[1] in listing.content.decode()  # the pseudonym instead
    assert listing.context["cl"].search_fields == []  # nor can a raw id be probed by searching
    viewer, client = staff("lee", extra=["studies.view_raw_worker_ids"])
    mine.shared_with.add(viewer)
    assert "PID-DANA-WORKER" in client.get("/admin/annotations/participant/").content.decode()


def test_the_publish_page_is_per_study_and_its_buttons_need_pay_access(two_studies):
    dana, mine, theirs = two_studies
    client = Client()
    client.force_login(dana)
    assert client.get(f"/admin/annotations/publication/publish/{theirs.pk}/").status_code == 404
    assert client.post(f"/admin/annotations/publication/publish/{theirs.pk}/", {"action": "close"}).status_code == 404
    assert theirs.name not in client.get("/admin/annotations/publication/publish/").content.decode()
    assert client.get(f"/admin/annotations/publication/publish/{mine.pk}/").status_code == 200
    # dana holds every annotations permission but not studies.pay_workers: no button that moves
    # money or recruits works (closing needs only the right to change the study, as its service asks).
    dana.user_permissions.remove(Permission.objects.get(codename="pay_workers"))
    dana = get_user_model().objects.get(pk=dana.pk)
    client.force_login(dana)
    for action in ("sync", "publish", "approve_all"):
        response = client.post(f"/admin/annotations/publication/publish/{mine.pk}/", {"action": action})
        assert response.status_code == 302
        assert [str(m) for m in get_messages(response.wsgi_request)][0].startswith("Nothing was done: ")


def test_study_actions_and_score_now_act_only_on_changeable_studies(two_studies):
    dana, mine, theirs = two_studies
    client = Client()
    client.force_login(dana)
    runs = ScoreRun.objects.count()
    response = client.post("/admin/scoring/scorerun/score/", {"study": theirs.pk}, follow=True)
    assert "Choose a study to score" in response.content.decode()
    assert ScoreRun.objects.count() == runs
    # An action posted with another researcher's id changes nothing: the list holds only visible rows.
    client.post("/admin/studies/study/", {"action": "close_studies", "_selected_action": [theirs.pk]})
    theirs.refresh_from_db()
    assert theirs.status == Study.Status.OPEN
