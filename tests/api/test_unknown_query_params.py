"""A query parameter an endpoint does not read is a 400 naming it, never silently ignored; and a
dataset's item count is over the items its reader may read.

Before: django-filter ignored unknown parameters, so ``export/scores/?worker=...&date=...`` (filters
the README promised, which the scores' filter set never had) answered 200 with every row of the
study, as did ``/api/v1/scores/?worker=``, ``/api/v1/assignments/?source=`` and
``/api/v1/generalization-questions/?type=`` (the filter is ``qtype``): a researcher quoted numbers
over data they believed filtered. And ``/api/v1/datasets/<id>/`` gave a view-share reader the whole
dataset's ``n_items`` though they may list only the study's items."""
from __future__ import annotations

import pytest

from lab.pseudonyms import worker_pseudonym
from studies.models import StudyShare
from studies.services.sharing import study_share
from tests.api.test_exports import download
from tests.factories import ItemFactory

pytestmark = pytest.mark.django_db


def test_score_export_names_unknown_params_instead_of_exporting_everything(client_for, study_data):
    client = client_for(study_data.study.owner)
    url = f"/api/v1/studies/{study_data.study.pk}/export/scores/"

    response, body = download(client, url, worker="w_0123456789abcdef", date="1999-01-01", bogus="x")

    assert response.status_code == 400, body
    errors = response.json()
    assert set(errors) == {"worker", "date", "bogus"}, errors
    assert "Unknown query parameter 'worker'" in errors["worker"][0]
    for accepted in ("file_format", "source", "split", "utility"):
        assert accepted in errors["bogus"][0]
    assert "include_raw_worker_ids" not in errors["bogus"][0]  # scores have no worker column


def test_exports_still_take_their_filters_and_options(client_for, study_data):
    client = client_for(study_data.study.owner)
    study = study_data.study
    gpt3 = study_data.sources[0]
    response, body = download(client, f"/api/v1/studies/{study.pk}/export/scores/", file_format="jsonl",
                              source=gpt3.name, split="test", utility="useful")
    assert response.status_code == 200, body
    assert body.count(b"\n") == len(study_data.items)
    worker = worker_pseudonym(study_data.participants[0].platform, study_data.participants[0].external_id)
    response, body = download(client, f"/api/v1/studies/{study.pk}/export/annotations/", file_format="jsonl",
                              worker=worker, date="1999-01-01", include_raw_worker_ids="false")
    assert response.status_code == 200, body
    assert body == b""  # nobody answered in 1999


@pytest.mark.parametrize(("path", "params", "unknown"), [
    ("/api/v1/scores/", {"worker": "w_0123456789abcdef"}, "worker"),
    ("/api/v1/assignments/", {"source": "nonexistent"}, "source"),
    ("/api/v1/generalization-questions/", {"type": "rephrase"}, "type"),
    ("/api/v1/annotations/", {"bogus": "x", "page_size": 5}, "bogus"),
])
def test_a_list_names_a_param_it_does_not_read(client_for, study_data, path, params, unknown):
    response = client_for(study_data.study.owner).get(path, params)

    assert response.status_code == 400, response.content
    errors = response.json()
    assert set(errors) == {unknown}, errors
    assert f"Unknown query parameter '{unknown}'" in errors[unknown][0]
    assert "cursor" in errors[unknown][0] and "ordering" in errors[unknown][0]


def test_lists_still_take_filters_pagination_ordering_and_their_own_params(client_for, study_data):
    client = client_for(study_data.study.owner)
    study = study_data.study
    response = client.get("/api/v1/generalization-questions/", {"qtype": "rephrase"})
    assert response.status_code == 200, response.content
    response = client.get("/api/v1/annotations/", {"study": study.pk, "ordering": "-answered_at", "page_size": 2,
                                                   "include_raw_worker_ids": "false", "format": "json"})
    assert response.status_code == 200, response.content
    assert len(response.json()["results"]) == 2
    following = client.get(response.json()["next"])
    assert following.status_code == 200, following.content
    response = client.get(f"/api/v1/assignments/{study_data.assignments[0].pk}/", {"include_raw_worker_ids": "0"})
    assert response.status_code == 200, response.content


