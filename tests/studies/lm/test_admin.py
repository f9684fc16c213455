"""Admin: generate actions queue jobs through the services; jobs show live progress; LM output
is escaped."""
import pytest
from django.urls import reverse

from studies.models import GenerationFailure, GenerationJob, QuestionGenerator, RationaleSource
from tests.factories import DatasetFactory, ItemFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def dataset():
    ds = DatasetFactory(name="strategyqa")
    for _ in range(5):
        ItemFactory(dataset=ds, split="dev")
    return ds


@pytest.fixture
def source():
    return RationaleSource.objects.create(name="t5-local", kind="lm", backend="seq2seq", model_name_or_path="/m/t5")


def test_generate_rationales_action_shows_a_form_then_queues_a_job(admin_client, dataset, source):
    url = reverse("admin:studies_rationalesource_changelist")
    page = admin_client.post(url, {"action": "generate_rationales", "_selected_action": [source.pk]})
    assert page.status_code == 200 and b"Queue generation" in page.content

    response = admin_client.post(url, {"action": "generate_rationales", "_selected_action": [source.pk], "apply": "1",
                                       "dataset": dataset.pk, "split": "dev", "batch_size": 2, "limit": 3})
    assert response.status_code == 302
    job = GenerationJob.objects.get()
    assert (job.kind, job.source, job.total, job.batch_size, job.status) == ("rationales", source, 3, 2, "queued")


def test_generate_action_reports_a_domain_error(admin_client, dataset):
    gold = RationaleSource.objects.create(name="gold", kind="gold")
    url = reverse("admin:studies_rationalesource_changelist")
    response = admin_client.post(url, {"action": "generate_rationales", "_selected_action": [gold.pk], "apply": "1",
                                       "dataset": dataset.pk, "split": "dev", "batch_size": 16}, follow=True)
    assert b"not a language model source" in response.content
    assert not GenerationJob.objects.exists()


def test_job_list_shows_progress_and_refreshes_while_active(admin_client, dataset, source):
    job = GenerationJob.objects.create(kind="rationales", source=source, dataset=dataset, total=50, done=20,
                                       status="running", rate=2.0, eta_seconds=15)
    page = admin_client.get(reverse("admin:studies_generationjob_changelist"))
    assert b'<progress value="20" max="50"' in page.content and b"20 / 50 (40%)" in page.content
    assert b'http-equiv="refresh"' in page.content and b"2.00/s" in page.content
    detail = admin_client.get(reverse("admin:studies_generationjob_change", args=[job.pk]))
    assert detail.status_code == 200 and b'http-equiv="refresh"' in detail.content

    job.status, job.done = "done", 50
    job.save()
    page = admin_client.get(reverse("admin:studies_generationjob_changelist"))
    assert b'http-equiv="refresh"' not in page.content


def test_cancel_action(admin_client, dataset, source):
    job = GenerationJob.objects.create(kind="rationales", source=source, dataset=dataset, total=5, status="running")
    admin_client.post(reverse("admin:studies_generationjob_changelist"),
                      {"action": "cancel_jobs", "_selected_action": [job.pk]})
    job.refresh_from_db()
    assert job.status == "cancelled" and job.cancel_requested


def test_failures_show_raw_output_escaped(admin_client, dataset, source):
    job = GenerationJob.objects.create(kind="rationales", source=source, dataset=dataset, total=5)
    GenerationFailure.objects.create(job=job, item=dataset.items.first(), raw_output="<script>alert(1)</script>",
                                     reason="no <extra_id_1>")
    page = admin_client.get(reverse("admin:studies_generationfailure_changelist"))
    assert b"<script>alert(1)</script>" not in page.content
    assert b"&lt;script&gt;alert(1)&lt;/script&gt;" in page.content


def test_generate_questions_action_refuses_without_demonstrations(admin_client, dataset):
    generator = QuestionGenerator.objects.create(name="gen", backend="seq2seq", model_name_or_path="/m/g")
    response = admin_client.post(reverse("admin:studies_questiongenerator_changelist"), {
        "action": "generate_questions", "_selected_action": [generator.pk], "apply": "1", "dataset": dataset.pk,
        "split": "dev", "batch_size": 4}, follow=True)
    assert b"no demonstrations for type" in response.content
    assert generator.decoding["num_return_sequences"] == 5 and generator.decoding["temperature"] == 0.7


def test_finetune_action_on_dataset_queues_a_job(admin_client, dataset):
    for item in dataset.items.all():
        item.split = "train"
        item.save()
    response = admin_client.post(reverse("admin:studies_dataset_changelist"), {
        "action": "finetune_on_dataset", "_selected_action": [dataset.pk], "apply": "1", "mode": "answer_i",
        "preset": "paper-answerers", "base_model": "t5-base", "split": "train", "epochs": 2, "batch_size": 2, "lr": 0.001,
        "seed": ""})
    assert response.status_code == 302
    job = GenerationJob.objects.get(kind="finetune")
    assert job.total == 5 and job.params["mode"] == "answer_i" and job.status == "queued"
    assert job.params["preset"] == "paper-answerers" and job.params["seed"] == 0  # left empty: the preset's
    assert job.params["overrides"] == ["batch_size", "epochs", "lr"]


def test_what_the_jobs_wrote_is_not_deleted_and_a_researcher_lists_only_jobs_they_may_read(dataset, source):
    # delete_selected on Gen-U predictions changed every study's next Gen-U score that reads them;
    # deleting a job went past generation_job_cancel's rule; deleting a generator took its jobs.
    from studies.models import GenUPrediction
    from tests.factories import GeneralizationQuestionFactory, staff

    sam, sam_client = staff("sam")  # every model permission of the apps, no superuser
    item = dataset.items.first()
    generator = QuestionGenerator.objects.create(name="qg", backend="causal", model_name_or_path="/m/qg")
    job = GenerationJob.objects.create(kind="generalization_questions", generator=generator, dataset=dataset,
                                       total=5, status="running")
    failure = GenerationFailure.objects.create(job=job, item=item, reason="unparseable")
    question = GeneralizationQuestionFactory(item=item)
    prediction = GenUPrediction.objects.create(generalization_question=question, rationale_source=source,
                                               answerer="I", answerer_model="t5-base", predicted_answer="yes",
                                               correct=True)
    rows = [(GenUPrediction, prediction.pk), (GenerationJob, job.pk), (GenerationFailure, failure.pk),
            (QuestionGenerator, generator.pk)]
    for model, pk in rows:
        name = f"studies_{model._meta.model_name}"
        assert sam_client.post(reverse(f"admin:{name}_delete", args=[pk]), {"post": "yes"}).status_code == 403, name
        sam_client.post(reverse(f"admin:{name}_changelist"),
                        {"action": "delete_selected", "_selected_action": [pk], "post": "yes"})
        assert model.objects.filter(pk=pk).exists(), name

    # Without studies.view_generationjob a researcher lists their own jobs only, as the API does.
    from django.contrib.auth.models import Permission

    sam.user_permissions.remove(Permission.objects.get(codename="view_generationjob"))
    mine = GenerationJob.objects.create(kind="rationales", source=source, dataset=dataset, total=1, created_by=sam)
    listing = sam_client.get(reverse("admin:studies_generationjob_changelist"))
    assert [row.pk for row in listing.context["cl"].result_list] == [mine.pk]
