"""Rows the questionnaire and the services write are never deleted from the admin, superuser or
not: deleting a worker would take their blocks with them, a task or a unit would skip the release
of its slots, answers would go without a withdrawal's record, a grant would let a worker retake the
test; a score run is never edited (its attempts bound the retries). The services own these writes."""
import pytest
from django.urls import reverse

from annotations.models import Annotation, Assignment, Claim, Participant, QualificationGrant, Unit
from scoring.models import ScoreRun, UnitScore
from scoring.services import study_score
from tests.annotations.factories import add_qualification
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def test_service_owned_rows_are_not_deleted_from_the_admin_and_a_run_is_not_edited(admin_client):
    study = open_utility_study(name="no-deletes", n_items=2, n_sources=1, quota=1)
    add_qualification(study, pass_mark=1)
    work(study, "f" * 24)
    run = study_score(study=study, similarity=False)
    rows = [(Participant, "annotations_participant"), (Assignment, "annotations_assignment"),
            (Annotation, "annotations_annotation"), (Unit, "annotations_unit"), (Claim, "annotations_claim"),
            (QualificationGrant, "annotations_qualificationgrant"), (UnitScore, "scoring_unitscore")]
    before = {model: model.objects.count() for model, _ in rows}
    for model, name in rows:
        row = model.objects.first()
        assert row is not None, name
        assert admin_client.post(reverse(f"admin:{name}_delete", args=[row.pk]), {"post": "yes"}).status_code == 403
        changelist = reverse(f"admin:{name}_changelist")
        admin_client.post(changelist, {"action": "delete_selected", "_selected_action": [row.pk], "post": "yes"})
    assert {model: model.objects.count() for model, _ in rows} == before

    attempts = run.attempts
    url = reverse("admin:scoring_scorerun_change", args=[run.pk])
    assert admin_client.post(url, {"attempts": 0}).status_code == 403
    assert ScoreRun.objects.get(pk=run.pk).attempts == attempts


def test_a_workers_task_and_a_publication_are_not_saved_back_from_their_admin_pages(admin_client):
    # Every field of these pages is read-only, yet saving one wrote the whole row back: a status a
    # review, an expiry, a withdrawal or a publish moved meanwhile, or a block lifted, came back.
    from annotations.models import Publication
    from annotations.services.platforms.access import OPERATOR
    from annotations.services.platforms.publish import study_publish

    study = open_utility_study(name="no-saves", n_items=2, n_sources=1, quota=1, platform="link")
    work(study, "e" * 24, platform="link")
    publication = study_publish(user=OPERATOR, study=study, platform_name="link")
    for model, name, pk in ((Participant, "annotations_participant", Participant.objects.first().pk),
                            (Assignment, "annotations_assignment", Assignment.objects.first().pk),
                            (Publication, "annotations_publication", publication.pk)):
        url = reverse(f"admin:{name}_change", args=[pk])
        before = model.objects.filter(pk=pk).values().get()
        assert admin_client.get(url).status_code == 200, name  # still shown, read-only
        assert admin_client.post(url, {}).status_code == 403, name
        assert model.objects.filter(pk=pk).values().get() == before, name
