"""Factories for the questionnaire tests. State is built through the real services
(``study_create``, ``study_open``, ``assignment_start``, ...): a test that needs a state the app
cannot produce builds it itself and says why."""
from __future__ import annotations

import itertools

import factory

from annotations.models import AttentionCheck, Participant, QualificationQuestion, QualificationTest
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from studies.models import Platform, Study
from studies.services.studies import study_create
from tests.factories import (
    DatasetFactory,
    GeneralizationQuestionFactory,
    ItemFactory,
    RationaleFactory,
    RationaleSourceFactory,
)

_study_numbers = itertools.count(1)


class ParticipantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Participant

    platform = Platform.LINK
    external_id = factory.Sequence(lambda n: f"worker-{n}")


class AttentionCheckFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = AttentionCheck

    question = factory.Sequence(lambda n: f"Attention check {n}: please choose 'No'.")
    choices = factory.LazyFunction(lambda: [{"label": "yes", "text": "Yes"}, {"label": "no", "text": "No"}])
    correct_answer = "no"


TEST_CONSENT = "I agree to take part in this test study."


def make_study(
    *,
    kind: str = Study.Kind.UTILITY,
    n_items: int = 4,
    n_sources: int = 2,
    quota: int = 5,
    units_per_task: int = 3,
    n_genq: int = 2,
    status: str = Study.Status.OPEN,
    rationale_text: str = "Rationale {item} from {source}.",
    question_text: str = "Question number {i}?",
    consent_text: str = TEST_CONSENT,
    **study_fields,
) -> Study:
    """A study built the way the app builds one. The content (a dataset's ``n_items`` yes/no
    items, ``n_sources`` sources each with a rationale for every item, ``n_genq`` generalization
    questions per item) is written as the importers write it; the study itself is made by
    ``study_create`` (which draws its sample: all the items), opened by ``study_open`` (which
    builds its units) unless ``status`` is draft, and closed by ``study_close`` when ``status`` is
    closed. A draft therefore has no units, as in the app."""
    dataset = DatasetFactory()
    sources = [RationaleSourceFactory() for _ in range(n_sources)]
    for i in range(n_items):
        item = ItemFactory(dataset=dataset, question=question_text.format(i=i), gold_answer="yes" if i % 2 else "no")
        for source in sources:
            RationaleFactory(item=item, source=source, text=rationale_text.format(item=i, source=source.name),
                             predicted_answer="yes")
        for g in range(n_genq):
            GeneralizationQuestionFactory(item=item, text=f"Generalization {g} of question {i}?", answer="yes")
    study = study_create(
        name=study_fields.pop("name", None) or f"made-study-{next(_study_numbers)}", dataset=dataset, kind=kind,
        split="test", sources=sources, annotators_per_unit=quota, units_per_task=units_per_task,
        consent_text=consent_text, **study_fields,
    )
    if status != Study.Status.DRAFT:
        study = study_open(study=study, user=OPERATOR)
    if status == Study.Status.CLOSED:
        study_close(user=OPERATOR, study=study)
    return study


def add_qualification(study: Study, *, pass_mark: int = 2) -> QualificationTest:
    test = QualificationTest.objects.create(study=study, pass_mark=pass_mark)
    for i, correct in enumerate(["yes", "no", "yes"]):
        QualificationQuestion.objects.create(
            test=test, position=i, question=f"Qualification question {i}: is the answer '{correct}'?",
            choices=[{"label": "yes", "text": "Yes"}, {"label": "no", "text": "No"}], correct_answer=correct,
        )
    return test


def imported_outcomes_study(owner):
    """A study of outcomes imported from a file (``outcomes_study_create``), owned by ``owner``, on
    the dataset of a draft study made for it: one question's before and after answers."""
    import io
    import json

    from scoring.services.outcomes import outcomes_study_create

    made = make_study(status=Study.Status.DRAFT, n_items=2, owner=owner)
    line = {"question": "Question number 0?", "rationale_source": "elsewhere", "ground_truth_label": "no",
            "human_predicted_label_before_rationale": "no", "human_predicted_label_after_rationale": "no"}
    outcomes, _ = outcomes_study_create(name="outcomes", dataset=made.dataset, owner=owner, user=None,
                                        file=io.BytesIO(json.dumps(line).encode() + b"\n"))
    return outcomes
