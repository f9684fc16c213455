"""A source's, question generator's or answerer's ``decoding`` is checked field by field where it is
read (``studies.lm.backends.Decoding.from_json``): a value of the wrong JSON type or out of its
range, or a key that is neither a setting nor an openai option, is refused as the job is created,
naming the field, the value and what is allowed; and where a source is saved
(``studies.services.content.content_row_save``: the admin's form). The audit's probes: ``do_sample``
"false" (a truthy string) sampled at temperature 1 while each rationale recorded "false"; ``stop``
"Reason:" was cut into its letters; top_p 7, temperature 1e9, num_return_sequences 2.5 and seed
"abc" were accepted. A source's own template naming an unknown placeholder, or no ``{question}``,
is refused the same ways (``studies.lm.templates.template_problem``)."""
from __future__ import annotations

import pytest
from django.urls import reverse

from studies.lm import quark
from studies.lm.backends import Decoding
from studies.models import GenerationJob, RationaleSource
from studies.services.generation import GenerationError, generation_job_create
from tests.studies.lm import test_max_new_tokens_bound as bound
from tests.studies.lm.test_max_new_tokens_bound import _job, _run

from .openai_server import OpenAIServer, completion
from .test_job_rights import RATIONALE_REPLY

pytestmark = pytest.mark.django_db

lab = bound.lab  # the same lab: a dataset with a train pool, and a superuser (root)


def _source(decoding: dict, url: str = "http://127.0.0.1:9/v1", template: str = "") -> RationaleSource:
    return RationaleSource.objects.create(name="probe", kind="lm", backend="openai", model_name_or_path="gpt-x",
                                          endpoint_url=url, decoding=decoding, template=template)


REFUSED = [
    ({"do_sample": "false"}, r"decoding\.do_sample must be true or false \(a JSON boolean\), not 'false'"),
    ({"do_sample": 1}, r"decoding\.do_sample must be true or false"),
    ({"do_sample": True, "top_p": 7}, r"decoding\.top_p must be a number above 0 and at most 1, not 7"),
    ({"top_p": -1}, r"decoding\.top_p must be a number above 0 and at most 1, not -1"),
    ({"top_p": 0}, r"decoding\.top_p must be a number above 0 and at most 1, not 0"),
    ({"do_sample": True, "temperature": 1e9},
     r"decoding\.temperature must be a number above 0 and at most 2 when sampling \(do_sample true\), not 1000000000\.0"),
    ({"do_sample": True, "temperature": 0}, r"decoding\.temperature must be a number above 0 .* when sampling"),
    ({"do_sample": True, "temperature": -0.5}, r"decoding\.temperature must be a number above 0"),
    ({"temperature": "hot"}, r"decoding\.temperature must be a number at least 0 and at most 2, not 'hot'"),
    ({"num_return_sequences": 2.5}, r"decoding\.num_return_sequences must be a whole number of at least 1, not 2\.5"),
    ({"num_return_sequences": 0}, r"decoding\.num_return_sequences must be a whole number of at least 1, not 0"),
    ({"seed": "abc"}, r"decoding\.seed must be a whole number from 0 to \d+, not 'abc'"),
    ({"seed": -1}, r"decoding\.seed must be a whole number from 0"),
    ({"stop": ""}, r"decoding\.stop must be one stop sequence \(a non-empty string\) or a list of at most 4"),
    ({"stop": ["###", 3]}, r"decoding\.stop must be one stop sequence"),
    ({"stop": ["a", "b", "c", "d", "e"]}, r"decoding\.stop must be one stop sequence .* at most 4 of them"),
    ({"stop": {"x": 1}}, r"decoding\.stop must be one stop sequence"),
    ({"top_k": 5}, r"decoding\.top_k is not a decoding setting: the settings are do_sample, temperature, top_p, "
                   r"max_new_tokens, num_return_sequences, stop, seed, and the openai backend's options api, "),
    ({"temprature": 0.7}, r"decoding\.temprature is not a decoding setting"),
]


