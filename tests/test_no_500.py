"""No input gets a 500 (issue 10 item 10): one test over every entry point a crowdworker, a
researcher's upload or an API client reaches. Each hostile input (a NUL character, which no
PostgreSQL text or jsonb can store; a value longer than its column; JSON nested thousands deep)
gets a 4xx whose message says what was wrong and where (an importer: the line, the field and the
reason), and nothing is written."""
from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from annotations.models import (
    Annotation,
    Assignment,
    OpenLink,
    Participant,
    ParticipantLink,
    QualificationGrant,
)
from scoring.models import ScoreRun
from studies.api.tokens import api_token_create
from studies.models import (
    Dataset,
    GeneralizationQuestion,
    GenerationJob,
    ImportRecord,
    Item,
    Platform,
    Rationale,
    RationaleSource,
    Study,
)
from tests.annotations.factories import add_qualification, make_study
from tests.annotations.pages import entry_url, form_fields, landing_form, start
from tests.factories import DatasetFactory, ItemFactory

pytestmark = pytest.mark.django_db

NUL = "\x00"
SAYS_NUL_PAGE = "contains a NUL character (\\x00), which is not allowed. Open the link exactly"
SAYS_NUL_TEXT = "contains a NUL character"
SAYS_TOO_DEEP = "nested more than 64 levels"
MTURK = {"assignmentId": "3ASSIGN", "hitId": "3HIT", "workerId": "AWORKER", "turkSubmitTo": "https://www.mturk.com"}
PROLIFIC = {"PROLIFIC_PID": "5a9d64f5f6dfdd0001eaa73d", "STUDY_ID": "66a1bd0c9e8f7a6b5c4d3e2f",
            "SESSION_ID": "66a2bd0c9e8f7a6b5c4d3e2f"}
WRITTEN = [Participant, Assignment, Annotation, QualificationGrant, Dataset, Item, RationaleSource, Rationale,
           GeneralizationQuestion, ImportRecord, Study, ScoreRun, GenerationJob]


@dataclass
class Probe:
    send: Callable[[], object]
    says: str


def _said(response) -> str:
    """What the answer tells its reader: an importer's row errors as ``line L: field 'F': reason``,
    a JSON body as JSON, a page as its text."""
    rows = None
    if response.get("Content-Type", "").startswith("application/json"):
        body = response.json()
        rows = body.get("errors") if isinstance(body, dict) else None
        if rows is None:
            return body["detail"] if isinstance(body, dict) and "detail" in body else json.dumps(body)
        rows = [(e["line"], e["field"], e["reason"]) for e in rows]
    elif response.context and response.context.get("errors"):
        rows = [(e.line, e.field, e.reason) for e in response.context["errors"]]
    if rows is not None:
        return "\n".join(f"line {line}: field '{field}': {reason}" for line, field, reason in rows)
    return html.unescape(response.content.decode())


# --- worker pages ---------------------------------------------------------------------------------

def _worker(method: str, url: str, data: dict | None = None, client: Client | None = None) -> Probe:
    client = client or Client()
    return Probe(lambda: getattr(client, method)(url, data or {}), SAYS_NUL_PAGE)


def _platform_entry(platform, params, name):
    def build():
        study = make_study(platform=platform)
        return _worker("get", entry_url(study, **{**params, name: params[name][:2] + NUL + params[name][2:]}))
    return build


def _task(client, *, qualification=False) -> str:
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    if qualification:
        add_qualification(study)
    return start(client, entry_url(study))


def _task_token_with_nul(path):
    def build():
        client = Client()
        task = _task(client)
        return _worker("post" if path else "get", task[:-1] + NUL + "/" + path, {"consent": "yes"}, client)
    return build


def _answer_with(name, value):
    def build():
        client = Client()
        task = _task(client)
        fields = form_fields(client.get(task).content.decode())
        return _worker("post", task + "answer", {**fields, "answer": "yes", "flag": "1", name: value}, client)
    return build


