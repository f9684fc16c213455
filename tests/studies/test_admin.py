import json
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from studies.models import Dataset, ImportRecord, Item, Rationale, RationaleSource, Study
from studies.services.importers import rationales_import
from studies.services.studies import study_create
from tests.factories import DatasetFactory, GeneralizationQuestionFactory, ItemFactory, RationaleFactory

pytestmark = pytest.mark.django_db
IMPORT_URL = "admin:studies_import_data"


def _upload(path, name=None):
    return SimpleUploadedFile(name or path.name, path.read_bytes(), content_type="application/json")


def test_import_page_renders_for_staff(admin_client):
    response = admin_client.get(reverse(IMPORT_URL))
    assert response.status_code == 200
    assert b"Import data" in response.content and b'name="file"' in response.content


def test_import_page_needs_staff(client):
    user = get_user_model().objects.create_user("worker", password="pw-123456")
    client.force_login(user)
    response = client.get(reverse(IMPORT_URL))
    assert response.status_code == 302 and "login" in response["Location"]


def test_strategyqa_then_rationales_through_the_admin(admin_client, sqa_test_file, strategyqa_dir):
    response = admin_client.post(reverse(IMPORT_URL), {"kind": "strategyqa", "file": _upload(sqa_test_file)})
    assert response.status_code == 302
    record = ImportRecord.objects.get(kind="strategyqa")
    assert response["Location"] == reverse("admin:studies_importrecord_change", args=[record.pk])
    assert record.imported_by.username == "admin"
    assert Item.objects.filter(split="test").count() == 458
    response = admin_client.post(reverse(IMPORT_URL), {
        "kind": "rationales", "file": _upload(strategyqa_dir / "rationale_utility.json"),
        "dataset": "StrategyQA", "split": "test"})
    assert response.status_code == 302
    assert Rationale.objects.count() == 1374
    page = admin_client.get(response["Location"], follow=True)
    assert page.status_code == 200


