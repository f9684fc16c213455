"""``steps.property_marks``: the one reader of the properties answer ``clean_answer`` stores."""
from __future__ import annotations

from annotations.models import Annotation
from annotations.services.steps import RATIONALE_PROPERTIES, clean_answer, property_marks

NAMES = [name for name, _ in RATIONALE_PROPERTIES]


def test_it_reads_what_clean_answer_stores():
    marks = {name: i % 2 == 0 for i, name in enumerate(NAMES)}
    _, stored = clean_answer(step=Annotation.Step.PROPERTIES, answer="", labels=[],
                             payload={name: "yes" if marks[name] else "no" for name in NAMES})
    assert property_marks(stored) == marks


def test_only_property_names_with_a_yes_or_no_are_read():
    # A bundle's copy may carry anything: other keys never become marks (nor overwrite the scorer's
    # item_id / source_id), and a value the page never sends gives no mark.
    payload = {"item_id": "yes", "source_id": "no", "factual": "yes", "leakage": "no", "grammatical": True,
               "contrast": "maybe", "properties": {"novel_info": True}}
    assert property_marks(payload) == {"factual": True, "leakage": False}
    assert property_marks(None) == {} and property_marks(["factual"]) == {}
