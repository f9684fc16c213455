"""The migration that gives shares a level keeps what existing shares did: a study shared before
levels existed was changed and paid for by the researcher it was shared with (given the
permissions), so its share becomes "pay"; shares made afterwards default to "view"."""
from __future__ import annotations

import pytest

BEFORE = [("studies", "0007_generationjob_quark")]
AFTER = [("studies", "0008_study_share_levels")]


@pytest.mark.django_db(transaction=True)
def test_shares_made_before_levels_keep_change_and_pay(migrate_to):
    old = migrate_to(BEFORE)
    User = old.get_model("auth", "User")
    Dataset, Study = old.get_model("studies", "Dataset"), old.get_model("studies", "Study")
    owner, colleague = User.objects.create(username="dana"), User.objects.create(username="lee")
    study = Study.objects.create(name="old-share", dataset=Dataset.objects.create(name="sqa"), owner=owner)
    study.shared_with.add(colleague)

    StudyShare = migrate_to(AFTER).get_model("studies", "StudyShare")
    assert list(StudyShare.objects.values_list("study_id", "user_id", "level")) == [(study.pk, colleague.pk, "pay")]
    fresh = StudyShare.objects.create(study_id=study.pk, user_id=User.objects.create(username="olga").pk)
    assert fresh.level == "view"