def test_a_dataset_counts_the_items_its_reader_may_read(client_for, study_data, make_user):
    study = study_data.study
    for i in range(5):  # items of the dataset that no study shows
        ItemFactory(dataset=study.dataset, split="train", external_id=f"unshown-{i}")
    reader = make_user("rex")
    study_share(study=study, user=study.owner, with_user=reader, level=StudyShare.Level.VIEW)
    client = client_for(reader)
    listed = client.get("/api/v1/items/", {"dataset": study.dataset.pk}).json()["results"]

    dataset = client.get(f"/api/v1/datasets/{study.dataset.pk}/")

    assert dataset.status_code == 200, dataset.content
    assert dataset.json()["n_items"] == len(listed) == len(study_data.items)
    curator = make_user("cora", perms=["studies.view_dataset", "studies.view_item"])
    whole = client_for(curator).get(f"/api/v1/datasets/{study.dataset.pk}/").json()
    assert whole["n_items"] == len(study_data.items) + 5  # the view permission reads every item


def test_an_export_refuses_a_study_other_than_its_url(client_for, study_data):
    """The export is the URL's study: a ``study`` parameter (a filter of the list the export shares)
    was dropped without a word, so ``?study=<another>`` exported this study as if it were that one."""
    client = client_for(study_data.study.owner)
    for export in ("annotations", "scores"):
        url = f"/api/v1/studies/{study_data.study.pk}/export/{export}/"
        response, body = download(client, url, study="999999")
        assert response.status_code == 400, body
        assert "Unknown query parameter 'study'" in response.json()["study"][0]


@pytest.mark.parametrize(("action", "params", "unknown"), [
    ("summary/", {"source": "gpt3"}, "source"),
    ("results/", {"source": "gpt3"}, "source"),
    ("results/", {"split": "train"}, "split"),  # was a 404: the study list's filter looked the study up
    ("cost/", {"bogus": "x"}, "bogus"),
    ("withdrawals/", {"worker": "w_x"}, "worker"),
    ("bundle/", {"source": "gpt3"}, "source"),
    ("", {"kind": "generalization"}, "kind"),
])
def test_an_action_on_one_study_names_a_param_it_does_not_read(client_for, study_data, action, params, unknown):
    response = client_for(study_data.study.owner).get(f"/api/v1/studies/{study_data.study.pk}/{action}", params)

    assert response.status_code == 400, response.content[:300]
    errors = response.json()
    assert set(errors) == {unknown}, errors
    assert f"Unknown query parameter '{unknown}'" in errors[unknown][0]


def test_actions_on_one_study_still_take_the_params_they_read(client_for, study_data):
    client = client_for(study_data.study.owner)
    url = f"/api/v1/studies/{study_data.study.pk}/"
    response = client.get(f"{url}cost/", {"platform": "prolific", "max_assignments_per_hit": 9, "format": "json"})
    assert response.status_code == 200, response.content
    assert response.json()["platform"] == "prolific"
    response = client.get(f"{url}cost/", {"bogus": "x"})
    assert "max_assignments_per_hit" in response.json()["bogus"][0] and "platform" in response.json()["bogus"][0]
    for action in ("", "results/", "summary/", "withdrawals/"):
        response = client.get(f"{url}{action}", {"format": "json"})
        assert response.status_code == 200, (action, response.content[:300])
    # the study list still takes its filters
    response = client.get("/api/v1/studies/", {"split": "train", "source": "gpt3"})
    assert response.status_code == 200, response.content


@pytest.mark.parametrize("size", ["0", "-5", "ten", "2.5", "\u0663", "1_000", "+3"])  # another script's 3, underscores, a sign
def test_a_page_size_that_is_not_a_whole_number_from_1_is_a_400_naming_the_range(client_for, study_data, size):
    response = client_for(study_data.study.owner).get("/api/v1/annotations/", {"page_size": size})

    assert response.status_code == 400, response.content[:300]
    (message,) = response.json()["page_size"]
    assert f"{size!r} is not a page size" in message and "from 1 to 1000" in message


def test_a_page_size_over_the_largest_is_read_as_the_largest(client_for, study_data):
    response = client_for(study_data.study.owner).get("/api/v1/annotations/", {"page_size": 5})
    assert response.status_code == 200 and len(response.json()["results"]) == 5
    response = client_for(study_data.study.owner).get("/api/v1/annotations/", {"page_size": 10**6})
    assert response.status_code == 200, response.content[:300]
    assert len(response.json()["results"]) == 24 and response.json()["next"] is None  # every answer, on one page


def test_a_page_size_of_any_length_is_read_as_at_most_the_largest(client_for, study_data):
    """Past 4,300 digits int() refuses a number (Python's limit): it was turned into 404 "Invalid
    cursor" instead of the largest page the README promises for a larger size."""
    response = client_for(study_data.study.owner).get("/api/v1/annotations/", {"page_size": "9" * 5000})
    assert response.status_code == 200, response.content[:300]
