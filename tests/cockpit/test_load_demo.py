import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from annotations.selectors.cost import study_cost_and_pay
from studies import demo
from studies.models import Dataset, ImportRecord, Item, Rationale, RationaleSource, Study
from studies.selectors import study_design_summary

pytestmark = pytest.mark.django_db


def _run(capsys) -> str:
    call_command("load_demo")
    return capsys.readouterr().out


def test_load_demo_on_an_empty_database_twice(capsys, settings):
    settings.DEMO_ADMIN_PASSWORD = "demo-pass-123"
    assert not Item.objects.exists() and not get_user_model().objects.exists()
    out = _run(capsys)
    questions = json.loads(demo.QUESTIONS_FILE.read_text())
    assert Item.objects.filter(dataset__name=demo.DATASET_NAME, split="test").count() == len(questions) == 20
    assert Dataset.objects.get(name=demo.DATASET_NAME).is_yes_no
    for name in demo.SOURCES:
        assert RationaleSource.objects.get(name=name).rationales.count() == 20
    wrong = {s: Rationale.objects.filter(source__name=s, prediction_correct=False).count() for s in demo.SOURCES}
    assert wrong == {"demo-model-a": 3, "demo-model-b": 6}
    study = Study.objects.get(name="Demo utility study")
    assert (study.kind, study.annotators_per_unit, study.units_per_task) == ("utility", 5, 5)
    assert sorted(study.sources.values_list("name", flat=True)) == demo.SOURCES
    assert study.items.count() == 20
    summary = study_design_summary(study=study)
    assert (summary.units, summary.answers, summary.tasks) == (40, 200, 40)
    assert not study_cost_and_pay(study=study).pay.below_floor
    expected_status = Study.Status.OPEN
    assert study.status == expected_status
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_staff and admin.is_superuser and admin.check_password("demo-pass-123")
    assert f"Admin: {settings.RL_PUBLIC_URL}/admin/" in out
    assert "Login: admin" in out
    assert re.search(rf"id={study.pk}\b", out)

    counts = (Item.objects.count(), Rationale.objects.count(), Study.objects.count(),
              get_user_model().objects.count(), RationaleSource.objects.count())
    stamps = list(Item.objects.order_by("id").values_list("updated_at", flat=True))
    units = study.units.count()
    out2 = _run(capsys)
    assert (Item.objects.count(), Rationale.objects.count(), Study.objects.count(),
            get_user_model().objects.count(), RationaleSource.objects.count()) == counts
    assert list(Item.objects.order_by("id").values_list("updated_at", flat=True)) == stamps
    assert Study.objects.get(pk=study.pk).status == expected_status
    assert study.units.count() == units
    assert "0 created, 0 updated, 20 unchanged" in out2
    assert "0 created, 0 updated, 40 unchanged" in out2
    assert ImportRecord.objects.filter(created=0, updated=0).count() == 2


def test_generated_password_is_printed_and_works(capsys, settings):
    settings.DEMO_ADMIN_PASSWORD = ""
    out = _run(capsys)
    password = re.search(r"Password: (\S+) \(generated", out).group(1)
    assert get_user_model().objects.get(username="admin").check_password(password)
    out2 = _run(capsys)
    assert "Password: unchanged" in out2
    assert get_user_model().objects.get(username="admin").check_password(password)


def test_demo_questions_are_not_copied_from_strategyqa(strategyqa_dir):
    from studies.services.importers import normalize_question

    released = set()
    for split in ("train", "dev", "test"):
        rows = json.loads((strategyqa_dir / f"strategyqa_processed_{split}.json").read_text())
        released |= {normalize_question(r["question"]) for r in rows}
    ours = {normalize_question(r["question"]) for r in json.loads(demo.QUESTIONS_FILE.read_text())}
    assert not ours & released


def test_load_demo_names_no_plain_link_once_single_person_links_exist(capsys):
    """Once single-person links were made for the demo study its plain link starts no task
    (``plain_link_starts_tasks``): a second run points to the publish page instead."""
    from annotations.platforms.handoff import study_entry_url
    from annotations.services.links import links_generate
    from annotations.services.platforms.access import OPERATOR

    first = _run(capsys)
    study = Study.objects.get(name="Demo utility study")
    plain = study_entry_url(study, platform="link")
    assert "Worker link (open it in a private window" in first and plain in first
    links_generate(study=study, n=2, user=OPERATOR)

    again = _run(capsys)
    assert plain not in again and "Worker link (open it" not in again
    assert "single-person links only" in again
    assert f"/admin/annotations/publication/publish/{study.pk}/" in again
