"""A local OpenAI-compatible HTTP server for tests: answers /v1/completions and
/v1/chat/completions from a queue of scripted replies, or from a function of the request."""
from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class OpenAIServer:
    def __init__(self, reply: Callable[[str, dict], tuple[int, dict, dict]] | None = None):
        self.requests: list[dict] = []
        self.script: list[tuple[int, dict, dict]] = []
        self.reply = reply
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server._lock:
                    server.requests.append({"path": self.path, "headers": dict(self.headers), "json": body})
                    scripted = server.script.pop(0) if server.script else None
                status, payload, headers = scripted or server.reply(self.path, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(texts: list[str], tokens: int = 10) -> dict:
    return {"object": "text_completion", "choices": [{"index": i, "text": t} for i, t in enumerate(texts)],
            "usage": {"total_tokens": tokens}}


def chat(texts: list[str], tokens: int = 10) -> dict:
    return {"object": "chat.completion",
            "choices": [{"index": i, "message": {"role": "assistant", "content": t}} for i, t in enumerate(texts)],
            "usage": {"total_tokens": tokens}}
