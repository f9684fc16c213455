"""``load_demo`` reuses only what it made itself: a study of the demo's name that is not the demo's
(another researcher's, another kind) and an ``admin`` account that is not an active superuser are
refused by name, and nothing is written (the demo questions included)."""
import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from studies import demo
from studies.models import Dataset, ImportRecord, Item, Study
from tests.factories import DatasetFactory, StudyFactory

pytestmark = pytest.mark.django_db


def _nothing_of_the_demo_written():
    assert not Dataset.objects.filter(name=demo.DATASET_NAME).exists()
    assert not Item.objects.exists() and not ImportRecord.objects.exists()


def test_another_researchers_draft_of_the_demos_name_is_refused_and_left_a_draft(dana, settings):
    settings.DEMO_ADMIN_PASSWORD = "demo-pass-123"
    researcher, _ = dana
    theirs = StudyFactory(name=demo.STUDY_NAME, kind=Study.Kind.GENERALIZATION, owner=researcher,
                          dataset=DatasetFactory(name="dana-data"))
    with pytest.raises(CommandError, match=r"study 'Demo utility study' \(id \d+\) exists and is not the demo's: "
                                           r"owner dana, kind generalization, dataset 'dana-data'"):
        call_command("load_demo")
    theirs.refresh_from_db()
    assert theirs.status == Study.Status.DRAFT and theirs.kind == Study.Kind.GENERALIZATION
    assert not get_user_model().objects.filter(username="admin").exists()
    _nothing_of_the_demo_written()


def test_a_study_of_the_demos_name_and_owner_of_another_kind_is_refused(capsys, settings):
    settings.DEMO_ADMIN_PASSWORD = "demo-pass-123"
    call_command("load_demo")
    capsys.readouterr()
    study = Study.objects.get(name=demo.STUDY_NAME)
    study.name = "Demo utility study (renamed)"
    study.save(update_fields=["name"])
    other = StudyFactory(name=demo.STUDY_NAME, kind=Study.Kind.GENERALIZATION, owner=study.owner,
                         dataset=study.dataset)
    with pytest.raises(CommandError, match="kind generalization"):
        call_command("load_demo")
    other.refresh_from_db()
    assert other.status == Study.Status.DRAFT


def test_an_existing_admin_that_is_not_an_active_superuser_is_refused_unchanged(settings):
    settings.DEMO_ADMIN_PASSWORD = ""
    user = get_user_model().objects.create_user("admin", password="researcher-pw", is_staff=True, is_active=False)
    with pytest.raises(CommandError, match=r"user 'admin' \(id \d+\) exists and is not an active superuser "
                                           r"\(is_active, is_superuser false\)"):
        call_command("load_demo")
    user.refresh_from_db()
    assert (user.is_active, user.is_staff, user.is_superuser) == (False, True, False)
    assert user.check_password("researcher-pw")
    assert not Study.objects.exists()
    _nothing_of_the_demo_written()


def test_an_existing_active_superuser_admin_is_reused_with_its_password(capsys, settings):
    settings.DEMO_ADMIN_PASSWORD = ""
    user = get_user_model().objects.create_superuser("admin", "a@example.org", "kept-pw")
    call_command("load_demo")
    assert "Password: unchanged" in capsys.readouterr().out
    user.refresh_from_db()
    assert user.check_password("kept-pw")
    assert Study.objects.get(name=demo.STUDY_NAME).owner == user