@pytest.mark.parametrize(("decoding", "message"), REFUSED)
def test_a_bad_decoding_is_refused_as_the_job_is_created(lab, decoding, message):
    with pytest.raises(GenerationError, match=message):
        _job(lab, _source(decoding))
    assert not GenerationJob.objects.exists()


def test_a_decoding_that_is_not_an_object_is_refused(lab):
    with pytest.raises(GenerationError, match=r"decoding must be a JSON object of settings, not \['stop'\]"):
        _job(lab, _source(["stop"]))


@pytest.mark.parametrize("decoding", [
    {},
    {"do_sample": False, "temperature": 0},  # not sampling: the temperature is not used
    {"do_sample": True, "temperature": 2, "top_p": 1, "seed": 7, "num_return_sequences": 1},
    {"do_sample": True, "temperature": 0.7, "top_p": 0.9, "max_new_tokens": 40, "num_return_sequences": 5},
    {"max_new_tokens": 40, "backoff_s": 0.01, "concurrency": 1, "max_retries": 1, "timeout_s": 30, "api": "chat"},
    {"stop": ["###", "\n\n"], "seed": 0},
    {"stop": None},
])
def test_the_decodings_the_app_and_its_fixtures_store_are_accepted(lab, decoding):
    assert _job(lab, _source(decoding)).status == GenerationJob.Status.QUEUED


def test_do_sample_false_as_a_string_no_longer_samples_at_temperature_1(lab):
    """The audit's probe: refused before any request; the same source with a JSON false decodes greedily."""
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY]), {})) as server:
        with pytest.raises(GenerationError, match=r"decoding\.do_sample must be true or false"):
            _job(lab, _source({"do_sample": "false", "concurrency": 1}, server.url))
        RationaleSource.objects.filter(name="probe").update(decoding={"do_sample": False, "concurrency": 1})
        job = _run(_job(lab, RationaleSource.objects.get(name="probe")))
    assert job.status == GenerationJob.Status.DONE, job.error
    assert {r["json"]["temperature"] for r in server.requests} == {0.0}
    assert {r.generation_info["decoding"]["do_sample"] for r in job.source.rationales.all()} == {False}


def test_a_stop_given_as_one_string_is_one_stop_sequence(lab):
    """The audit's probe: "###" was sent, and cut at, as "#", "#", "#"."""
    assert Decoding.from_json({"stop": "Reason:"}).stop == ["Reason:"]
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY]), {})) as server:
        job = _run(_job(lab, _source({"stop": "###", "concurrency": 1, "backoff_s": 0.01}, server.url)))
    assert job.status == GenerationJob.Status.DONE, job.error
    assert [r["json"]["stop"] for r in server.requests] == [["###"], ["###"]]
    assert {tuple(r.generation_info["decoding"]["stop"]) for r in job.source.rationales.all()} == {("###",)}


def test_a_question_generator_and_a_genu_answerer_read_their_decoding_by_the_same_rules(lab):
    from studies.models import QuestionGenerator

    generator = QuestionGenerator.objects.create(name="qg", backend="openai", model_name_or_path="gpt-x",
                                                 endpoint_url="http://127.0.0.1:9/v1",
                                                 decoding={"do_sample": True, "top_p": 7})
    with pytest.raises(GenerationError, match=r"decoding\.top_p must be a number above 0 and at most 1, not 7"):
        generation_job_create(kind="generalization_questions", generator=generator, dataset=lab["dataset"],
                              split="dev", user=lab["root"], enqueue=False)
    assert not GenerationJob.objects.exists()