def test_bad_file_lists_every_row_error_and_imports_nothing(admin_client, tmp_path, sqa_test_imported,
                                                            strategyqa_dir):
    lines = (strategyqa_dir / "rationale_utility.json").read_text().splitlines()[:5]
    rows = [json.loads(line) for line in lines]
    rows[1]["question"] = "<b>Is this unknown?</b>"
    rows[3]["rationale"] = ""
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    response = admin_client.post(reverse(IMPORT_URL), {
        "kind": "rationales", "file": _upload(path), "dataset": "StrategyQA", "split": "test"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "Nothing was imported from bad.jsonl: 2 problems" in html
    assert "<td>2</td>" in html and "<td>4</td>" in html
    assert "the rationale text is empty" in html
    assert "&lt;b&gt;Is this unknown?&lt;/b&gt;" in html and "<b>Is this unknown?</b>" not in html
    assert Rationale.objects.count() == 0


def test_oversized_upload_is_refused(admin_client, settings, sqa_test_file):
    settings.RL_MAX_IMPORT_BYTES = 2048
    response = admin_client.post(reverse(IMPORT_URL), {"kind": "strategyqa", "file": _upload(sqa_test_file)})
    assert response.status_code == 400
    assert b"over the import limit" in response.content
    assert Item.objects.count() == 0


def test_form_requires_dataset_for_rationales(admin_client, tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"item_id": "x", "source": "s", "rationale": "r"}\n')
    response = admin_client.post(reverse(IMPORT_URL), {"kind": "rationales", "file": _upload(path)})
    assert response.status_code == 200
    assert b"Name the dataset." in response.content


def test_generic_import_with_column_mapping(admin_client, tmp_path):
    path = tmp_path / "pilot.csv"
    path.write_text("key,text,label\nk1,Is it?,yes\n")
    response = admin_client.post(reverse(IMPORT_URL), {
        "kind": "items", "file": _upload(path), "dataset": "Pilot", "task_format": "yes_no",
        "columns": "id=key, question=text, answer=label"})
    assert response.status_code == 302
    assert Item.objects.get(external_id="k1").dataset.name == "Pilot"


def test_study_page_shows_design_at_a_glance(admin_client, sqa_test_imported, strategyqa_dir):
    rationales_import(file=strategyqa_dir / "rationale_utility.json", dataset_name="StrategyQA", split="test")
    study = study_create(name="Replication", dataset=Dataset.objects.get(name="StrategyQA"),
                         sources=RationaleSource.objects.all(), reward=Decimal("2.00"), platform="prolific")
    response = admin_client.get(reverse("admin:studies_study_change", args=[study.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert "Design at a glance" in html
    # Cost and pay as the one cost-and-pay selector quotes them (RL_PROLIFIC_FEE_RATE 0.3333).
    for figure in ("1,374", "6,870", "687", "1,374.00", "457.95", "1,831.95", "33.33% on prolific", "20.00/h"):
        assert figure in html


def test_study_added_in_admin_goes_through_the_service(admin_client):
    dataset = DatasetFactory(name="D")
    items = [ItemFactory(dataset=dataset, split="test") for _ in range(6)]
    rationale = RationaleFactory(item=items[0])
    response = admin_client.post(reverse("admin:studies_study_add"), {
        "name": "From admin", "kind": "utility", "dataset": dataset.pk, "split": "test", "item_sample_size": "4",
        "sample_seed": "3", "sources": [rationale.source.pk], "annotators_per_unit": "5", "units_per_task": "10",
        "reward": "2.00", "hourly_pay_floor": "15.00", "estimated_minutes_per_task": "6.0", "platform": "link",
        # The study page's inlines (attention checks, qualification test, shares), empty.
        "attention_checks-TOTAL_FORMS": "0", "attention_checks-INITIAL_FORMS": "0",
        "qualification_test-TOTAL_FORMS": "0", "qualification_test-INITIAL_FORMS": "0",
        "shares-TOTAL_FORMS": "0", "shares-INITIAL_FORMS": "0",
    })
    assert response.status_code == 302, response.content.decode()[:3000]
    study = Study.objects.get(name="From admin")
    assert study.items.count() == 4
    assert list(study.sources.all()) == [rationale.source]
    assert study.owner.username == "admin"


def test_study_form_rejects_a_sample_bigger_than_the_split(admin_client):
    dataset = DatasetFactory(name="D2")
    ItemFactory(dataset=dataset, split="test")
    rationale = RationaleFactory(item=ItemFactory(dataset=dataset, split="test"))
    response = admin_client.post(reverse("admin:studies_study_add"), {
        "name": "Too big", "kind": "utility", "dataset": dataset.pk, "split": "test", "item_sample_size": "9",
        "sample_seed": "0", "sources": [rationale.source.pk], "annotators_per_unit": "5", "units_per_task": "10",
        "reward": "2.00", "hourly_pay_floor": "15.00", "estimated_minutes_per_task": "6.0", "platform": "link",
    })
    assert response.status_code == 200
    assert b"The sample size 9 is larger than the 2 items of the test split" in response.content
    assert not Study.objects.filter(name="Too big").exists()


@pytest.mark.parametrize("model", ["dataset", "item", "rationalesource", "rationale", "generalizationquestion",
                                   "study", "importrecord"])
def test_changelists_render_and_search(admin_client, model):
    item = ItemFactory(question="<script>alert(1)</script> Is it?")
    RationaleFactory(item=item)
    GeneralizationQuestionFactory(item=item)
    response = admin_client.get(reverse(f"admin:studies_{model}_changelist"), {"q": "a"})
    assert response.status_code == 200
    assert b"<script>alert(1)</script>" not in response.content


def test_validation_action_calls_the_service(admin_client):
    q = GeneralizationQuestionFactory()
    response = admin_client.post(reverse("admin:studies_generalizationquestion_changelist"), {
        "action": "mark_valid", "_selected_action": [q.pk]})
    assert response.status_code == 302
    q.refresh_from_db()
    assert q.validation_status == "valid"


def test_the_import_page_needs_the_import_permission_whatever_the_files_size(tmp_path):
    # The page let in anyone with studies.add_item and imported a small file inline, while a large
    # one (a background job) needed studies.add_importrecord: the importer now asks it itself.
    from tests.factories import staff

    user, client = staff("itemonly", all_model_perms=False, extra=("studies.add_item", "studies.view_item"))
    path = tmp_path / "pilot.csv"
    path.write_text("key,text,label\nk1,Is it?,yes\n")
    response = client.post(reverse(IMPORT_URL), {
        "kind": "items", "file": _upload(path), "dataset": "Pilot", "task_format": "yes_no",
        "columns": "id=key, question=text, answer=label"})
    assert response.status_code == 403
    assert not Item.objects.exists() and not ImportRecord.objects.exists()
