"""A small HTTP proxy on 127.0.0.1 in front of the test registry that fails chosen requests.

A test double for a registry that breaks mid-way (the real registry cannot be told to answer
500 to one request): every request is forwarded to ``upstream`` (``host:port``) with its own
``Host`` header (so the registry's ``Location`` URLs name the proxy), bodies buffered (chunked
uploads are re-sent with a length). ``fail_manifest_put(n)`` makes the n-th manifest PUT from
then on answer ``500`` without reaching the registry; ``manifest_puts`` counts the ones that
went through. ``fail_request(n)`` does the same to the n-th request of any kind (``requests``
counts them all); ``down = True`` closes every connection unanswered (a registry that is
down).
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "content-length"}


class FaultyProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self._fail_at: int | None = None
        self._seen = 0
        self._fail_any: int | None = None
        self.requests = 0
        self.down = False
        self.manifest_puts = 0
        self.failed: list[str] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline().strip():
                                pass
                            return bytes(out)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _forward(self) -> None:
                body = self._body()
                if proxy.down:
                    self.close_connection = True  # no answer at all: the registry is down
                    return
                if proxy._should_fail_any() or (self.command == "PUT" and "/manifests/" in self.path
                                                and proxy._should_fail()):
                    proxy.failed.append(self.path)
                    msg = b'{"errors":[{"code":"UNKNOWN","message":"injected by the test proxy"}]}'
                    self.send_response(500)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                if body or self.command in ("PUT", "POST", "PATCH"):
                    headers["Content-Length"] = str(len(body))
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if self.command == "PUT" and "/manifests/" in self.path and resp.status < 300:
                    with proxy._lock:
                        proxy.manifest_puts += 1
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP:
                        self.send_header(k, v)
                length = resp.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(data))
                self.send_header("Content-Length", length)  # a HEAD keeps the size it announces
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def repo(self, name: str) -> str:
        return f"{self.host}/{name}"

    def fail_manifest_put(self, n: int | None) -> None:
        """From now on, the n-th manifest PUT answers 500 (None: none does)."""
        with self._lock:
            self._fail_at, self._seen = n, 0

    def fail_request(self, n: int | None) -> None:
        """From now on, the n-th request (any method) answers 500 (None: none does);
        ``requests`` counts from 0 again."""
        with self._lock:
            self._fail_any, self.requests = n, 0

    def _should_fail_any(self) -> bool:
        with self._lock:
            self.requests += 1
            return self.requests == self._fail_any

    def _should_fail(self) -> bool:
        with self._lock:
            if self._fail_at is None:
                return False
            self._seen += 1
            return self._seen == self._fail_at

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