def test_quark_settings_take_the_same_top_p_and_temperature_rules():
    """One owner of the rule (``backends.top_p_problem`` / ``temperature_problem``): Quark always samples."""
    with pytest.raises(ValueError, match=r"^top_p must be a number above 0 and at most 1, not 0\.0$"):
        quark.QuarkSettings.from_json({"top_p": 0})
    with pytest.raises(ValueError, match=r"^temperature must be a number above 0 and at most 2 when sampling"):
        quark.QuarkSettings.from_json({"temperature": 1e9})
    with pytest.raises(ValueError, match=r"^temperature must be a number above 0"):
        quark.QuarkSettings.from_json({"temperature": 0})
    assert quark.QuarkSettings.from_json({"top_p": 1, "temperature": 2}).top_p == 1.0


# --- templates ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("template", "message"), [
    ("explain {dataset} question: {qestion} {choices}",
     r"rationale source 'probe': template: \{qestion\} is not a placeholder; the placeholders are \{dataset\}, "
     r"\{question\}, \{choices\}, \{choices_csv\}, \{demonstrations\}, \{answer\}, \{rationale\}"),
    ("{demonstrations}\nAnswer the question.\nAnswer:",
     r"rationale source 'probe': template: it has no \{question\}, so every item would get the same prompt"),
])
def test_a_template_that_cannot_be_used_is_refused_as_the_job_is_created(lab, template, message):
    with pytest.raises(GenerationError, match=message):
        _job(lab, _source({}, template=template))
    assert not GenerationJob.objects.exists()


def test_a_template_with_known_placeholders_and_other_braces_is_accepted(lab):
    source = _source({}, template='{demonstrations}\nQ: {question} ({choices_csv}) reply as {"answer": ...}\nAnswer:')
    assert _job(lab, source).status == GenerationJob.Status.QUEUED


# --- saving a source (the admin's form goes through content_row_save) ------------------------------
def _admin_post(client, **fields):
    data = {"name": "typed", "kind": "lm", "backend": "openai", "model_name_or_path": "gpt-x",
            "endpoint_url": "http://127.0.0.1:9/v1", "template": "", "decoding": "{}", "demonstrations": "[]",
            "seed": "0", "training": "{}", "description": "", **fields}
    return client.post(reverse("admin:studies_rationalesource_add"), data, follow=True)


@pytest.mark.parametrize(("fields", "message"), [
    ({"decoding": '{"do_sample": "false"}'}, "decoding.do_sample must be true or false"),
    ({"decoding": '{"stop": ""}'}, "decoding.stop must be one stop sequence"),
    ({"template": "Q: {qestion}"}, "template: {qestion} is not a placeholder"),
    ({"template": "Answer:"}, "template: it has no {question}"),
])
def test_a_source_saved_with_a_bad_decoding_or_template_is_refused(lab, client, fields, message):
    client.force_login(lab["root"])
    response = _admin_post(client, **fields)
    assert any(message in str(m) for m in response.context["messages"]), [str(m) for m in response.context["messages"]]
    assert not RationaleSource.objects.filter(name="typed").exists()


def test_a_source_saved_with_a_good_decoding_and_template_is_kept(lab, client):
    client.force_login(lab["root"])
    _admin_post(client, decoding='{"do_sample": true, "temperature": 0.7, "stop": "###"}',
                template="{demonstrations}\nQuestion: {question}\nAnswer:")
    assert RationaleSource.objects.get(name="typed").decoding["stop"] == "###"


def test_a_quark_policy_named_in_its_params_takes_the_template_rule_too(lab):
    """A Quark job names its policy as its source or by ``params["policy_path"]`` (a source's name or
    id); the second way skipped the template check and trained on ``explain {qestion}``."""
    RationaleSource.objects.create(name="legacy", kind="lm", backend="seq2seq", model_name_or_path="t5-small",
                                   template="explain {qestion}")  # saved before the rule
    with pytest.raises(GenerationError, match=r"policy 'legacy': template: \{qestion\} is not a placeholder"):
        generation_job_create(kind="quark", dataset=lab["dataset"], split="dev", user=lab["root"], enqueue=False,
                              params={"reward": "marker:is", "policy_path": "legacy"})
    assert not GenerationJob.objects.exists()
