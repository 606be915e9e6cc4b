# SPDX-License-Identifier: Apache-2.0
"""Two hostile servers for the security suite, over real HTTP on 127.0.0.1.

* :class:`HostileUpstream`: stands between hf_download and the local Hub, as a debugging proxy or a broken
  mirror would.  API calls are forwarded as they are (so huggingface_hub plans a real download); file
  requests (``/resolve/``) get what ``mode`` says:

  - ``echo``: status ``status`` with the request's ``Authorization`` header (the token) echoed in every
    error channel: the body (JSON ``error``), ``X-Error-Message``, ``X-Error-Code``, ``WWW-Authenticate``
    and an extra header; and a marker (``MARKER``) of free upstream text;
  - ``redirect_userinfo``: a 302 to ``http://ct200:<USERINFO_SECRET>@127.0.0.1:PORT/broken/...``, which
    answers 500 (credentials in a redirect target);
  - ``gzip``: the file's bytes (fetched from the Hub), gzip-compressed, with ``Content-Encoding: gzip``.
* :class:`HostilePeer`: a weight_peer impostor whose progress document (``/_ct200/NAME/progress.json``) is
  ``huge`` (advertises 1 GiB and streams until the client goes), ``chunked`` (no length, endless chunks) or
  ``trickle`` (a 1000-byte document, one byte every 0.2 s); ``sent`` counts the body bytes it got into the socket.
"""

from __future__ import annotations

import gzip
import http.client
import http.server
import json
import socket
import threading
import time
import urllib.parse
import urllib.request

