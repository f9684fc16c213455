"""A researcher's whole study in headless Chromium, from the admin alone: import the data,
design and open a study, publish it as participant links, watch the progress page move (without
reloading) while workers answer through the worker pages (one of them in Chromium, reporting a
problem with an explanation), review and accept that flag from the study's pages (its assignment
becomes a flag-bonus candidate), approve and pay (links move no money), score, read the report and
download it. Each page is checked for its numbers against what the
database holds, and a screenshot of each step is kept under ``test-results/journey/``."""
from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from playwright.sync_api import Browser, Page, expect

from annotations.models import Annotation, Assignment, FlagReview, OpenLink, PlatformCall
from annotations.selectors.platforms import study_bonus_candidates
from scoring.models import ScoreRun, UnitScore
from studies.models import Item, Study
from tests.browser.pages import next_page
from tests.factories import DatasetFactory, ItemFactory, RationaleFactory, RationaleSourceFactory
from tests.work import work_through_pages

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-results" / "journey"
DEMO = Path(__file__).resolve().parents[2] / "studies" / "demo"  # the packaged demo data
N_ITEMS, SOURCES, RATERS, UNITS_PER_TASK = 4, ("demo-model-a", "demo-model-b"), 2, 4
POLL_TIMEOUT_MS = 15_000  # the progress page asks again every 5 s
FLAG_NOTE = "The explanation argues for the other answer."


@pytest.fixture
def files(tmp_path):
    """Four StrategyQA-format questions (test split) and the rationales of two sources for them,
    cut from the demo data shipped with the app."""
    questions = json.loads((DEMO / "demo_questions_test.json").read_text())[:N_ITEMS]
    items = tmp_path / "strategyqa_processed_test.json"
    items.write_text(json.dumps(questions))
    ids = {q["qid"] for q in questions}
    rows = [line for line in (DEMO / "demo_rationales.jsonl").read_text().splitlines()
            if json.loads(line)["item_id"] in ids and json.loads(line)["source"] in SOURCES]
    assert len(rows) == N_ITEMS * len(SOURCES)
    rationales = tmp_path / "rationales.jsonl"
    rationales.write_text("\n".join(rows) + "\n")
    return items, rationales


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def number(page: Page, selector: str) -> int:
    return int(re.sub(r"\D", "", page.locator(selector).first.inner_text()))


def work_in_chromium(browser: Browser, url: str, *, answer, flag_at: int) -> str:
    """A worker in their own Chromium profile enters at ``url``, consents, answers every step on the
    questionnaire page (``answer(step, n)`` as ``work_through_pages``), reports a problem with a
    note on their ``flag_at``-th answer (the "report a problem" box), and finishes. Returns the
    question shown where the problem was reported."""
    context = browser.new_context()
    worker = context.new_page()
    worker.set_default_timeout(20_000)
    worker.goto(url)
    promised = re.search(r"(\d+) questions?\.", worker.locator("main").inner_text()).group(1)
    worker.get_by_label("I have read the above and agree to take part.").check()
    with worker.expect_navigation():
        worker.get_by_role("button", name="Start the task").click()
    # The consent page's count is the task's (issue 22 item 3), and the task can be handed back.
    expect(worker.locator("#progress-text")).to_have_text(f"Question 1 of {promised}")
    expect(worker.locator("#leave-box summary")).to_have_text("Return this task")
    expect(worker.locator("#leave")).to_be_hidden()  # behind the confirmation
    flagged_question = ""
    for n in range(100):
        if not worker.locator("#answer-form").count():
            break
        step = worker.locator("input[name=step]").input_value()
        if n == flag_at:
            assert step == "after"  # the explanation is on the page
            worker.locator("#flag-box summary").click()
            worker.get_by_label("Something is wrong here", exact=False).check()
            worker.get_by_label("What is wrong? (optional)").fill(FLAG_NOTE)
            flagged_question = worker.locator("#answer-legend").inner_text()
            shot(worker, "04-worker-reports-a-problem")
        worker.locator(f"#answer-form input[name=answer][value='{answer(step, n)}']").check()
        with next_page(worker):
            worker.get_by_role("button", name="Save and continue").click()
    with worker.expect_navigation():
        worker.get_by_role("button", name="Finish the task").click()
    expect(worker.locator("#completion-code")).not_to_be_empty()
    context.close()
    assert flagged_question
    return flagged_question


