"""No worker page answers 500 (issue 10 item 10): a NUL character, which no database text column
can store (PostgreSQL refuses it), in any parameter, token or form field of any worker entry
point gets a 400 page that says what was wrong, and nothing is written."""
from __future__ import annotations

import pytest
from django.test import Client

from annotations.models import (
    Annotation,
    Assignment,
    OpenLink,
    Participant,
    ParticipantLink,
    QualificationGrant,
)
from studies.models import Platform
from tests.annotations.factories import add_qualification, make_study
from tests.annotations.pages import entry_url, form_fields, landing_nonce, start

pytestmark = pytest.mark.django_db

NUL = "\x00"
MTURK = {"assignmentId": "3ASSIGN", "hitId": "3HIT", "workerId": "AWORKER", "turkSubmitTo": "https://www.mturk.com"}
PROLIFIC = {"PROLIFIC_PID": "5a9d64f5f6dfdd0001eaa73d", "STUDY_ID": "66a1bd0c9e8f7a6b5c4d3e2f",
            "SESSION_ID": "66a2bd0c9e8f7a6b5c4d3e2f"}


def _platform_entry(platform, params, name):
    def build(client):
        study = make_study(platform=platform)
        return "get", entry_url(study, **{**params, name: params[name][:2] + NUL + params[name][2:]}), {}
    return build


def _task(client, *, qualification=False) -> str:
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    if qualification:
        add_qualification(study)
    return start(client, entry_url(study))


def _task_token_with_nul(path):
    def build(client):
        task = _task(client)
        return ("post" if path else "get"), task[:-1] + NUL + "/" + path, {"consent": "yes"}
    return build


def _answer_with(name, value):
    def build(client):
        task = _task(client)
        fields = form_fields(client.get(task).content.decode())
        return "post", task + "answer", {**fields, "answer": "yes", "flag": "1", name: value}
    return build


def _qualification_with_nul(client):
    task = _task(client, qualification=True)
    return "post", task + "qualification", {"q_1": "yes" + NUL}


def _link_token(kind):
    def build(client):
        study = make_study()
        if kind == "l":
            token = ParticipantLink.objects.create(study=study).token
        else:
            token = OpenLink.objects.create(study=study).token
        return "get", f"/w/{kind}/{token[:5]}{NUL}{token[5:]}/", {}
    return build


def _identifier_with_nul(client):
    study = make_study()
    url = entry_url(study)
    return "post", url, {"consent": "yes", "nonce": landing_nonce(client, url), "identifier": "lab" + NUL + "42"}


ENTRY_POINTS = {
    "mturk workerId": _platform_entry(Platform.MTURK, MTURK, "workerId"),
    "mturk assignmentId": _platform_entry(Platform.MTURK, MTURK, "assignmentId"),
    "mturk hitId": _platform_entry(Platform.MTURK, MTURK, "hitId"),
    "mturk turkSubmitTo": _platform_entry(Platform.MTURK, MTURK, "turkSubmitTo"),
    "prolific PROLIFIC_PID": _platform_entry(Platform.PROLIFIC, PROLIFIC, "PROLIFIC_PID"),
    "prolific STUDY_ID": _platform_entry(Platform.PROLIFIC, PROLIFIC, "STUDY_ID"),
    "prolific SESSION_ID": _platform_entry(Platform.PROLIFIC, PROLIFIC, "SESSION_ID"),
    "study token": lambda client: ("get", entry_url(make_study())[:-2] + NUL + "/", {}),
    "/w/a/ task page": _task_token_with_nul(""),
    "/w/a/ consent": _task_token_with_nul("consent"),
    "/w/a/ answer": _task_token_with_nul("answer"),
    "/w/a/ qualification": _task_token_with_nul("qualification"),
    "/w/a/ submit": _task_token_with_nul("submit"),
    "/w/a/ leave": _task_token_with_nul("leave"),
    "/w/l/ link token": _link_token("l"),
    "/w/o/ open link token": _link_token("o"),
    "flag_note": _answer_with("flag_note", "broken" + NUL + "question"),
    "answer": _answer_with("answer", "yes" + NUL),
    "a field's name": _answer_with("flag" + NUL, "1"),
    "qualification answer": _qualification_with_nul,
    "participant identifier": _identifier_with_nul,
}


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_a_nul_character_anywhere_gets_a_clear_400_and_writes_nothing(entry_point):
    client = Client()
    method, url, data = ENTRY_POINTS[entry_point](client)
    before = (Participant.objects.count(), Assignment.objects.count(), Annotation.objects.count(),
              QualificationGrant.objects.count())
    response = getattr(client, method)(url, data)
    assert response.status_code == 400, (entry_point, response.status_code)
    page = response.content.decode()
    assert "not allowed (a NUL byte)" in page and NUL not in page
    assert (Participant.objects.count(), Assignment.objects.count(), Annotation.objects.count(),
            QualificationGrant.objects.count()) == before
