"""``load.py --keep-alive``: the benchmark's HTTP client, keeping one connection per simulated
worker open between its requests (HTTP/1.1 keep-alive, as a browser or a reverse proxy reusing
its upstream connections does). gunicorn's sync worker closes every connection; its gthread
worker keeps one open for ``keepalive`` seconds. A connection the server closed is opened again."""
from __future__ import annotations

import asyncio
from urllib.parse import urlencode

from load import Http


class KeepAliveHttp(Http):
    def __init__(self, host: str, port: int):
        super().__init__(host, port)
        self.reader = self.writer = None

    async def _exchange(self, raw: bytes) -> tuple[bytes, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(raw)
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), timeout=30)
        length = 0
        close = False
        for line in head.decode("latin-1").split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.lower() == "content-length":
                length = int(value.strip())
            elif name.lower() == "connection" and value.strip().lower() == "close":
                close = True
        body = await asyncio.wait_for(self.reader.readexactly(length), timeout=30) if length else b""
        if close:
            self.writer.close()
            self.reader = self.writer = None
        return head, body

    async def request(self, method: str, path: str, form: dict | None = None) -> tuple[int, dict, bytes]:
        body = urlencode(form).encode() if form is not None else b""
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Connection: keep-alive"]
        if self.cookies:
            head.append("Cookie: " + "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        if form is not None:
            head += ["Content-Type: application/x-www-form-urlencoded", f"Content-Length: {len(body)}"]
        raw = ("\r\n".join(head) + "\r\n\r\n").encode() + body
        try:
            header_blob, payload = await self._exchange(raw)
        except (asyncio.IncompleteReadError, ConnectionError):  # the server closed the idle connection
            if self.writer is not None:
                self.writer.close()
            self.reader = self.writer = None
            header_blob, payload = await self._exchange(raw)
        lines = header_blob.decode("latin-1").rstrip("\r\n").split("\r\n")
        status = int(lines[0].split()[1])
        headers: dict = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name, value = name.lower(), value.strip()
            if name == "set-cookie":
                key, _, rest = value.partition("=")
                self.cookies[key] = rest.split(";", 1)[0]
            headers[name] = value
        return status, headers, payload

    def __del__(self):
        if self.writer is not None:
            self.writer.close()
