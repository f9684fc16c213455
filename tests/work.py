"""Studies built and worked the way the app does it: designed with ``study_create``, opened with
``study_open``, and answered by workers through the questionnaire's services (start, answer,
submit). Tests that need answers, scores or exports use these instead of writing rows by hand."""
from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from django.utils import timezone

from annotations.models import Assignment, Claim, QualificationTest
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.opening import study_open
from annotations.services.participants import participant_get_or_create
from annotations.services.platforms.access import OPERATOR
from annotations.services.qualification import qualification_submit
from studies.models import Platform, Study
from studies.services.studies import study_create
from tests.factories import DatasetFactory, ItemFactory, RationaleFactory, RationaleSourceFactory

# answer(claim, step) -> label; the default answers "no" before the rationale and the gold after.
Answerer = Callable[[Claim, str], str]


def gold_after(claim: Claim, step: str) -> str:
    return claim.unit.item.gold_answer if step == "after" else "no"


def open_utility_study(
    *, name: str, n_items: int = 2, n_sources: int = 2, quota: int = 3, owner=None, gold: str = "yes",
    units_per_task: int | None = None, item_ids: list[str] | None = None, source_names: list[str] | None = None,
    predicts: list[str] | None = None, platform: str = Platform.PROLIFIC, stop_when_decided: bool = False,
) -> Study:
    """An open utility study on ``platform`` (Prolific unless named) of ``n_items`` yes/no items
    (gold ``gold``) x ``n_sources`` imported sources, each (item, source) with a rationale that
    predicts ``gold`` (or, with ``predicts``, the answer given there for that source: one per
    source, in order); ``stop_when_decided``: a unit stops once its result is decided."""
    dataset = DatasetFactory(name=f"{name}-dataset")
    ids = item_ids or [f"{name}-q{i}" for i in range(n_items)]
    items = [ItemFactory(dataset=dataset, external_id=ext, gold_answer=gold, split="test") for ext in ids]
    names = source_names or [f"{name}-s{i}" for i in range(n_sources)]
    sources = [RationaleSourceFactory(name=n) for n in names]
    predicted = predicts or [gold] * len(sources)
    for item in items:
        for source, prediction in zip(sources, predicted, strict=True):
            RationaleFactory(item=item, source=source, text=f"Because {item.external_id} ({source.name}).",
                             predicted_answer=prediction, prediction_correct=prediction == gold)
    study = study_create(
        name=name, dataset=dataset, sources=sources, annotators_per_unit=quota,
        units_per_task=units_per_task or len(items), owner=owner, consent_text="I agree.",
        platform=platform, stop_when_decided=stop_when_decided,
    )
    return study_open(study=study, user=OPERATOR)


def work(study: Study, worker: str, *, answer: Answerer = gold_after, submit: bool = True,
         steps: int | None = None, platform: str = Platform.PROLIFIC,
         payload: Callable[[Claim, str], dict | None] | None = None,
         shown_for: float | None = None) -> Assignment:
    """Worker ``worker`` (a Prolific id, or an id on ``platform``) starts a task in ``study``, passes
    its qualification test if it has one, and answers every claim through ``annotation_submit`` (only the first ``steps`` answers when
    given), then submits. ``payload(claim, step)`` adds a payload to an answer (e.g. a reported
    problem). ``shown_for`` (seconds) dates each step's display that long before its answer, as the
    questionnaire page's token does, so the answers have a duration."""
    participant = participant_get_or_create(platform=platform, external_id=worker)
    assignment = assignment_start(study=study, participant=participant, consented=True)
    if assignment.qualification_pending:  # the study has a qualification test: pass it first, as the page asks
        questions = QualificationTest.objects.get(study=study).questions.all()
        qualification_submit(assignment=assignment, answers={str(q.pk): q.correct_answer for q in questions})
    done = 0
    for claim in assignment.claims.select_related("unit__item", "attention_check").order_by("position"):
        kinds = ("attention",) if claim.attention_check_id else ("before", "after")
        for step in kinds:
            if steps is not None and done >= steps:
                return assignment
            label = claim.attention_check.correct_answer if step == "attention" else answer(claim, step)
            shown_at = timezone.now() - timedelta(seconds=shown_for) if shown_for is not None else None
            annotation_submit(assignment=assignment, claim=claim, step=step, answer=label,
                              payload=payload(claim, step) if payload else None, shown_at=shown_at)
            done += 1
    if submit:
        assignment = assignment_submit(assignment=assignment)
    return assignment


def work_through_pages(url: str, *, answer: Callable[[str, int], str], client=None) -> str:
    """A worker in their own browser (Django's test client) enters at ``url`` (a study or link
    address), consents, answers every step through the questionnaire pages (``answer(step, n)``
    gives the label of the worker's ``n``-th answer at ``step``) and submits. Returns the task's
    address."""
    from django.test import Client

    from tests.annotations.pages import FIELD, form_fields, start

    client = client or Client()
    task = start(client, url)
    for n in range(200):
        page = client.get(task).content.decode()
        if not FIELD["claim"].search(page):
            break
        fields = form_fields(page)
        response = client.post(task + "answer", {**fields, "answer": answer(fields["step"], n)})
        assert response.status_code == 302, response.content.decode()[:500]
    response = client.post(task + "submit")
    assert response.status_code in (200, 302), response.content.decode()[:500]
    return task
