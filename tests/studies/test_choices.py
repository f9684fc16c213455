"""The choice rules have one owner below the models, ``studies.choices`` (the generalization
question's ``clean`` reads them there; studies may not import annotations), and every module reads
them there."""
from __future__ import annotations

from annotations import choices as annotations_choices
from annotations.services import steps
from studies import choices
from studies import models as studies_models


def test_every_module_reads_the_one_owner():
    assert not hasattr(annotations_choices, "normalise_choices")
    assert not hasattr(annotations_choices, "correct_answer_problem")
    assert not hasattr(steps, "genq_choices")
    assert studies_models.YES_NO_CHOICES is choices.YES_NO_CHOICES
