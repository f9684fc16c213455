"""Factories for the questionnaire tests. State is built through the real services
(``study_units_build``, ``assignment_start``) wherever a service exists."""
from __future__ import annotations

import factory

from annotations.models import AttentionCheck, Participant, QualificationQuestion, QualificationTest
from annotations.services.units import study_units_build
from studies.models import Platform, Study
from tests.factories import (
    DatasetFactory,
    GeneralizationQuestionFactory,
    ItemFactory,
    RationaleFactory,
    RationaleSourceFactory,
    StudyFactory,
)


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
    build: bool = True,
    **study_fields,
) -> Study:
    """A study with ``n_items`` yes/no items, ``n_sources`` sources (each with a rationale for
    every item), ``n_genq`` generalization questions per item, and its units built."""
    dataset = DatasetFactory()
    study = StudyFactory(
        kind=kind, dataset=dataset, annotators_per_unit=quota, units_per_task=units_per_task, status=status,
        **study_fields,
    )
    sources = [RationaleSourceFactory() for _ in range(n_sources)]
    study.sources.set(sources)
    items = []
    for i in range(n_items):
        item = ItemFactory(dataset=dataset, question=question_text.format(i=i), gold_answer="yes" if i % 2 else "no")
        items.append(item)
        for source in sources:
            RationaleFactory(item=item, source=source, text=rationale_text.format(item=i, source=source.name),
                             predicted_answer="yes")
        for g in range(n_genq):
            GeneralizationQuestionFactory(item=item, text=f"Generalization {g} of question {i}?", answer="yes")
    study.items.set(items)
    if build:
        study_units_build(study=study)
    return study


def add_qualification(study: Study, *, pass_mark: int = 2) -> QualificationTest:
    test = QualificationTest.objects.create(study=study, pass_mark=pass_mark)
    for i, correct in enumerate(["yes", "no", "yes"]):
        QualificationQuestion.objects.create(
            test=test, position=i, question=f"Qualification question {i}: is the answer '{correct}'?",
            choices=[{"label": "yes", "text": "Yes"}, {"label": "no", "text": "No"}], correct_answer=correct,
        )
    return test
