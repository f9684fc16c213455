"""A local stand-in for the Prolific API (https://docs.prolific.com/api-reference), started by the
tests on 127.0.0.1 with a free port. It checks the request shapes the documented API requires
(the ``Authorization: Token`` header, required fields and their types, the reward as an integer
in the smallest currency unit, rejection message and category) and answers like the API,
keeping state so that a bonus paid twice really shows twice."""
from __future__ import annotations

import json
import re
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

REJECTION_CATEGORIES = {
    "TOO_QUICKLY", "TOO_SLOWLY", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL", "FAILED_CHECK", "LOW_EFFORT",
    "MALINGERING", "NO_CODE", "BAD_CODE", "NO_DATA", "UNSUPP_DEVICE", "OTHER",
}
PLACEHOLDERS = ("{{%PROLIFIC_PID%}}", "{{%STUDY_ID%}}", "{{%SESSION_ID%}}")
PAGE_SIZE = 2
BONUS_FEE_RATE = 0.3333  # the service fee a bonus set-up adds, as Prolific states it


def _id() -> str:
    return secrets.token_hex(12)  # Prolific ids are 24 hex characters


class FakeProlific:
    def __init__(self, token: str):
        self.token = token
        self.requests: list[dict] = []  # every request: method, path, headers, body
        self.studies: dict[str, dict] = {}
        self.submissions: dict[str, dict] = {}
        self.bulk_bonuses: dict[str, dict] = {}
        self.payments: list[dict] = []  # every pay call, duplicates included
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def do_GET(self):
                fake._handle(self, "GET")

            def do_POST(self):
                fake._handle(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def base(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def api_url(self) -> str:
        return f"{self.base}/api/v1/"

    # -- test helpers ---------------------------------------------------------------------------
    def add_submission(self, study_id: str, *, participant_id: str | None = None, status: str = "AWAITING REVIEW",
                       submission_id: str | None = None) -> dict:
        submission = {
            "id": submission_id or _id(), "study_id": study_id, "participant_id": participant_id or _id(),
            "status": status, "started_at": "2026-01-05T10:00:00Z", "completed_at": "2026-01-05T10:07:30Z",
            "bonus_payments": [],
        }
        self.submissions[submission["id"]] = submission
        return submission

    def add_study(self, *, name: str = "Another study", internal_name: str = "", status: str = "ACTIVE") -> dict:
        """A study the researcher made elsewhere (another app, the web app): it only fills the listing."""
        study = {"id": _id(), "name": name, "internal_name": internal_name, "status": status}
        self.studies[study["id"]] = study
        return study

    def calls(self, method: str, pattern: str) -> list[dict]:
        return [r for r in self.requests if r["method"] == method and re.fullmatch(pattern, r["path"])]

    # -- the API ----------------------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        path = parts.path
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        record = {"method": method, "path": path, "query": parse_qs(parts.query),
                  "headers": {k.lower(): v for k, v in handler.headers.items()}, "body": None}
        self.requests.append(record)
        if handler.headers.get("Authorization") != f"Token {self.token}":
            return self._send(handler, 401, {"error": {"detail": "Authentication credentials were not provided."}})
        if raw:
            if "application/json" not in (handler.headers.get("Content-Type") or ""):
                return self._send(handler, 415, {"error": {"detail": "Unsupported media type"}})
            try:
                record["body"] = json.loads(raw)
            except ValueError:
                return self._send(handler, 400, {"error": {"detail": "JSON parse error"}})
        body = record["body"] or {}
        routes = [
            ("POST", r"/api/v1/studies/", self._create_study),
            ("GET", r"/api/v1/studies/", self._list_studies),
            ("GET", r"/api/v1/studies/(?P<id>\w+)/", self._get_study),
            ("POST", r"/api/v1/studies/(?P<id>\w+)/transition/", self._transition_study),
            ("GET", r"/api/v1/studies/(?P<id>\w+)/submissions/", self._list_submissions),
            ("GET", r"/api/v1/submissions/(?P<id>\w+)/", self._get_submission),
            ("POST", r"/api/v1/submissions/(?P<id>\w+)/transition/", self._transition_submission),
            ("POST", r"/api/v1/submissions/bonus-payments/", self._setup_bonus),
            ("POST", r"/api/v1/bulk-bonus-payments/(?P<id>\w+)/pay/", self._pay_bonus),
        ]
        for route_method, pattern, view in routes:
            match = re.fullmatch(pattern, path)
            if route_method == method and match:
                status, payload = view(body=body, query=record["query"], **match.groupdict())
                return self._send(handler, status, payload)
        return self._send(handler, 404, {"error": {"detail": "Not found."}})

    @staticmethod
    def _send(handler, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    @staticmethod
    def _bad(field: str, detail: str):
        return 400, {"error": {"detail": {field: [detail]}}}

    def _create_study(self, *, body, query):
        for field in ("name", "description", "external_study_url", "prolific_id_option", "completion_codes",
                      "estimated_completion_time", "reward", "total_available_places"):
            if field not in body:
                return self._bad(field, "This field is required.")
        if not isinstance(body["reward"], int) or isinstance(body["reward"], bool) or body["reward"] <= 0:
            return self._bad("reward", "A positive integer in the smallest currency unit is required.")
        if not isinstance(body["total_available_places"], int) or body["total_available_places"] < 1:
            return self._bad("total_available_places", "A positive integer is required.")
        if not isinstance(body["estimated_completion_time"], int) or body["estimated_completion_time"] < 1:
            return self._bad("estimated_completion_time", "A positive integer (minutes) is required.")
        if body["prolific_id_option"] not in {"question", "url_parameters", "not_required"}:
            return self._bad("prolific_id_option", "Invalid choice.")
        url = body["external_study_url"]
        if body["prolific_id_option"] == "url_parameters" and not all(p in url for p in PLACEHOLDERS):
            return self._bad("external_study_url", "The URL must carry PROLIFIC_PID, STUDY_ID and SESSION_ID.")
        codes = body["completion_codes"]
        if not codes or not all({"code", "code_type", "actions"} <= set(c) for c in codes):
            return self._bad("completion_codes", "Each code needs code, code_type and actions.")
        study = {**body, "id": _id(), "status": "UNPUBLISHED"}
        self.studies[study["id"]] = study
        return 201, study

    def _list_studies(self, *, body, query):
        """Like the submissions listing: ``PAGE_SIZE`` a page, oldest first, ``_links.next`` and
        ``meta.count``."""
        items = list(self.studies.values())
        page = int(query.get("page", ["1"])[0])
        chunk = items[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
        more = page * PAGE_SIZE < len(items)
        next_link = {"href": f"{self.api_url}studies/?page={page + 1}"} if more else {"href": None}
        return 200, {"results": [{"id": s["id"], "name": s["name"], "internal_name": s.get("internal_name", ""),
                                  "status": s["status"]} for s in chunk],
                     "_links": {"next": next_link}, "meta": {"count": len(items)}}

    def _get_study(self, *, body, query, id):
        if id not in self.studies:
            return 404, {"error": {"detail": "Not found."}}
        return 200, self.studies[id]

    def _transition_study(self, *, body, query, id):
        study = self.studies.get(id)
        if study is None:
            return 404, {"error": {"detail": "Not found."}}
        action = body.get("action")
        if action == "PUBLISH":
            study["status"] = "ACTIVE"
        elif action == "STOP":
            study["status"] = "AWAITING REVIEW"
        elif action in {"PAUSE", "START"}:
            study["status"] = "PAUSED" if action == "PAUSE" else "ACTIVE"
        else:
            return self._bad("action", "Invalid action.")
        return 200, study

    def _list_submissions(self, *, body, query, id):
        if id not in self.studies:
            return 404, {"error": {"detail": "Not found."}}
        items = [s for s in self.submissions.values() if s["study_id"] == id]
        page = int(query.get("page", ["1"])[0])
        chunk = items[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
        more = page * PAGE_SIZE < len(items)
        next_link = {"href": f"{self.api_url}studies/{id}/submissions/?page={page + 1}"} if more else {"href": None}
        return 200, {"results": [{k: v for k, v in s.items() if k != "bonus_payments"} for s in chunk],
                     "_links": {"next": next_link}, "meta": {"count": len(items)}}

    def _get_submission(self, *, body, query, id):
        if id not in self.submissions:
            return 404, {"error": {"detail": "Not found."}}
        return 200, self.submissions[id]

    def _transition_submission(self, *, body, query, id):
        submission = self.submissions.get(id)
        if submission is None:
            return 404, {"error": {"detail": "Not found."}}
        action = body.get("action")
        if action == "APPROVE":
            submission["status"] = "APPROVED"
        elif action == "REJECT":
            if len(body.get("message") or "") < 100:
                return self._bad("message", "Ensure this field has at least 100 characters.")
            if body.get("rejection_category") not in REJECTION_CATEGORIES:
                return self._bad("rejection_category", "A valid category is required.")
            submission["status"] = "REJECTED"
        else:
            return self._bad("action", "Invalid action.")
        return 200, {k: v for k, v in submission.items() if k != "bonus_payments"}

    def _setup_bonus(self, *, body, query):
        study_id = body.get("study_id")
        csv = body.get("csv_bonuses")
        if study_id not in self.studies or not isinstance(csv, str):
            return self._bad("study_id", "A study id and csv_bonuses are required.")
        rows = []
        for line in csv.strip().splitlines():
            ident, _, amount = line.partition(",")
            if ident not in self.submissions or not re.fullmatch(r"\d+(\.\d{1,2})?", amount):
                return self._bad("csv_bonuses", f"Invalid row: {line}")
            rows.append((ident, round(float(amount) * 100)))
        # As Prolific's "Set up bonuses" answers: the participants' amount, the fees and VAT on
        # it, and the total taken from the balance (fees included), in the smallest currency unit.
        amount = sum(c for _, c in rows)
        fees = round(amount * BONUS_FEE_RATE)
        bulk = {"id": _id(), "study": study_id, "rows": rows, "amount": amount, "fees": fees, "vat": 0,
                "total_amount": amount + fees}
        self.bulk_bonuses[bulk["id"]] = bulk
        return 201, {key: bulk[key] for key in ("id", "study", "amount", "fees", "vat", "total_amount")}

    def _pay_bonus(self, *, body, query, id):
        bulk = self.bulk_bonuses.get(id)
        if bulk is None:
            return 404, {"error": {"detail": "Not found."}}
        # Like the real endpoint, this is not idempotent: a second call pays again.
        self.payments.append({"bulk_id": id, "rows": list(bulk["rows"])})
        for ident, cents in bulk["rows"]:
            self.submissions[ident]["bonus_payments"].append(cents)
        return 202, {}
