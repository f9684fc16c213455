"""The choice rules have one owner below the models, ``studies.choices`` (the generalization
question's ``clean`` reads them there; studies may not import annotations), and the names the
annotations and cockpit modules read from ``annotations.choices`` are that owner's."""
from __future__ import annotations

from annotations import choices as annotations_choices
from annotations.services import steps
from studies import choices
from studies import models as studies_models


def test_annotations_reads_the_one_owner():
    assert annotations_choices.normalise_choices is choices.normalise_choices
    assert annotations_choices.correct_answer_problem is choices.correct_answer_problem
    assert steps.genq_choices is choices.genq_choices
    assert studies_models.YES_NO_CHOICES is choices.YES_NO_CHOICES
