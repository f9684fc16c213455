"""A question generator's decoding is checked when it is saved in the admin, by the rule (and with
the message) each job on it reads it with (``common.decoding_from``), as a rationale source's is.

Before: the admin stored any JSON object. ``{"temperature": NaN}`` (Python's JSON reads NaN) was a
server error (SQLite: JSON_VALID; PostgreSQL: DataError), and a value out of range (top_p -1, a
billion new tokens) was stored, then refused by every job on the generator."""
from __future__ import annotations

import json
import math

import pytest
from django.urls import reverse

from studies.models import GenerationJob, QuestionGenerator
from studies.services.generation import GenerationError, generation_job_create
from studies.services.generation.common import decoding_from
from tests.factories import DatasetFactory, ItemFactory
from tests.studies.lm.test_job_rights import _train_pool

pytestmark = pytest.mark.django_db

BAD = {
    "NaN temperature": '{"do_sample": true, "temperature": NaN}',
    "top_p below 0": '{"top_p": -1}',
    "a billion new tokens": '{"max_new_tokens": 1000000000}',
}


def _form(name: str, decoding: str) -> dict:
    return {"name": name, "backend": "seq2seq", "model_name_or_path": "google/flan-t5-small", "seed": 0,
            "instructions": "{}", "demonstrations": "{}", "decoding": decoding}


def _job_refusal(decoding: dict) -> str:
    """What creating a job on a generator with ``decoding`` says (the generator made as a legacy row,
    stored before the admin checked)."""
    dataset = DatasetFactory()
    _train_pool(dataset)
    ItemFactory(dataset=dataset, split="dev")
    generator = QuestionGenerator.objects.create(name=f"legacy-{QuestionGenerator.objects.count()}",
                                                 backend="seq2seq", model_name_or_path="t5-small", decoding=decoding)
    with pytest.raises(GenerationError) as refused:
        generation_job_create(kind="generalization_questions", generator=generator, dataset=dataset, split="dev",
                              enqueue=False)
    return str(refused.value)


@pytest.mark.parametrize("decoding", BAD.values(), ids=BAD.keys())
def test_a_new_generator_with_decoding_no_job_can_use_is_refused_on_the_field(admin_client, decoding):
    page = admin_client.post(reverse("admin:studies_questiongenerator_add"), _form("gen", decoding))
    assert page.status_code == 200  # the form again, not a server error
    errors = page.context["adminform"].form.errors
    with pytest.raises(GenerationError) as rule:
        decoding_from(json.loads(decoding))
    assert errors == {"decoding": [str(rule.value)]}
    assert "decoding." in errors["decoding"][0]  # names the setting
    assert not QuestionGenerator.objects.exists()


def test_the_admins_refusal_is_the_one_a_job_gives(admin_client):
    page = admin_client.post(reverse("admin:studies_questiongenerator_add"), _form("gen", BAD["top_p below 0"]))
    assert page.context["adminform"].form.errors["decoding"] == [_job_refusal({"top_p": -1})]
    assert not GenerationJob.objects.exists()


def test_an_edit_onto_a_bad_decoding_is_refused_and_a_good_one_saved(admin_client):
    add = reverse("admin:studies_questiongenerator_add")
    assert admin_client.post(add, _form("gen", '{"do_sample": true, "temperature": 0.7}')).status_code == 302
    generator = QuestionGenerator.objects.get(name="gen")
    change = reverse("admin:studies_questiongenerator_change", args=[generator.pk])
    page = admin_client.post(change, _form("gen", BAD["NaN temperature"]))
    assert page.status_code == 200 and "decoding" in page.context["adminform"].form.errors
    generator.refresh_from_db()
    assert generator.decoding == {"do_sample": True, "temperature": 0.7}
    assert not math.isnan(generator.decoding["temperature"])


def test_a_stored_decoding_left_unchanged_does_not_block_an_edit_of_the_rest(admin_client):
    """As a source's: a generator stored before the check is refused by its next job, not by an edit
    of its other fields."""
    legacy = QuestionGenerator.objects.create(name="legacy", backend="seq2seq", model_name_or_path="t5-small",
                                              decoding={"top_p": -1})
    page = admin_client.post(reverse("admin:studies_questiongenerator_change", args=[legacy.pk]),
                             _form("renamed", '{"top_p": -1}'))
    assert page.status_code == 302, page.context["adminform"].form.errors
    assert QuestionGenerator.objects.get(pk=legacy.pk).name == "renamed"
