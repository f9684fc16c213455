"""What an import tells a researcher about another researcher's content they may not see: nothing.
The dataset an import adds to is looked up among those the importing user may import into
(``upsert.datasets_to_import_into``), so a hidden dataset is as unknown as a missing one and no hidden name is
suggested; a row refused because a study the user may not change uses it is refused by its line
and key field only, never with the fields in which it differs from the stored row (which let a
researcher test another's rationale text field by field) nor the stored row's id, and the same
whether that row exists or not."""
from __future__ import annotations

import json
from functools import partial

import pytest

from studies.models import GeneralizationQuestion, Item, Rationale
from studies.services.importers import (
    ImportValidationError,
    generalization_questions_import,
    items_import_strategyqa,
    items_import_table,
    rationales_import,
)
from studies.services.studies import study_create
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import DatasetFactory, ItemFactory, RationaleFactory, RationaleSourceFactory
from tests.studies.helpers import write_jsonl

pytestmark = pytest.mark.django_db

SECRET = "ALICE-SECRET-RATIONALE"


@pytest.fixture
def lab():
    """Alice (every permission) and Bob (a researcher who reads only what his studies use). Both
    have a draft study on the dataset "shared-ds": Alice's lists her source, which has a rationale
    for q0 and q1 (not q2); Bob's lists his own. Alice also has a study on "alice-hidden-ds", which
    Bob may not see."""
    alice, _ = staff_client("alice")
    bob, _ = researcher_without_reference_views("bob")
    shared = DatasetFactory(name="shared-ds")
    items = [ItemFactory(dataset=shared, split="test", external_id=f"q{i}", question=f"Shared question {i}?",
                         gold_answer="yes") for i in range(3)]
    alices_source, bobs_source = RationaleSourceFactory(name="alice-src"), RationaleSourceFactory(name="bob-src")
    secrets = [RationaleFactory(item=item, source=alices_source, text=f"{SECRET} {i}") for i, item in
               enumerate(items[:2])]
    for item in items:
        RationaleFactory(item=item, source=bobs_source)
    study_create(name="alices-study", dataset=shared, sources=[alices_source], owner=alice, user=alice)
    study_create(name="bobs-study", dataset=shared, sources=[bobs_source], owner=bob)  # by the operator
    hidden = DatasetFactory(name="alice-hidden-ds")
    ItemFactory(dataset=hidden, split="test", external_id="h0", question="Hidden question?", gold_answer="yes")
    study_create(name="alices-hidden-study", dataset=hidden, sources=[alices_source], owner=alice, user=alice)
    return {"alice": alice, "bob": bob, "secrets": secrets, "items": items}


def _refusal(path, *, user, dataset: str = "shared-ds", importer=rationales_import) -> ImportValidationError:
    with pytest.raises(ImportValidationError) as refused:
        importer(file=path, dataset_name=dataset, user=user)
    return refused.value


def test_a_dataset_the_user_may_not_see_is_as_unknown_as_a_missing_one(lab, tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [{"item_id": "h0", "source": "bob-src", "rationale": "Mine."}])

    said = {name: str(_refusal(path, user=lab["bob"], dataset=name)).replace(name, "NAME")
            for name in ("alice-hidden-ds", "no-such-ds")}

    assert said["alice-hidden-ds"] == said["no-such-ds"]
    assert "unknown dataset 'NAME' (known: shared-ds)" in said["no-such-ds"]  # only names he may see
    genq = tmp_path / "generalisation_final_test.json"
    genq.write_text(json.dumps({"Hidden question?": [["Planted?", "True", "rephrase"]]}))
    refused = _refusal(genq, user=lab["bob"], dataset="alice-hidden-ds", importer=generalization_questions_import)
    assert "unknown dataset 'alice-hidden-ds' (known: shared-ds)" in str(refused)
    assert not GeneralizationQuestion.objects.filter(text="Planted?").exists()
    # The study's researcher, and the operator, import into it as before.
    rationales_import(file=path, dataset_name="alice-hidden-ds", user=lab["alice"])
    assert Rationale.objects.filter(item__external_id="h0", source__name="bob-src").exists()


def test_a_refused_row_of_anothers_study_says_nothing_of_its_content_or_existence(lab, tmp_path):
    def refused_rows(guess: str) -> list:
        path = write_jsonl(tmp_path / "r.jsonl", [
            {"item_id": "q0", "source": "alice-src", "rationale": guess},  # Alice's row exists
            {"item_id": "q2", "source": "alice-src", "rationale": guess},  # no row yet: her study would show it
            {"item_id": "q1", "source": "bob-src", "rationale": "Bob's better wording."},  # his own
        ])
        return [(e.line, e.field, e.reason, e.record) for e in _refusal(path, user=lab["bob"]).errors]

    right, wrong = refused_rows(f"{SECRET} 0"), refused_rows("A wrong guess.")

    assert right == wrong  # a right guess of Alice's text reads as a wrong one
    assert [(line, field) for line, field, _, _ in right] == [(1, "source"), (2, "source")]  # line and key field
    reasons = {reason for _, _, reason, _ in right}
    (reason,) = reasons  # one answer whether the row exists or not
    assert "is taken by a source you may not see" in reason and "alices-study" not in reason
    assert not any(c.isdigit() for c in reason)  # no row id
    assert not any(word in reason for word in ("text", "predicted_answer", "generation_info"))
    assert sorted(Rationale.objects.filter(source__name="alice-src").values_list("text", flat=True)) == [
        f"{SECRET} 0", f"{SECRET} 1"]  # nothing written, nothing added



def test_an_item_import_neither_adds_to_nor_describes_a_dataset_the_user_may_not_see(lab, tmp_path):
    # Names are unique, so a hidden dataset's name cannot be answered as a missing one (which the
    # import creates): it is refused saying only that the name is taken, whatever the file's task
    # format, and nothing of the hidden dataset (its task format, options, items) is read or changed.
    sqa = tmp_path / "planted_test.json"
    sqa.write_text(json.dumps([{"qid": "h0", "question": "Overwritten?", "answer": False},
                               {"qid": "x1", "question": "Planted?", "answer": True}]))
    table = tmp_path / "planted.csv"
    table.write_text('id,question,answer,choices\nx2,Which?,a,"[""one"", ""two""]"\n')
    importers = {
        "strategyqa": items_import_strategyqa,
        "table, multiple choice": partial(items_import_table, task_format="multiple_choice"),
        "table, the dataset's task format": items_import_table,
    }
    said = {kind: str(_refusal(sqa if kind == "strategyqa" else table, user=lab["bob"], dataset="alice-hidden-ds",
                               importer=importer)) for kind, importer in importers.items()}

    for kind, message in said.items():
        assert message.endswith("the dataset name 'alice-hidden-ds' is taken by a dataset you may not see: choose "
                                "another dataset name"), kind
        assert "Yes / no" not in message and "yes_no" not in message
    hidden = Item.objects.filter(dataset__name="alice-hidden-ds")
    assert list(hidden.values_list("external_id", "question")) == [("h0", "Hidden question?")]
    # A name nobody holds is his; Alice, who may see hers, and the operator still add to it.
    assert items_import_strategyqa(file=sqa, dataset_name="bobs-ds", user=lab["bob"]).created == 2
    sqa.write_text(json.dumps([{"qid": "x1", "question": "Planted?", "answer": True}]))
    assert items_import_strategyqa(file=sqa, dataset_name="alice-hidden-ds", user=lab["alice"]).created == 1
    assert items_import_strategyqa(file=sqa, dataset_name="alice-hidden-ds").unchanged == 1
