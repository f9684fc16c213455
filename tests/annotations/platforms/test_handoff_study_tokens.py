"""A study's entry URL and completion code (``annotations.platforms.handoff``) are stored on the
study, made once when it is made: rotating ``DJANGO_SECRET_KEY``, or moving the installation with a
fresh one (README), keeps every URL already sent to MTurk or Prolific or shared, and every code
workers are given; studies made before they were stored keep the values the key once gave them
(studies migration 0020)."""
from __future__ import annotations

import hashlib
import hmac

import pytest
from django.conf import settings
from django.core import signing
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from annotations.models import Assignment
from annotations.platforms import handoff
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from studies.models import Study
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, start

ROTATED = "a-new-key-generated-by-the-move-" + "x" * 32
BEFORE = [("studies", "0019_model_paths_relative_to_model_dir")]
FILLED = [("studies", "0020_study_entry_token_fill")]
PID, SESSION = "5a9d64f5f6dfdd0001eaa73d", "66a2bd0c9e8f7a6b5c4d3e2f"


def _path(url: str) -> str:
    return url.removeprefix(handoff.public_url(""))


@pytest.mark.django_db
def test_a_shared_entry_url_still_opens_its_study_after_the_secret_key_changes(client):
    study = make_study()
    url = handoff.study_entry_url(study)  # sent out under the key of the day

    with override_settings(SECRET_KEY=ROTATED):
        assert handoff.study_entry_url(study) == url
        task = start(client, _path(url))
        complete_task(client, task)
        assert client.post(task + "submit").status_code == 302
    assert Assignment.objects.get().status == Assignment.Status.SUBMITTED


@pytest.mark.django_db
def test_a_published_prolific_study_takes_its_workers_after_the_secret_key_changes(client, prolific):
    study = make_study(platform="prolific", n_items=4, n_sources=1, units_per_task=2, status="draft", reward=2)
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    study.refresh_from_db()
    url = handoff.study_entry_url(study).split("?")[0]  # as Prolific holds it

    with override_settings(SECRET_KEY=ROTATED):
        task = start(client, _path(url) + f"?PROLIFIC_PID={PID}&STUDY_ID={publication.prolific_study_id}"
                                          f"&SESSION_ID={SESSION}")
        complete_task(client, task)
        response = client.post(task + "submit")
    assert response["Location"] == f"{handoff.PROLIFIC_COMPLETE_URL}?cc={publication.completion_code}"


@pytest.mark.django_db
def test_the_studys_own_completion_code_does_not_change_with_the_secret_key():
    study = make_study(platform="prolific", status="draft")  # no publication stores a code
    code = handoff.study_completion_code(study)
    assert len(code) == 8 and code == code.upper() and int(code, 16) >= 0

    with override_settings(SECRET_KEY=ROTATED):
        assert handoff.study_completion_code(study) == code


@pytest.mark.django_db
def test_each_study_has_its_own_token_and_an_unknown_token_is_not_found(client):
    first, second = make_study(status="draft"), make_study(status="draft")
    tokens = {handoff.study_token(first.pk), handoff.study_token(second.pk)}
    assert len(tokens) == 2
    assert all(len(token) >= 32 and "/" not in token for token in tokens)
    assert handoff.study_for_token(handoff.study_token(second.pk)) == second
    assert handoff.study_for_token("no-such-token") is None
    assert client.get("/w/s/no-such-token/").status_code == 404
    forged = signing.Signer(salt="annotations.platforms.study").sign(str(first.pk))  # the old, key-derived form
    assert client.get(f"/w/s/{forged}/").status_code == 404
    with CaptureQueriesContext(connection) as queries:  # longer than any token: not looked up
        assert handoff.study_for_token("x" * 65) is None
    assert len(queries) == 0


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_the_token_and_code_each_existing_study_was_published_with(migrate_to, settings):
    old = migrate_to(BEFORE)
    Dataset, Study = old.get_model("studies", "Dataset"), old.get_model("studies", "Study")
    dataset = Dataset.objects.create(name="d")
    studies = [Study.objects.create(name=f"s{i}", dataset=dataset) for i in range(2)]
    # What the entry URLs and codes were derived as before they were stored.
    derived = {
        study.pk: (signing.Signer(salt="annotations.platforms.study").sign(str(study.pk)),
                   hmac.new(settings.SECRET_KEY.encode(), f"completion:{study.pk}".encode(),
                            hashlib.sha256).hexdigest()[:8].upper())
        for study in studies
    }

    Study = migrate_to(FILLED).get_model("studies", "Study")
    assert {s.pk: (s.entry_token, s.completion_code) for s in Study.objects.all()} == derived


@pytest.mark.django_db
def test_a_study_inserted_without_a_token_gets_one_when_first_read(client):
    # The previous release inserting a study while a deploy runs (or a migration's historical model)
    # leaves both columns empty: the first read stores what that release gave it, once.
    study = make_study(status="draft")
    Study.objects.filter(pk=study.pk).update(entry_token=None, completion_code=None)
    study.refresh_from_db()
    url = handoff.study_entry_url(study)
    token = Study.objects.get(pk=study.pk).entry_token
    # the values the previous release handed out for it, under the key in force
    assert token == signing.Signer(salt="annotations.platforms.study").sign(str(study.pk))
    assert url.endswith(f"/w/s/{token}/")
    assert handoff.study_token(study.pk) == token  # made once, then kept
    code = handoff.study_completion_code(study)
    assert code == hmac.new(settings.SECRET_KEY.encode(), f"completion:{study.pk}".encode(),
                            hashlib.sha256).hexdigest()[:8].upper()
    assert Study.objects.get(pk=study.pk).completion_code == code
    assert handoff.study_for_token(token) == study


@pytest.mark.django_db
def test_a_link_the_previous_release_gave_opens_its_study_before_anyone_read_its_ids(client):
    # A study the previous release inserted (and published) during a deploy: its worker opens the
    # key-derived link before the researcher's pages read the study's ids.
    study = make_study(status="open")
    Study.objects.filter(pk=study.pk).update(entry_token=None, completion_code=None)
    derived = signing.Signer(salt="annotations.platforms.study").sign(str(study.pk))
    assert client.get(f"/w/s/{derived}/").status_code == 200
    assert Study.objects.get(pk=study.pk).entry_token == derived
    other = make_study(status="open")  # a study with a stored token: its derived form opens nothing
    assert client.get(f"/w/s/{signing.Signer(salt='annotations.platforms.study').sign(str(other.pk))}/").status_code == 404