def test_researcher_runs_a_study_from_the_admin(live_server, browser: Browser, page: Page, files, settings):
    settings.RL_SCORING_SIMILARITY = False  # BERTScore's model is not what this journey checks
    settings.RL_PUBLIC_URL = live_server.url
    get_user_model().objects.create_superuser("ada", "ada@example.org", "pw-ada-123")
    # A source with rationales for another dataset only: the picker must not offer it.
    RationaleFactory(item=ItemFactory(dataset=DatasetFactory(name="elsewhere"), split="test"),
                     source=RationaleSourceFactory(name="other-dataset-lm"))
    admin = live_server.url + "/admin/"
    page.set_default_timeout(20_000)

    page.goto(admin)
    page.fill("#id_username", "ada")
    page.fill("#id_password", "pw-ada-123")
    page.click("input[type=submit]")
    expect(page.locator("#user-tools")).to_contain_text("ada")

    # 1. Import the questions, then the rationales.
    items_file, rationales_file = files
    page.goto(live_server.url + reverse("admin:studies_import_data"))
    page.select_option("select[name=kind]", "strategyqa")
    page.set_input_files("input[name=file]", str(items_file))
    page.select_option("select[name=split]", "test")
    page.click("input[type=submit][value=Import]")
    expect(page.locator("ul.messagelist").first).to_contain_text(f"{N_ITEMS} created")
    page.goto(live_server.url + reverse("admin:studies_import_data"))
    expect(page.locator("#content")).not_to_contain_text("{#")  # no template comment as text (item 9)
    page.select_option("select[name=kind]", "rationales")
    page.set_input_files("input[name=file]", str(rationales_file))
    page.fill("input[name=dataset]", "StrategyQA")
    page.select_option("select[name=split]", "test")
    page.click("input[type=submit][value=Import]")
    expect(page.locator("ul.messagelist").first).to_contain_text(f"{N_ITEMS * len(SOURCES)} created")
    shot(page, "01-import")
    assert Item.objects.filter(dataset__name="StrategyQA", split="test").count() == N_ITEMS

    # 2. Design the study: the picker offers the two imported sources only.
    page.goto(live_server.url + reverse("admin:studies_study_add"))
    page.fill("#id_name", "Journey study")
    page.select_option("#id_dataset", label="StrategyQA")
    page.select_option("#id_split", "test")
    expect(page.locator("#sources-offered")).to_contain_text("2 source(s)")
    for name in SOURCES:
        page.locator("#id_sources label", has_text=name).locator("input").check()
    expect(page.locator("#id_sources label", has_text="other-dataset-lm")).to_be_hidden()
    page.fill("#id_annotators_per_unit", str(RATERS))
    page.fill("#id_units_per_task", str(UNITS_PER_TASK))
    page.select_option("#id_platform", "link")
    page.locator("#id_consent_text").evaluate("(el) => el.closest('details') && (el.closest('details').open = true)")
    page.fill("#id_consent_text", "I agree to take part.")
    page.click("input[name=_continue]")
    expect(page.locator("ul.messagelist").first).to_contain_text("Journey study")
    study = Study.objects.get(name="Journey study")
    to_collect = N_ITEMS * len(SOURCES) * RATERS
    expect(page.locator("table.rl-design")).to_contain_text(f"{to_collect}")
    shot(page, "02-design")

    # 3. Open it (list action), then publish it as one open participant link.
    page.goto(live_server.url + reverse("admin:studies_study_changelist"))
    page.check(f"input[name=_selected_action][value='{study.pk}']")
    page.select_option("select[name=action]", "open_studies")
    page.click("button[name=index]")
    expect(page.locator("ul.messagelist").first).to_contain_text("1 study opened")
    page.goto(live_server.url + reverse("admin:annotations_publication_publish", args=[study.pk]))
    publish = page.locator("form:has(input[name=action][value=publish])")
    publish.locator("input[name=link_mode][value=open]").check()
    if publish.locator("input[name=dry_run]").count() and publish.locator("input[name=dry_run]").is_checked():
        publish.locator("input[name=dry_run]").uncheck()
    publish.locator("[type=submit]").click()
    expect(page.locator("ul.messagelist").first).to_contain_text("Published")
    shot(page, "03-published")
    link = OpenLink.objects.get(study=study)
    entry = reverse("annotations:open_link_entry", args=[link.token])

    # 4. Watch the progress page move while four workers answer through the worker pages; the first
    #    works in Chromium and reports a problem with the explanation of their second question.
    page.goto(live_server.url + reverse("admin:studies_study_progress", args=[study.pk]))
    collected = page.locator("[data-k=answers_collected]")
    expect(collected).to_have_text("0")
    expect(page.locator("[data-k=answers_to_collect]")).to_have_text(str(to_collect))
    shot(page, "04-progress-empty")
    n_workers = to_collect // UNITS_PER_TASK
    flagged_question = ""
    for w in range(n_workers):
        # Before the rationale: "no"; after it: "yes" for most workers.
        def answer(step, n, w=w):
            return "no" if step == "before" else ("yes" if (w + n) % 3 else "no")
        if w == 0:
            flagged_question = work_in_chromium(browser, live_server.url + entry, answer=answer, flag_at=3)
        else:
            work_through_pages(live_server.url + entry, answer=answer)
        expect(collected).to_have_text(str((w + 1) * UNITS_PER_TASK), timeout=POLL_TIMEOUT_MS)
        expect(page.locator("[data-k='tasks.submitted']")).to_have_text(str(w + 1), timeout=POLL_TIMEOUT_MS)
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1  # never reloaded
    expect(page.locator("[data-k=percent]")).to_have_text("100")
    expect(page.locator("[data-k=answers_flagged]")).to_have_text("1")
    shot(page, "05-progress-full")
    after = Annotation.objects.filter(claim__study=study, step="after")
    for row in page.locator("#by-source tbody tr").all():
        name, got, want = (cell.inner_text() for cell in row.locator("td").all()[:3])
        assert int(got) == after.filter(claim__unit__source__name=name).count() == int(want)
    assert number(page, "[data-k='tasks.submitted']") == Assignment.objects.filter(
        study=study, status=Assignment.Status.SUBMITTED).count() == n_workers

    # The answers table holds what the progress page counts: one "after" answer per counted answer.
    answers = Annotation.objects.filter(claim__study=study)
    page.goto(live_server.url + reverse("admin:annotations_annotation_changelist")
              + f"?claim__study__id__exact={study.pk}&step__exact=after")
    assert number(page, ".paginator") == to_collect == answers.filter(step="after").count()
    shot(page, "06-answers")

    # 5. Review the flag: from the study page to its flagged list, read it, accept it.
    flag = Annotation.objects.get(claim__study=study, payload__flag=True)
    flagger = flag.claim.assignment
    assert flag.step == "after" and flag.payload["flag_note"] == FLAG_NOTE
    assert flag.claim.unit.item.question == flagged_question
    page.goto(live_server.url + reverse("admin:studies_study_change", args=[study.pk]))
    page.set_viewport_size({"width": 1920, "height": 720})  # the list is wide: every column in the screenshots
    page.click("#study-link-flags")
    row = page.locator("#result_list tbody tr", has=page.locator(f"input[name=_selected_action][value='{flag.pk}']"))
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(row.locator("td.field-note")).to_have_text(FLAG_NOTE)
    expect(row.locator("td.field-question span")).to_have_attribute("title", flagged_question)
    expect(row.locator("td.field-source")).to_have_text(flag.claim.unit.source.name)
    expect(row.locator("td.field-decision")).to_have_text("not decided yet")
    shot(page, "07-flags-open")
    row.locator("input[name=_selected_action]").check()
    page.select_option("select[name=action]", "accept_flags")
    page.click("button[name=index]")
    expect(page.locator("ul.messagelist").first).to_contain_text("1 flag(s) accepted.")
    expect(row.locator("td.field-decision")).to_contain_text("Accepted")
    shot(page, "08-flag-accepted")
    page.set_viewport_size({"width": 1280, "height": 720})
    review = FlagReview.objects.get(annotation=flag)
    assert review.decision == FlagReview.Decision.ACCEPTED and review.decided_by.username == "ada"
    assert study_bonus_candidates(study=study)["flagged_error"] == [flagger.pk]

    # 6. Pay: approve every submitted task; participant links move no money. The accepted flag's
    #    assignment is offered for the flag bonus.
    page.goto(live_server.url + reverse("admin:annotations_publication_publish", args=[study.pk]))
    expect(page.locator("select[name=kind] option[value=flagged_error]")).to_contain_text("(1 candidates)")
    page.locator("form:has(input[name=action][value=approve_all]) [type=submit]").click()
    expect(page.locator("ul.messagelist").first).to_contain_text(f"Approved {n_workers}")
    assert Assignment.objects.filter(study=study, status=Assignment.Status.APPROVED).count() == n_workers
    assert study_bonus_candidates(study=study)["flagged_error"] == [flagger.pk]  # still, once approved
    assert not PlatformCall.objects.filter(study=study).exclude(platform="link").exists()
    shot(page, "09-paid")

    # 7. Score now: the run's state page follows it and lands on the report.
    page.goto(live_server.url + reverse("admin:scoring_scorerun_changelist"))
    page.select_option("select[name=study]", str(study.pk))
    page.click("input[type=submit][value='Score now']")
    page.wait_for_url(re.compile(r"/report/$"))
    run = ScoreRun.objects.get(study=study)
    assert run.status == ScoreRun.Status.DONE, run.error
    shot(page, "10-report")

    # 8. The report's numbers are the unit scores'.
    units = UnitScore.objects.filter(study=study)
    assert units.count() == N_ITEMS * len(SOURCES)
    row = page.locator("#table-utility_shares tbody tr", has_text="all").locator("td")
    assert row.nth(1).inner_text() == str(units.count())
    assert row.nth(2).inner_text() == f"{units.filter(utility=1).count() / units.count():.3f}"
    assert row.nth(6).inner_text() == f"{units.filter(utility=-1).count() / units.count():.3f}"
    for source in SOURCES:
        cells = page.locator("#table-utility_shares tbody tr", has_text=source).locator("td")
        assert cells.nth(1).inner_text() == str(units.filter(source__name=source).count())
    theils = page.locator("#table-theils_u tbody tr", has_text="all").locator("td")
    assert theils.nth(2).inner_text() == str(units.count())
    assert re.fullmatch(r"\[\d\.\d{4}, \d\.\d{4}\]", theils.nth(4).inner_text())
    # The row of the after answers by (item, source) unit, not its by-item reading ("after (by item)").
    agreement = page.locator("#table-agreement tbody tr").filter(
        has=page.locator("td:first-child", has_text=re.compile(r"^after$"))).locator("td")
    assert agreement.nth(3).inner_text() == str(to_collect)  # step, units, units alpha uses, answers
    expect(page.locator("#section-generalization")).to_contain_text("Not in this report")
    expect(page.locator("#figure-utility_shares")).to_be_visible()
    assert page.locator("#figure-utility_shares").evaluate("(img) => img.naturalWidth") > 100

    # 9. Download the report.
    with page.expect_download() as download:
        page.click("#report-download")
    path = ARTIFACTS / "report.zip"
    download.value.save_as(str(path))
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        assert {"results.json", "tables/utility_shares.csv", "tables/theils_u.csv", "tables/agreement.csv",
                "figures/utility_shares.png", "figures/utility_shares.svg"} <= names
        shares = {r["source"]: r for r in csv.DictReader(io.StringIO(zf.read("tables/utility_shares.csv").decode()))}
        assert int(shares["all"]["n"]) == units.count()
        assert json.loads(zf.read("results.json"))["n_units_scored"] == units.count()
