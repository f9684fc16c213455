"""A score run is the record of a study's published numbers (``score_run_latest`` reads the newest
finished one, unit scores point at the run that wrote them): the admin deletes none, neither from
its delete page nor with "Delete selected", whoever asks (a researcher the study is shared with at
CHANGE, or its owner). A run goes only with its study, when the owner deletes a draft
(``study_delete``)."""
from __future__ import annotations

import pytest
from django.urls import reverse

from scoring.models import ScoreRun, UnitScore
from scoring.selectors import score_run_latest
from scoring.services import score_run_enqueue
from scoring.tasks import score_study_task
from studies.models import Study, StudyShare
from studies.services.sharing import study_share
from tests.annotations.factories import make_study
from tests.factories import staff
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def _run(study, user, capture) -> ScoreRun:
    """A run queued through the service and computed by the task, as "Score now" and the worker do."""
    with capture(execute=False):
        run = score_run_enqueue(study=study, user=user)
    score_study_task(study.pk, run.pk)
    return ScoreRun.objects.get(pk=run.pk)


@pytest.fixture
def scored(settings, django_capture_on_commit_callbacks):
    """Olga's open study, scored twice, with a third run still pending; shared with Carl at CHANGE."""
    settings.RL_SCORING_SIMILARITY = False
    olga, olga_client = staff("olga")
    carl, carl_client = staff("carl")
    study = open_utility_study(name="scored", n_items=1, n_sources=1, quota=1, owner=olga)
    study_share(study=study, user=olga, with_user=carl, level=StudyShare.Level.CHANGE)
    work(study, "w1")
    old = _run(study, olga, django_capture_on_commit_callbacks)
    new = _run(study, olga, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=False):
        pending = score_run_enqueue(study=study, user=olga)
    assert (old.status, new.status, pending.status) == ("done", "done", "pending")
    assert score_run_latest(study=study).pk == new.pk
    return study, (olga, olga_client), (carl, carl_client), (old, new, pending)


def test_a_change_share_deletes_no_score_run_of_the_owners(scored):
    study, _, (_, carl_client), (old, new, pending) = scored
    scores_of_new = set(UnitScore.objects.filter(score_run=new).values_list("pk", flat=True))
    assert scores_of_new
    delete = reverse("admin:scoring_scorerun_delete", args=[new.pk])
    assert carl_client.get(delete).status_code == 403
    assert carl_client.post(delete, {"post": "yes"}).status_code == 403

    changelist = reverse("admin:scoring_scorerun_changelist")
    assert 'value="delete_selected"' not in carl_client.get(changelist).content.decode()
    carl_client.post(changelist, {"action": "delete_selected", "_selected_action": [new.pk, pending.pk],
                                  "post": "yes"})
    assert set(ScoreRun.objects.filter(study=study).values_list("pk", flat=True)) == {old.pk, new.pk, pending.pk}
    assert score_run_latest(study=study).pk == new.pk
    assert set(UnitScore.objects.filter(score_run=new).values_list("pk", flat=True)) == scores_of_new
    # the run's own page offers no deletion either
    assert delete not in carl_client.get(reverse("admin:scoring_scorerun_change", args=[new.pk])).content.decode()


def test_the_owner_deletes_no_score_run_from_the_admin_either(scored):
    study, (_, olga_client), _, (_, new, pending) = scored
    for run in (new, pending):
        delete = reverse("admin:scoring_scorerun_delete", args=[run.pk])
        assert olga_client.get(delete).status_code == 403
        assert olga_client.post(delete, {"post": "yes"}).status_code == 403
    changelist = reverse("admin:scoring_scorerun_changelist")
    assert 'value="delete_selected"' not in olga_client.get(changelist).content.decode()
    olga_client.post(changelist, {"action": "delete_selected", "_selected_action": [new.pk], "post": "yes"})
    assert ScoreRun.objects.filter(study=study).count() == 3
    change = olga_client.get(reverse("admin:scoring_scorerun_change", args=[new.pk])).content.decode()
    assert reverse("admin:scoring_scorerun_delete", args=[new.pk]) not in change


def test_the_owner_still_deletes_a_draft_that_has_score_runs(settings, django_capture_on_commit_callbacks):
    # "Score now" takes a draft too; deleting the draft (its owner's, ``study_delete``) takes its runs.
    settings.RL_SCORING_SIMILARITY = False
    bob, bob_client = staff("bob")
    alice, alice_client = staff("alice")
    drafts = [make_study(status=Study.Status.DRAFT, n_items=2, n_sources=1, owner=bob, name=f"draft-{i}")
              for i in range(2)]
    for draft in drafts:
        study_share(study=draft, user=bob, with_user=alice, level=StudyShare.Level.CHANGE)
        _run(draft, bob, django_capture_on_commit_callbacks)
    runs = list(ScoreRun.objects.filter(study__in=drafts))
    assert len(runs) == 2

    # not the run alone, not by the share ...
    delete_run = reverse("admin:scoring_scorerun_delete", args=[runs[0].pk])
    assert bob_client.post(delete_run, {"post": "yes"}).status_code == 403
    assert delete_run not in bob_client.get(reverse("admin:scoring_scorerun_change",
                                                    args=[runs[0].pk])).content.decode()
    delete = reverse("admin:studies_study_delete", args=[drafts[0].pk])
    assert alice_client.post(delete, {"post": "yes"}).status_code == 403
    assert ScoreRun.objects.filter(study__in=drafts).count() == 2

    # ... but with the owner's draft, from its delete page and with the list action.
    page = bob_client.get(delete)
    assert page.status_code == 200 and not page.context["perms_lacking"]
    assert bob_client.post(delete, {"post": "yes"}).status_code == 302
    response = bob_client.post(reverse("admin:studies_study_changelist"),
                               {"action": "delete_selected", "_selected_action": [drafts[1].pk], "post": "yes"})
    assert response.status_code == 302
    assert not Study.objects.filter(pk__in=[d.pk for d in drafts]).exists()
    assert not ScoreRun.objects.filter(pk__in=[r.pk for r in runs]).exists()