MARKER = "UPSTREAM-FREE-TEXT-7d1c"
USERINFO_SECRET = "pw" + "-c0ffee-userinfo"
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "upgrade"}


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Base(object):
    handler = None

    def start(self):
        self.server = _Server(("127.0.0.1", 0), self.handler)
        self.server.owner = self
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class _UpstreamHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self._handle("HEAD")

    def do_GET(self):
        self._handle("GET")

    def _handle(self, method):
        owner = self.server.owner
        path = urllib.parse.urlsplit(self.path).path
        if path.startswith("/broken/"):
            return self._answer(500, b'{"error": "broken mirror"}', {"Content-Type": "application/json"}, method)
        if "/resolve/" in path and owner.mode:
            owner.hits += 1
            return getattr(self, "_" + owner.mode)(method)
        return self._forward(method)

    def _answer(self, status, body, headers, method):
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(body)

    def _forward(self, method):
        hub = urllib.parse.urlsplit(self.server.owner.hub_url)
        conn = http.client.HTTPConnection(hub.hostname, hub.port, timeout=30)
        headers = dict((k, v) for k, v in self.headers.items() if k.lower() not in _HOP and k.lower() != "host")
        conn.request(method, self.path, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        out = dict((k, v) for k, v in resp.getheaders() if k.lower() not in _HOP)
        self._answer(resp.status, body, out, method)

    def _echo(self, method):
        auth = self.headers.get("Authorization") or "(no Authorization header)"
        status = self.server.owner.status
        body = json.dumps({"error": "%s: you sent %s" % (MARKER, auth), "headers": dict(self.headers.items())})
        self._answer(status, body.encode(), {
            "Content-Type": "application/json", "X-Error-Message": "%s echoing %s" % (MARKER, auth),
            "X-Error-Code": auth[:60], "WWW-Authenticate": 'Bearer realm="%s"' % auth,
            "X-Debug-Request-Authorization": auth}, method)

    def _redirect_userinfo(self, method):
        port = self.server.server_address[1]
        location = "http://ct200:%s@127.0.0.1:%d/broken%s?X-Amz-Signature=%s" % (
            USERINFO_SECRET, port, urllib.parse.urlsplit(self.path).path, "deadbeef" * 4)
        self._answer(302, b"", {"Location": location}, method)

    def _gzip(self, method):
        req = urllib.request.Request(self.server.owner.hub_url + self.path, headers={"Accept-Encoding": "identity"})
        with urllib.request.urlopen(req, timeout=30) as resp:  # follows the Hub's 302 to its CDN
            data = resp.read()
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/octet-stream"}
        self._answer(200, gzip.compress(data, 1), headers, method)


class HostileUpstream(_Base):
    handler = _UpstreamHandler

    def __init__(self, hub_url, mode="echo", status=500):
        self.hub_url = hub_url.rstrip("/")
        self.mode = mode
        self.status = status
        self.hits = 0


class _PeerHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        owner = self.server.owner
        # a small send buffer keeps what the kernel holds small, so ``sent`` is close to what the client read
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if owner.mode == "huge":
            self.send_header("Content-Length", str(1 << 30))
        elif owner.mode == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
        else:  # trickle: a small document, so it is read, one byte every 0.2 s
            self.send_header("Content-Length", "1000")
        self.end_headers()
        block = b'{"pad": "' + b"x" * 65527  # 64 KiB that never closes: a cut document is not JSON
        try:
            while not owner.stopping.is_set():
                if owner.mode == "trickle":
                    self.wfile.write(b" ")
                    owner.count(1)
                    time.sleep(0.2)
                    continue
                data = (b"%x\r\n%s\r\n" % (len(block), block)) if owner.mode == "chunked" else block
                self.wfile.write(data)
                owner.count(len(block))
        except OSError:  # the client closed: what we wanted
            pass


class HostilePeer(_Base):
    handler = _PeerHandler

    def __init__(self, mode="huge"):
        self.mode = mode
        self.sent = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def count(self, n):
        with self.lock:
            self.sent += n

    @property
    def base(self):
        return self.url + "/model"

    def stop(self):
        self.stopping.set()
        super().stop()


# ---------------------------------------------------------------------------------------------------------------
# A router / SGLang instance that echoes what it was sent (issue 14's control plane and rollout gates)
ECHO_HF_TOKEN = "hf_" + "EchoedFromTheServersEnv0123456789"  # what a server that leaks its environment would say


def echo_text(request_text):
    """The hostile answer's words: ``request_text`` (the Authorization header, the request body) as it is,
    URL-encoded, JSON inside JSON, with the server's HF token, at offsets that straddle every cut the
    product makes (120, 200, 300 characters), so a cut before the redaction would keep a key's head."""
    encoded = urllib.parse.quote(request_text, safe="")
    nested = json.dumps(json.dumps({"authorization": request_text}))
    parts = ["p" * 100, request_text, " ", "q" * 60, encoded, " ", "r" * 70, request_text, " ", nested,
             " HF_TOKEN=%s token%%3D%s" % (ECHO_HF_TOKEN, ECHO_HF_TOKEN)]
    return "".join(parts)


class _EchoHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status, payload):
        body = (payload if isinstance(payload, str) else json.dumps(payload)).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _said(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(length, 1 << 20)).decode("utf-8", "replace") if length else ""
        return "%s %s" % (self.headers.get("Authorization") or "", body)

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_DELETE(self):
        self._route("DELETE")

    def _route(self, method):
        owner, said = self.server.owner, self._said()
        owner.seen.append((method, self.path, self.headers.get("Authorization")))
        path = urllib.parse.urlsplit(self.path).path
        if path == "/health_generate":
            return self._send(200, {})
        if owner.mode == "error":  # every other path: an error body quoting the request
            return self._send(owner.status, {"error": echo_text(said), "detail": echo_text(said)})
        if path == "/workers":  # a 200 /workers answer with the echo in every free-text field
            return self._send(200, {"workers": [{"id": echo_text(said), "url": owner.worker_url, "is_healthy": True,
                                                 "load": echo_text(said), "model_id": echo_text(said)}]})
        if path == "/v1/chat/completions":  # 200: the answer's content is the echo
            return self._send(200, {"choices": [{"message": {"content": echo_text(said)}, "finish_reason": "stop"}],
                                    "usage": {"completion_tokens": 8}})
        return self._send(404, {"error": echo_text(said)})


class EchoServer(_Base):
    """``mode`` ``error``: every path but /health_generate answers ``status`` with the request echoed;
    ``ok``: 200 answers (``/workers``, ``/v1/chat/completions``) with the echo in their free text."""
    handler = _EchoHandler

    def __init__(self, mode="error", status=500, worker_url="http://127.0.0.1:1"):
        self.mode, self.status, self.worker_url = mode, status, worker_url
        self.seen = []
