"""``results["sources"]`` describes each source as it is when the results are computed (backend,
model, training preset or method), and a fine-tuning or Quark job may since have published new
weights under its name. So it also names the checkpoint the source loads now (``checkpoint_hash``,
hashed as each ``generation`` row's), and the report says which rationales were made by weights
since replaced, whose training the source's line no longer describes."""
from __future__ import annotations

import pytest

from lab.jsontext import json_fingerprint
from scoring.reports.sections import sources_notes
from scoring.services import study_score
from scoring.services.score import generation_hash
from tests.factories import RationaleFactory, RationaleSourceFactory
from tests.scoring.test_services_score import collect, make_unit

pytestmark = pytest.mark.django_db

OLD = {"preset": "paper", "mode": "rationalizer", "job_id": 3}
NEW = {"preset": "small", "mode": "rationalizer", "job_id": 9}


def test_rationales_of_a_replaced_checkpoint_are_told_apart_from_the_source_as_it_is_now(utility_study):
    study, items, good, _ = utility_study
    study.sources.add(good)
    lm = RationaleSourceFactory(name="t5-lm", kind="lm", backend="seq2seq", model_name_or_path="/models/t5",
                                training=NEW)
    made = {"model": "/models/t5", "template": "t5_explain", "seed": 0}
    for k, item in enumerate(items):  # three by the first checkpoint, the rest by the one it loads now
        checkpoint = [json_fingerprint(OLD if k < 3 else NEW)]
        RationaleFactory(item=item, source=lm, generation_info={**made, "checkpoint": checkpoint})
    study.sources.add(lm)
    study.items.add(*items)
    collect(study, make_unit(study, items[0], lm), [("no", "yes")] * 5)

    run = study_score(study=study, similarity=False)

    source = run.results["sources"]["t5-lm"]
    now, before = generation_hash([json_fingerprint(NEW)]), generation_hash([json_fingerprint(OLD)])
    assert (source["training_preset"], source["checkpoint_hash"]) == ("small", now)
    assert {g["checkpoint_hash"]: g["n_rationales"] for g in source["generation"]} == {before: 3, now: len(items) - 3}
    line = next(n for n in sources_notes(run.results) if n.startswith("Source t5-lm:"))
    assert f"trained with fine-tuning preset small, mode rationalizer, checkpoint {now}." in line
    assert (f"3 made with model /models/t5, template t5_explain, seed 0, checkpoint {before}, weights since "
            "replaced (the source's training above is that of its checkpoint now)") in line
    assert line.count("weights since replaced") == 1
    assert run.results["sources"][good.name]["checkpoint_hash"] is None  # imported: no checkpoint