def _qualification_with_nul():
    client = Client()
    task = _task(client, qualification=True)
    return _worker("post", task + "qualification", {"q_1": "yes" + NUL}, client)


def _link_token(kind):
    def build():
        study = make_study()
        model = ParticipantLink if kind == "l" else OpenLink
        token = model.objects.create(study=study).token
        return _worker("get", f"/w/{kind}/{token[:5]}{NUL}{token[5:]}/")
    return build


def _identifier_with_nul():
    client = Client()
    url = entry_url(make_study())
    return _worker("post", url, landing_form(client, url, identifier="lab" + NUL + "42"),
                   client)


# --- importers: the API and the admin's upload page -------------------------------------------------

def _researcher():
    user = get_user_model().objects.create_user("importer", password="pw-importer-1", is_staff=True)
    # view_dataset: rationales go into an existing dataset, which an import finds among those its user may see
    for codename in ("add_importrecord", "add_item", "add_study", "add_generationjob", "view_dataset"):
        user.user_permissions.add(Permission.objects.get(content_type__app_label="studies", codename=codename))
    user.user_permissions.add(Permission.objects.get(content_type__app_label="scoring", codename="add_scorerun"))
    return get_user_model().objects.get(pk=user.pk)


def _api_client() -> APIClient:
    _, key = api_token_create(user=_researcher(), name="probe", read_only=False, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _sqa(question="Is the sky blue?", qid="q2") -> bytes:
    records = [{"qid": "q1", "question": "Is water wet?", "answer": True, "facts": [], "decomposition": []},
               {"qid": qid, "question": question, "answer": False, "facts": [], "decomposition": []}]
    return ("[\n" + ",\n".join(json.dumps(r) for r in records) + "\n]\n").encode()


def _rationales(source="gpt3", rationale="Water is a liquid.") -> bytes:
    DatasetFactory(name="Probe")
    ItemFactory(dataset=DatasetFactory._meta.model.objects.get(name="Probe"), external_id="q1", split="test")
    rows = [{"item_id": "q1", "source": "t5", "rationale": "Fine."},
            {"item_id": "q1", "source": source, "rationale": rationale}]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


IMPORTS = {
    # name: (kind, file name, content builder, extra form fields, what the answer must say)
    "question text": ("strategyqa", "sqa_test.json", lambda: _sqa(question="Is the sky" + NUL + " blue?"), {},
                      f"line 3: field 'question': the text {SAYS_NUL_TEXT}"),
    "item id over 200 characters": ("strategyqa", "sqa_test.json", lambda: _sqa(qid="q" * 201), {},
                                    "line 3: field 'external_id': Ensure this value has at most 200 characters"),
    "source name": ("rationales", "r.jsonl", lambda: _rationales(source="gp" + NUL + "t3"), {"dataset": "Probe"},
                    f"line 2: field 'source': the text {SAYS_NUL_TEXT}"),
    "rationale text": ("rationales", "r.jsonl", lambda: _rationales(rationale="Wa" + NUL + "ter"),
                       {"dataset": "Probe"}, f"line 2: field 'rationale': the text {SAYS_NUL_TEXT}"),
    "CSV cell": ("items", "items.csv", lambda: b"id,question,answer\nq1,Is it" + NUL.encode() + b"?,yes\n",
                 {"dataset": "Probe CSV", "task_format": "yes_no"}, f"line 2: field 'question': the text {SAYS_NUL_TEXT}"),
    "JSON nested 5,000 deep": ("items", "items.jsonl",
                               lambda: b'{"id": "q1", "question": "Is it?", "answer": "yes", "x": '
                               + b"[" * 5000 + b"]" * 5000 + b"}\n",
                               {"dataset": "Probe deep", "task_format": "yes_no"}, f"line 1: field '': JSON {SAYS_TOO_DEEP}"),
}


def _import_api(name):
    def build():
        kind, filename, content, extra, says = IMPORTS[name]
        client, upload = _api_client(), SimpleUploadedFile(filename, content())
        return Probe(lambda: client.post("/api/v1/imports/", {"kind": kind, "file": upload, **extra},
                                         format="multipart"), says)
    return build


def _import_admin(name):
    def build():
        kind, filename, content, extra, says = IMPORTS[name]
        client = Client()
        client.force_login(_researcher())
        upload = SimpleUploadedFile(filename, content())
        return Probe(lambda: client.post(reverse("admin:studies_import_data"), {"kind": kind, "file": upload, **extra}),
                     says)
    return build


# --- the admin's and the API's addresses and forms ------------------------------------------------

SAYS_NUL_REQUEST = "contains a NUL character (\\x00), which is not allowed"


def _admin_get(path):
    def build():
        client = Client()
        client.force_login(get_user_model().objects.create_superuser("root", "root@example.org", "pw-root-1"))
        make_study()
        return Probe(lambda: client.get(path), SAYS_NUL_REQUEST)
    return build


def _api_get(path):
    def build():
        client, study = _api_client(), make_study()
        return Probe(lambda: client.get(path.format(study=study.pk)), SAYS_NUL_REQUEST)
    return build


def _api_import_form():
    client, upload = _api_client(), SimpleUploadedFile("s.json", _sqa())
    return Probe(lambda: client.post("/api/v1/imports/", {"kind": "strategyqa", "file": upload,
                                                          "dataset": "Strat" + NUL + "egyQA"}, format="multipart"),
                 SAYS_NUL_REQUEST)


# --- JSON bodies of the API's writes ------------------------------------------------------------------

JSON_WRITES = ["/api/v1/studies/", "/api/v1/score-runs/", "/api/v1/generation-jobs/"]


def _json_body(url, body, says):
    def build():
        client = _api_client()
        return Probe(lambda: client.post(url, body, content_type="application/json"), says)
    return build


# --- a multipart form in UTF-7: lone surrogates -------------------------------------------------------
# Django decodes a ``multipart/form-data`` body in the charset it names, and UTF-7 turns ``+2AA-``
# into a lone surrogate (U+D800), which no page can be encoded with and no text stores: an answer
# page repeating the field was a 500, and a flag note was stored and made the researcher's flag list
# a 500. Every form, a worker's or a researcher's, is refused with a 400 naming the field
# (``lab.middleware.unstorable_in_request``).

BOUNDARY = "b0undary"
SURROGATE_UTF7 = "+2AA-"
SAYS_SURROGATE = "contains a lone surrogate (text that is not valid Unicode"


def _utf7_multipart(client, url, fields: dict):
    body = "".join(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
                   for name, value in fields.items()) + f"--{BOUNDARY}--\r\n"
    return client.generic("POST", url, body.encode("ascii"),
                          content_type=f"multipart/form-data; boundary={BOUNDARY}; charset=utf-7")


def _utf7_answer_with(field, value):
    def build():
        client = Client()
        task = _task(client)
        fields = {**form_fields(client.get(task).content.decode()), "answer": "yes"}
        fields[field] = value
        return Probe(lambda: _utf7_multipart(client, task + "answer", fields), f"“{field}” of the form {SAYS_SURROGATE}")
    return build


def _api_import_utf7():
    client = _api_client()
    return Probe(lambda: _utf7_multipart(client, "/api/v1/imports/", {"kind": "strategyqa", "dataset": SURROGATE_UTF7}),
                 f"“dataset” of the form {SAYS_SURROGATE}")


ENTRY_POINTS = {
    "mturk workerId": _platform_entry(Platform.MTURK, MTURK, "workerId"),
    "mturk assignmentId": _platform_entry(Platform.MTURK, MTURK, "assignmentId"),
    "mturk hitId": _platform_entry(Platform.MTURK, MTURK, "hitId"),
    "mturk turkSubmitTo": _platform_entry(Platform.MTURK, MTURK, "turkSubmitTo"),
    "prolific PROLIFIC_PID": _platform_entry(Platform.PROLIFIC, PROLIFIC, "PROLIFIC_PID"),
    "prolific STUDY_ID": _platform_entry(Platform.PROLIFIC, PROLIFIC, "STUDY_ID"),
    "prolific SESSION_ID": _platform_entry(Platform.PROLIFIC, PROLIFIC, "SESSION_ID"),
    "study token": lambda: _worker("get", entry_url(make_study())[:-2] + NUL + "/"),
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
    **{f"API import: {name}": _import_api(name) for name in IMPORTS},
    **{f"admin import: {name}": _import_admin(name) for name in IMPORTS},
    **{f"API {url}: JSON nested 5,000 deep": _json_body(url, "[" * 5000 + "]" * 5000, SAYS_TOO_DEEP)
       for url in JSON_WRITES},
    "admin list filter (split)": _admin_get("/admin/studies/item/?split=te%00st"),
    "admin list filter (status)": _admin_get("/admin/annotations/assignment/?status=a%00"),
    "admin search": _admin_get("/admin/studies/study/?q=a%00"),
    "API list filter": _api_get("/api/v1/rationales/?source=a%00b"),
    "API export filter": _api_get("/api/v1/studies/{study}/export/scores/?worker=a%00"),
    "API ordering": _api_get("/api/v1/items/?ordering=a%00"),
    "API import form field": _api_import_form,
    "API generation job: NUL inside params": _json_body(
        "/api/v1/generation-jobs/", json.dumps({"kind": "finetune", "params": {"preset": "quick", "note": "a" + NUL}}),
        f"at params.note: the text {SAYS_NUL_TEXT}"),
    "answer: a lone surrogate in step (UTF-7)": _utf7_answer_with("step", SURROGATE_UTF7),
    "answer: a lone surrogate in answer (UTF-7)": _utf7_answer_with("answer", SURROGATE_UTF7),
    "answer: a lone surrogate in flag_note (UTF-7)": _utf7_answer_with("flag_note", "x" + SURROGATE_UTF7),
    "API import: a lone surrogate in dataset (UTF-7)": _api_import_utf7,
}


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_hostile_input_gets_a_clear_4xx_and_writes_nothing(entry_point):
    probe = ENTRY_POINTS[entry_point]()
    before = [model.objects.count() for model in WRITTEN]
    response = probe.send()
    said = _said(response)
    assert 400 <= response.status_code < 500, (entry_point, response.status_code, said[:500])
    assert probe.says in said, (entry_point, said[:2000])
    assert NUL not in said
    assert [model.objects.count() for model in WRITTEN] == before


# --- a form in a charset Django refuses ---------------------------------------------------------------
# Issue 20 item 13: Django refuses an ``application/x-www-form-urlencoded`` form that is not UTF-8
# with ``BadRequest``; its own 400 page read the form again (for a CSRF token) and the request
# ended in a 500. ``lab.errors.bad_request`` answers 400 without reading it.

UTF16_FORM_URLS = {
    "/healthz": lambda: "/healthz",
    "/admin/login/": lambda: "/admin/login/",
    "worker entry": lambda: entry_url(make_study()),
    "answer": lambda: _task(Client()) + "answer",
    "API import": lambda: "/api/v1/imports/",
}


@pytest.mark.parametrize("target", UTF16_FORM_URLS)
def test_a_form_in_utf16_gets_a_400_not_a_500(target):
    url = UTF16_FORM_URLS[target]()
    before = [model.objects.count() for model in WRITTEN]
    client = Client(enforce_csrf_checks=True)
    client.cookies["csrftoken"] = "c" * 32
    response = client.post(url, "consent=yes",  # the test client encodes it in the charset named
                           content_type="application/x-www-form-urlencoded; charset=utf-16")
    assert response.status_code == 400, (target, response.status_code)
    assert "must be UTF-8 encoded" in _said(response)
    assert [model.objects.count() for model in WRITTEN] == before


# --- the admin's custom views and actions -------------------------------------------------------------
# Issue 20 item 13: the researcher's side answers hostile input as the worker pages do: the page
# again with an error (a redirect that carries a message, or a form with its errors) or a 4xx,
# never a 500, and nothing written. Each view's own form fields and each admin action's selection
# get values of the wrong type, out of range, unknown, and far too long.

HOSTILE_NUMBERS = ["abc", "1.5", "1e999", "-7", "99999999999999999999", ""]
LONG = "x" * 100_000
# Amounts Decimal reads but no platform can pay (they raised decimal.InvalidOperation: a 500).
NOT_AMOUNTS = ["NaN", "sNaN", "-NaN", "Infinity", "-Infinity", "1e999999", "0.1e1"]


@pytest.fixture
def admin_world():
    """A superuser (every page is reachable: these probe input, not rights) and an open study with
    one submitted MTurk task and a link publication."""
    from tests.annotations.platforms.conftest import submitted

    root = get_user_model().objects.create_superuser("root", "root@example.org", "pw-root-1")
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    assignment = submitted(study, platform=Platform.MTURK, worker_id="AWORKERONE", assignment_id="3ASSIGNONE")
    client = Client()
    client.force_login(root)
    return client, study, assignment


def _publish(study, _):
    return reverse("admin:annotations_publication_publish", args=[study.pk])


def _workers(study, assignment):
    return f"/admin/studies/study/{study.pk}/workers/{assignment.participant_id}/"


# name: (address, method, form or query)
ADMIN_VIEWS = {
    **{f"publish: make_links count={v!r}": (_publish, "post", {"action": "make_links", "count": v})
       for v in HOSTILE_NUMBERS},
    **{f"publish: open_link max_participants={v!r}": (_publish, "post", {"action": "open_link", "max_participants": v})
       for v in HOSTILE_NUMBERS if v},
    "publish: open_link completion code too long": (_publish, "post", {"action": "open_link", "completion_code": LONG}),
    **{f"publish: revoke_link link_id={v!r}": (_publish, "post", {"action": "revoke_link", "link_id": v})
       for v in HOSTILE_NUMBERS},
    "publish: unknown platform": (_publish, "post", {"action": "publish", "platform": "nope", "dry_run": "on"}),
    "publish: unknown link mode": (_publish, "post", {"action": "publish", "platform": "link", "link_mode": "nope"}),
    "publish: make_links label too long": (_publish, "post", {"action": "make_links", "count": "1", "label": LONG}),
    "publish: bonus ids not numbers": (_publish, "post", {"action": "bonus", "amount": "0.50", "assignment_ids": "a,b"}),
    "publish: bonus amount not a number": (_publish, "post", {"action": "bonus", "amount": "abc", "assignment_ids": "1"}),
    "publish: bonus kind unknown": (_publish, "post", {"action": "bonus", "amount": "0.5", "kind": "nope",
                                                       "assignment_ids": "1"}),
    "publish: unknown action": (_publish, "post", {"action": LONG}),
    "publish page: unknown platform": (_publish, "get", {"platform": "nope", "balance": "1"}),
    "links.csv: unknown platform": (lambda s, _: reverse("admin:annotations_publication_links_csv", args=[s.pk]),
                                    "get", {"platform": "nope"}),
    "worker: reject with a category and feedback too long": (_workers, "post", {
        "action": "reject", "assignment": "{assignment}", "category": LONG, "feedback": LONG}),
    "worker: bonus kind unknown": (_workers, "post", {"action": "bonus", "assignment": "{assignment}",
                                                      "amount": "0.10", "kind": "nope"}),
    "worker: bonus amount not a number": (_workers, "post", {"action": "bonus", "assignment": "{assignment}",
                                                             "amount": "abc"}),
    "worker: block with a reason too long": (_workers, "post", {"action": "block", "reason": LONG}),
    **{f"worker: approve assignment={v!r}": (_workers, "post", {"action": "approve", "assignment": v})
       for v in HOSTILE_NUMBERS},
    **{f"worker: bonus amount={v!r}": (_workers, "post", {"action": "bonus", "assignment": "{assignment}",
                                                          "amount": v})
       for v in NOT_AMOUNTS},
    **{f"publish: bonus amount={v!r}": (_publish, "post", {"action": "bonus", "amount": v,
                                                           "assignment_ids": "{assignment}"})
       for v in NOT_AMOUNTS},
    "worker: unknown action": (_workers, "post", {"action": LONG}),
    "progress.json: odd query": (lambda s, _: reverse("admin:studies_study_progress_json", args=[s.pk]), "get",
                                 {"since": "abc", "page": "-1"}),
    **{f"score now: study={v!r}": (lambda s, _: reverse("admin:scoring_scorerun_score"), "post", {"study": v})
       for v in HOSTILE_NUMBERS},
    **{f"import outcomes: dataset={v!r}": (lambda s, _: reverse("admin:scoring_scorerun_import_outcomes"), "post",
                                           {"dataset": v, "split": "nope", "study": LONG})
       for v in ("abc", "99999999999999999999")},
    "import data: unknown kind": (lambda s, _: reverse("admin:studies_import_data"), "post",
                                  {"kind": "nope", "dataset": LONG}),
    "import data: kind in the query": (lambda s, _: reverse("admin:studies_import_data"), "get", {"kind": LONG}),
    **{f"precision: difference={v!r}": (lambda s, _: reverse("admin:studies_study_precision", args=[s.pk]), "get",
                                        {"difference": v, "prior": "released"})
       for v in (*HOSTILE_NUMBERS, *NOT_AMOUNTS)},
    "precision: unknown prior": (lambda s, _: reverse("admin:studies_study_precision", args=[s.pk]), "get",
                                 {"prior": LONG, "difference": LONG}),
}


@pytest.mark.parametrize("view", ADMIN_VIEWS)
def test_hostile_input_to_an_admin_view_gets_the_page_with_an_error_not_a_500(admin_world, view):
    client, study, assignment = admin_world
    address, method, data = ADMIN_VIEWS[view]
    data = {k: v.replace("{assignment}", str(assignment.pk)) for k, v in data.items()}
    before = [model.objects.count() for model in WRITTEN] + [OpenLink.objects.count(), ParticipantLink.objects.count()]
    response = getattr(client, method)(address(study, assignment), data)
    assert response.status_code < 500, (view, response.status_code)
    if response.status_code == 302:
        assert "/login/" not in response["Location"]
        shown = client.get(response["Location"])
        assert shown.status_code < 500, (view, shown.status_code)
    after = [model.objects.count() for model in WRITTEN] + [OpenLink.objects.count(), ParticipantLink.objects.count()]
    assert after == before, view


def _admin_actions() -> list[tuple[str, str, str]]:
    """(model path, action name, selected value) for every custom action of every admin list."""
    from django.contrib import admin

    out = []
    for model, model_admin in admin.site._registry.items():
        for name in model_admin.actions or []:
            name = name if isinstance(name, str) else name.__name__
            if name == "delete_selected":
                continue
            for value in ("abc", "99999999999999999999", "1.5"):
                out.append((f"{model._meta.app_label}/{model._meta.model_name}", name, value))
    return out


ADMIN_ACTIONS = _admin_actions()


@pytest.mark.parametrize(("model", "action", "selected"), ADMIN_ACTIONS,
                         ids=[f"{m} {a} {s}" for m, a, s in ADMIN_ACTIONS])
def test_an_admin_action_on_a_hostile_selection_is_not_a_500(admin_world, model, action, selected):
    client, _, _ = admin_world
    before = [m.objects.count() for m in WRITTEN]
    response = client.post(f"/admin/{model}/", {"action": action, "_selected_action": [selected, "1"]})
    assert response.status_code == 302, (model, action, selected, response.status_code)
    shown = client.get(response["Location"]).content.decode()
    assert f"Nothing was done: the selection names {selected!r}, which is not a row of this list." in html.unescape(shown)
    assert [m.objects.count() for m in WRITTEN] == before
