"""``load.py --keep-alive``: the benchmark's HTTP client, keeping one connection per simulated
worker open between its requests (HTTP/1.1 keep-alive, as a browser or a reverse proxy reusing
its upstream connections does). gunicorn's sync worker closes every connection; its gthread
worker keeps one open for ``keepalive`` seconds. A connection the server closed is opened again."""
from __future__ import annotations

import asyncio

from load import Http


class KeepAliveHttp(Http):
    CONNECTION = "keep-alive"

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

    async def request(self, method: str, path: str, form: dict | None = None,
                      headers: dict | None = None) -> tuple[int, dict, bytes]:
        raw = self.encode(method, path, form, headers)
        try:
            header_blob, payload = await self._exchange(raw)
        except (asyncio.IncompleteReadError, ConnectionError):  # the server closed the idle connection
            if self.writer is not None:
                self.writer.close()
            self.reader = self.writer = None
            header_blob, payload = await self._exchange(raw)
        return self.decode(header_blob, payload)

    def __del__(self):
        if self.writer is not None:
            self.writer.close()
