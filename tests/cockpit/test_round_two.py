"""Issue 22 (the cockpit, second round), through the pages: numbers that never contradict each
other, review and pay, and the rough edges a new user hits."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.urls import reverse

from studies.models import Study
from studies.services.studies import StudyError, study_update
from tests.cockpit.test_review import reviewed  # noqa: F401 (a fixture)
from tests.cockpit.test_study_setup import form_data
from tests.work import open_utility_study

pytestmark = pytest.mark.django_db


def test_workers_per_unit_of_an_open_study_is_refused_by_the_page_and_the_service(admin_client):
    study = open_utility_study(name="quota", n_items=2, n_sources=1, quota=3)
    url = reverse("admin:studies_study_change", args=[study.pk])
    data = {**form_data(admin_client.get(url)), "annotators_per_unit": "2"}
    refused = admin_client.post(url, data)
    assert refused.status_code == 200
    assert ("The study is no longer a draft (open): its workers per unit cannot change "
            "(its units, progress and cost were built with 3).") in refused.content.decode()
    study.refresh_from_db()
    assert study.annotators_per_unit == 3
    with pytest.raises(StudyError, match="its workers per unit cannot change"):
        study_update(study=study, user=None, annotators_per_unit=2)
    assert Study.objects.get(pk=study.pk).annotators_per_unit == 3
    # What workers are not promised by still changes on an open study, and the same value is no change.
    data.update(annotators_per_unit="3", instructions="Read the question twice.")
    assert admin_client.post(url, data).status_code == 302
    study.refresh_from_db()
    assert (study.annotators_per_unit, study.instructions) == (3, "Read the question twice.")


def design_rows(html: str) -> dict[str, str]:
    table = re.search(r'<table class="rl-design">(.*?)</table>', html, re.S).group(1)
    return {th: re.sub(r"<[^>]+>", "", td) for th, td in re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", table)}


def test_a_refused_save_leaves_the_design_summary_showing_what_is_saved(admin_client):
    study = open_utility_study(name="unsaved", n_items=4, n_sources=1, quota=2, units_per_task=4)
    url = reverse("admin:studies_study_change", args=[study.pk])
    page = admin_client.get(url)
    saved = design_rows(page.content.decode())
    assert (saved["Units per task"], saved["Tasks"]) == ("4", "2")
    data = {**form_data(page), "units_per_task": "1", "reward": "9.00",
            "attention_checks-TOTAL_FORMS": "1", "attention_checks-0-question": "Choose no.",
            "attention_checks-0-choices": '["yes", "no"]', "attention_checks-0-correct_answer": "maybe"}
    refused = admin_client.post(url, data)
    assert refused.status_code == 200
    html = refused.content.decode()
    assert "is not one of the choices" in html
    assert design_rows(html) == saved  # not 1 unit per task, 8 tasks at 9.00
    assert re.search(r'name="units_per_task" value="1"', html)  # the form keeps what was typed


def test_the_consent_page_counts_the_questions_as_the_task_does(admin_client):
    from django.test import Client

    from tests.annotations.factories import AttentionCheckFactory, make_study
    from tests.annotations.pages import entry_url, start

    study = make_study(platform="link", n_items=4, n_sources=1, quota=2, units_per_task=4)
    AttentionCheckFactory(study=study, question="Attention: choose No.", correct_answer="no")
    worker = Client()
    landing = worker.get(entry_url(study)).content.decode()
    assert "About 6.0 minutes; 5 questions." in landing
    task = worker.get(start(worker, entry_url(study))).content.decode()
    assert "Question 1 of 5" in task
    preview = admin_client.get(reverse("annotations:preview", args=[study.pk])).content.decode()
    assert "5 questions." in preview


def test_an_imported_study_page_says_what_it_is_and_offers_what_applies(admin_client, tmp_path):
    import json

    from django.core.files.uploadedfile import SimpleUploadedFile

    from tests.factories import DatasetFactory, ItemFactory

    dataset = DatasetFactory(name="released-ds")
    items = [ItemFactory(dataset=dataset, split="test", question=f"Is {n} a prime?", gold_answer="yes")
             for n in (2, 3, 5)]
    lines = [{"question": item.question, "rationale_source": source, "ground_truth_label": "yes",
              "human_predicted_label_before_rationale": "no", "human_predicted_label_after_rationale": "yes"}
             for item in items for source in ("gpt3", "t5large")]
    upload = SimpleUploadedFile("rationale_utility.json", "\n".join(map(json.dumps, lines)).encode())
    response = admin_client.post(reverse("admin:scoring_scorerun_import_outcomes"), {
        "file": upload, "dataset": dataset.pk, "split": "test", "study": "Released"})
    assert response.status_code == 302
    study = Study.objects.get(name="Released")
    page = admin_client.get(reverse("admin:studies_study_change", args=[study.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "A study run elsewhere: 6 (item, source) outcomes imported from rationale_utility.json on " in html
    rows = design_rows(html.replace('<table class="rl-design" id="imported-outcomes">', '<table class="rl-design">'))
    assert rows["Outcomes (item, source)"] == "6" and rows["Items"] == "3"
    assert rows["Rationale sources"] == "gpt3, t5large"
    assert rows["Imported from"].startswith("rationale_utility.json on ")
    # Nothing of a study to run: no pay, no consent warning, no units, no publishing or preview.
    for text in ("Pay to workers", "There is no consent text yet", "No units yet", 'id="study-link-publish"',
                 'id="preview-as-worker"', 'id="study-link-progress"', 'id="study-link-workers"'):
        assert text not in html, text
    # What applies: scoring again (a form to the score-now view), the scores' export, the score runs.
    assert re.search(rf'<form method="post" action="{reverse("admin:scoring_scorerun_score")}" id="score-again"', html)
    assert f'name="study" value="{study.pk}"' in html
    export = f"/api/v1/studies/{study.pk}/export/scores/?file_format=csv"
    assert f'href="{export}" id="study-link-export_scores"' in html
    assert admin_client.get(export).status_code == 200
    assert 'id="study-link-score_runs"' in html
    # Someone who may see the study but not start a run is not offered "Score again" (the service,
    # score_run_check, would refuse it).
    from studies.services.sharing import study_share
    from tests.factories import staff

    viewer, viewer_client = staff("vera", all_model_perms=False, extra=("studies.view_study",))
    study_share(study=study, user=study.owner, with_user=viewer)
    seen = viewer_client.get(reverse("admin:studies_study_change", args=[study.pk])).content.decode()
    assert "A study run elsewhere" in seen and 'id="score-again"' not in seen


@pytest.mark.parametrize("url", ["admin:studies_import_data", "admin:scoring_scorerun_import_outcomes"])
def test_the_import_pages_show_their_form_and_no_template_comment(admin_client, url):
    page = admin_client.get(reverse(url))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="file"' in html and 'type="file"' in html
    assert "{#" not in html and "An import&#x27;s upload form" not in html and "An import's upload form" not in html


def test_an_attention_check_with_empty_choices_saves_as_yes_no(admin_client):
    from annotations.models import AttentionCheck

    study = open_utility_study(name="yesno", n_items=2, n_sources=1, quota=1)
    url = reverse("admin:studies_study_change", args=[study.pk])
    page = admin_client.get(url)
    html = page.content.decode()
    # The empty form the "Add another" button copies shows the choices empty, not as [].
    empty = re.search(r'<textarea name="attention_checks-__prefix__-choices"[^>]*>(.*?)</textarea>', html, re.S)
    assert empty is not None and empty.group(1).strip() == ""
    assert "empty means yes / no" in html
    data = {**form_data(page), "attention_checks-TOTAL_FORMS": "1",
            "attention_checks-0-question": "Choose 'no' for this one.", "attention_checks-0-choices": "",
            "attention_checks-0-correct_answer": "no"}
    response = admin_client.post(url, data)
    assert response.status_code == 302, re.findall(r'<ul class="errorlist[^>]*>.*?</ul>', response.content.decode())
    check = AttentionCheck.objects.get(study=study)
    assert (check.choices, check.correct_answer) == ([], "no")
    again = admin_client.get(url).content.decode()
    shown = re.search(r'<textarea name="attention_checks-0-choices"[^>]*>(.*?)</textarea>', again, re.S)
    assert shown.group(1).strip() == ""
    # A correct answer that yes / no does not allow is still refused, by name.
    data.update({"attention_checks-INITIAL_FORMS": "1", "attention_checks-0-id": str(check.pk),
                 "attention_checks-0-study": str(study.pk), "attention_checks-0-correct_answer": "maybe"})
    refused = admin_client.post(url, data)
    assert refused.status_code == 200 and "maybe" in refused.content.decode()


README = Path(__file__).resolve().parents[2] / "README.md"


def readme_api_paths(text: str) -> set[str]:
    """Every API address the README names (``/api/v1/...``), ``<id>`` written as the schema's
    ``{id}``, query strings left out; relative names after "under `/api/v1/studies/<id>/`" too."""
    paths = {re.sub(r"<(\w+)>", r"{id}", p.split("?")[0]) for p in re.findall(r"`[A-Z]* ?(/api/v1/[^`\s]*)`", text)}
    for block in re.findall(r"under `/api/v1/studies/<id>/`(.*?)\n\n", text, re.S):
        paths |= {f"/api/v1/studies/{{id}}/{name}" for name in re.findall(r"`([a-z][a-z/]*/)`", block)}
    return paths


def test_every_api_address_the_readme_names_is_in_the_schema(admin_client):
    schema = admin_client.get("/api/schema/?format=json")
    assert schema.status_code == 200
    served = set(json.loads(schema.content)["paths"])
    named = readme_api_paths(README.read_text())
    assert {"/api/v1/studies/{id}/summary/", "/api/v1/studies/{id}/cost/", "/api/v1/studies/{id}/"} <= named
    assert named - served == set()
    # The checker catches what issue 22 item 13 found: a README line naming /progress/.
    assert readme_api_paths("see `GET /api/v1/studies/<id>/progress/`") - served == {"/api/v1/studies/{id}/progress/"}


def test_a_closed_study_says_rejected_work_is_not_offered_again_and_its_short_units_stay_short(reviewed):  # noqa: F811 (the fixture imported above)
    from annotations.services.platforms.access import OPERATOR
    from annotations.services.platforms.close import study_close

    client, study, workers = reviewed
    careless = workers["careless"]
    progress = reverse("admin:studies_study_progress", args=[study.pk])
    assert ">In progress</th>" in client.get(progress).content.decode()  # open: they are
    study_close(study=study, user=OPERATOR)
    page = f"/admin/studies/study/{study.pk}/workers/{careless.participant_id}/"
    done = client.post(page, {"action": "reject", "assignment": careless.pk, "feedback": "Failed the check."},
                       follow=True)
    assert done.status_code == 200
    html = done.content.decode()
    assert (f"Task {careless.pk} rejected; the study is closed, so its questions are not offered again "
            "(its answers no longer count).") in html
    assert "go back to the pool" not in html.split('<ul class="messagelist">')[1].split("</ul>")[0]
    closed = client.get(progress)
    assert closed.status_code == 200
    label = re.search(r'<th id="units-in-progress-label">(.*?)</th>\s*<td data-k="units_in_progress">(\d+)',
                      closed.content.decode())
    assert label.group(1) == "Started, not complete (the study is closed: they stay short)"
    assert int(label.group(2)) > 0


def test_score_runs_opened_from_a_study_offer_it_and_a_new_token_is_for_the_signed_in_user(admin_client, admin_user):
    study = open_utility_study(name="scored", n_items=2, n_sources=1, quota=1)
    other = open_utility_study(name="another", n_items=2, n_sources=1, quota=1)
    page = admin_client.get(reverse("admin:scoring_scorerun_changelist") + f"?study__id__exact={study.pk}")
    assert page.status_code == 200
    html = page.content.decode()
    assert re.search(rf'<option value="{study.pk}" selected>scored</option>', html)
    assert f'<option value="{other.pk}">another</option>' in html
    for hostile in ("abc", "1" * 40, "-1"):  # a filter value that is no study id preselects nothing
        page = admin_client.get(reverse("admin:scoring_scorerun_changelist") + f"?study__id__exact={hostile}")
        assert page.status_code in (200, 400)  # 400: no id (LookupGuardAdmin)
        assert page.status_code == 400 or not re.search(r'<option value="\d+" selected>', page.content.decode())
    add = admin_client.get(reverse("admin:studies_apitoken_add"))
    assert add.status_code == 200
    assert re.search(rf'<option value="{admin_user.pk}" selected>{admin_user.username}</option>', add.content.decode())


def test_the_admin_names_the_project_and_its_models_and_no_page_asks_for_a_favicon(admin_client):
    from django.test import Client

    from tests.annotations.factories import make_study
    from tests.annotations.pages import entry_url

    index = admin_client.get(reverse("admin:index"))
    assert index.status_code == 200
    html = index.content.decode()
    assert '<a href="/admin/">Rationale Lab</a>' in html and "<title>Studies, work and results | Rationale Lab admin" in html
    assert "Django administration" not in html
    assert ">MTurk qualification types</a>" in html and ">Gen-U predictions</a>" in html
    assert "M turk" not in html and "Gen u" not in html
    assert '<link rel="icon" href="data:,">' in html
    study = make_study(platform="link", n_items=2, n_sources=1, quota=1, units_per_task=2)
    for page in (admin_client.get(reverse("admin:studies_study_change", args=[study.pk])),
                 Client().get(entry_url(study))):
        assert page.status_code == 200 and '<link rel="icon" href="data:,">' in page.content.decode()


def test_the_generalization_import_says_what_it_merged_and_links_the_conflicts(admin_client):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from studies.models import GeneralizationQuestion
    from tests.factories import DatasetFactory, ItemFactory

    dataset = DatasetFactory(name="genq-ds")
    ItemFactory(dataset=dataset, split="test", question="Is water wet?", gold_answer="yes")
    ItemFactory(dataset=dataset, split="test", question="Is fire cold?", gold_answer="no")
    data = {"Is water wet?": [["Is ice wet?", "True", "similar"], ["Is ice wet?", "True", "similar"],
                              ["Is steam wet?", "True", "similar"], ["Is steam wet?", "False", "similar"]],
            "Is fire cold?": [["Is fire hot?", "True", "rephrase"]]}
    upload = SimpleUploadedFile("generalisation_final_test.json", json.dumps(data).encode())
    response = admin_client.post(reverse("admin:studies_import_data"), {
        "kind": "generalization", "file": upload, "dataset": "genq-ds", "split": "test"}, follow=True)
    assert response.status_code == 200
    html = response.content.decode()
    message = re.search(r'<ul class="messagelist">(.*?)</ul>', html, re.S).group(1)
    assert "Imported generalisation_final_test.json: 3 created, 0 updated, 0 unchanged." in message
    assert "Of its 5 rows, 1 repeated an earlier row exactly and were merged (3 distinct questions)." in message
    assert re.search(r'1 question\(s\) were given more than once with different answers \(1 line\(s\), e.g. line 1, '
                     r'column \d+: "Is steam wet\?" answered no there, yes at line 1, column \d+\): the first answer '
                     r'was kept and each is flagged for validation.', message)
    link = re.search(r'<a href="([^"]+)" id="import-conflicts-link">Show them</a>', message).group(1)
    shown = admin_client.get(link.replace("&amp;", "&"))
    assert shown.status_code == 200
    assert [q.text for q in shown.context["cl"].queryset] == ["Is steam wet?"]
    assert GeneralizationQuestion.objects.get(text="Is steam wet?").answer == "yes"


def test_a_worker_returns_a_task_from_its_pages_after_confirming():
    from django.test import Client

    from annotations.models import Assignment
    from tests.annotations.factories import make_study
    from tests.annotations.pages import answer, entry_url, start

    study = make_study(platform="link", n_items=2, n_sources=1, quota=1, units_per_task=2)
    worker = Client()
    task = start(worker, entry_url(study))
    page = worker.get(task).content.decode()
    leave = f'<form method="post" action="{task}leave" id="leave-form">'
    assert '<summary>Return this task</summary>' in page and leave in page
    assert "Yes, return this task" in page  # the confirmation, inside the closed box
    answer(worker, task, "yes")
    assert leave in worker.get(task).content.decode()
    assignment = Assignment.objects.get()
    assert worker.get(task + "leave").status_code == 405  # GET changes nothing
    done = worker.post(task + "leave", follow=True)
    assert done.status_code == 200 and "You left this task" in done.content.decode()
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.RETURNED
    assert not assignment.claims.filter(released=False).exists()  # its questions are free again
    # The next worker gets them.
    other = Client()
    assert other.get(start(other, entry_url(study))).status_code == 200
    assert Assignment.objects.exclude(pk=assignment.pk).get().claims.count() == 2


def test_failed_attention_checks_are_warned_on_the_progress_workers_worker_and_publish_pages(reviewed):  # noqa: F811 (the fixture imported above)
    client, study, workers = reviewed
    careless = workers["careless"]
    warning = ("1 of 3 task(s) with an attention check failed it (1 worker(s)): read their answers before "
               "approving or scoring them.")
    pages = [reverse("admin:studies_study_progress", args=[study.pk]),
             reverse("admin:studies_study_workers", args=[study.pk]),
             reverse("admin:studies_study_worker", args=[study.pk, careless.participant_id]),
             reverse("admin:annotations_publication_publish", args=[study.pk])]
    one_worker = warning.replace("1 of 3", "1 of 1")  # the worker page counts that worker's tasks
    for url, expected in zip(pages, [warning, warning, one_worker, warning], strict=True):
        page = client.get(url)
        assert page.status_code == 200, url
        assert expected in page.content.decode(), url
    careful_page = client.get(reverse("admin:studies_study_worker", args=[study.pk, workers["careful"].participant_id]))
    assert 'id="attention-warning"' not in careful_page.content.decode()
    # The warning's link is the review filter: the answers of the failing task only.
    html = client.get(pages[0]).content.decode()
    link = re.search(r'<a href="([^"]+)" id="attention-review-link">', html).group(1).replace("&amp;", "&")
    listed = client.get(link)
    assert listed.status_code == 200
    shown = list(listed.context["cl"].queryset)
    assert shown and {a.claim.assignment_id for a in shown} == {careless.pk}
    assert len(shown) == careless.claims.count() * 2 - 1  # every answer of the task: 2 a question, 1 the check
    assert "Task failed an attention check" in listed.content.decode()
    others = client.get(link.replace("attention=failed", "attention=not_failed")).context["cl"].queryset
    assert careless.pk not in {a.claim.assignment_id for a in others} and others.count() > 0


def test_each_participant_link_shows_its_task_worker_and_review_in_the_page_and_csv(admin_client):
    import csv
    import io

    from annotations.models import Assignment, ParticipantLink
    from lab.pseudonyms import worker_pseudonym
    from tests.annotations.factories import make_study
    from tests.work import work_through_pages

    study = make_study(platform="link", n_items=6, n_sources=1, quota=1, units_per_task=2, status="draft")
    publish = reverse("admin:annotations_publication_publish", args=[study.pk])
    assert admin_client.post(publish, {"action": "publish", "platform": "link", "link_mode": "single"}).status_code == 302
    first, second, unused = ParticipantLink.objects.filter(study=study).order_by("id")[:3]
    for link in (first, second):
        work_through_pages(f"/w/l/{link.token}/", answer=lambda step, n: "yes")
    first.refresh_from_db()
    second.refresh_from_db()
    kept, rejected = (Assignment.objects.get(participant=link.participant) for link in (first, second))
    worker_page = reverse("admin:studies_study_worker", args=[study.pk, second.participant_id])
    admin_client.post(worker_page, {"action": "reject", "assignment": rejected.pk, "feedback": "Not careful."})
    rejected.refresh_from_db()
    assert rejected.status == Assignment.Status.REJECTED

    html = admin_client.get(publish).content.decode()
    assert "1 unused, 0 used, 1 submitted,\n      0 approved, 1 rejected," in html
    row = re.search(rf'<tr id="link-{second.pk}">(.*?)</tr>', html, re.S).group(1)
    pseudonym = worker_pseudonym(second.participant.platform, second.participant.external_id)
    assert '<td class="rl-link-rejected">rejected</td>' in row and f"<code>{second.completion_code}</code>" in row
    assert f"{rejected.pk} <span" in row and "(rejected)" in row and f">{pseudonym}</a>" in row
    assert '<td class="rl-link-submitted">submitted</td>' in re.search(rf'<tr id="link-{first.pk}">(.*?)</tr>',
                                                                        html, re.S).group(1)
    assert re.search(rf'<tr id="link-{unused.pk}">.*?<td class="rl-link-unused">unused</td>\s*<td>—</td>', html, re.S)

    rows = {int(r["id"]): r for r in csv.DictReader(io.StringIO(
        admin_client.get(reverse("admin:annotations_publication_links_csv", args=[study.pk])).content.decode()))}
    assert {k: rows[second.pk][k] for k in ("state", "task", "worker", "review", "completion_code")} == {
        "state": "rejected", "task": str(rejected.pk), "worker": pseudonym, "review": "Rejected",
        "completion_code": second.completion_code}
    assert (rows[first.pk]["state"], rows[first.pk]["task"]) == ("submitted", str(kept.pk))
    assert (rows[unused.pk]["task"], rows[unused.pk]["worker"]) == ("", "")
    # The worker's page names the link and its code, the one to withhold.
    shown = admin_client.get(worker_page).content.decode()
    assert f"link {second.pk}, completion code <code>{second.completion_code}</code>" in shown


def test_the_publish_page_shows_a_dry_run_readably_until_the_study_is_published(admin_client):
    from tests.annotations.factories import make_study

    study = make_study(platform="link", n_items=4, n_sources=1, quota=1, units_per_task=2, status="draft")
    publish = reverse("admin:annotations_publication_publish", args=[study.pk])
    page = admin_client.get(publish).content.decode()
    box = re.search(r'<label><input type="checkbox" name="dry_run" id="dry-run-box"[^>]*>([^<]*)</label>', page)
    assert "off by default here: links move no money" in box.group(1)  # as the README says
    where_money_moves = make_study(platform="prolific", n_items=4, n_sources=1, quota=1, units_per_task=2,
                                   status="draft")
    prolific_page = reverse("admin:annotations_publication_publish", args=[where_money_moves.pk])
    assert admin_client.get(prolific_page).content.decode().count('id="dry-run-box" checked') == 1
    response = admin_client.post(publish, {"action": "publish", "platform": "link", "link_mode": "single",
                                           "dry_run": "on"}, follow=True)
    html = response.content.decode()
    card = re.search(r'<div class="rl-card" id="dry-run">(.*?)</div>', html, re.S).group(1)
    assert "what publishing on Participant links would do</h2>" in card and "()" not in card.split("</h2>")[0]
    assert "<strong>make_links</strong>" in card
    assert re.search(r'<pre class="rl-plan">\{\s*&quot;mode&quot;: &quot;single&quot;,\s*&quot;count&quot;: 2\s*\}</pre>', card)
    assert "{&#x27;" not in card  # no Python dict repr
    assert ".rl-card button, form.rl-small button { background: var(--button-bg)" in html  # buttons styled
    admin_client.post(publish, {"action": "publish", "platform": "link", "link_mode": "single"})
    after = admin_client.get(publish).content.decode()
    assert 'id="dry-run"' not in after and 'id="link-table"' in after
