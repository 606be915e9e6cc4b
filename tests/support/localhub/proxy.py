# SPDX-License-Identifier: Apache-2.0
"""An authenticated HTTP proxy for tests: CONNECT tunnels and forward (absolute-URI) requests.

Every request must carry ``Proxy-Authorization: Basic base64(user:password)``; anything else gets
``407 Proxy Authentication Required`` with ``Proxy-Authenticate: Basic realm="ct200-test"`` (like
squid or tinyproxy with BasicAuth).  The proxy strips ``Proxy-Authorization`` before forwarding.
It records, per request, the method, the target, whether the credentials were right and the
status; never a credential value.

    with AuthProxy("alice", "s3cret") as proxy:
        proxy.url_with_credentials       # http://alice:s3cret@127.0.0.1:PORT (for http(s)_proxy)
        proxy.log                        # [{"method", "target", "authorized", "status"}]
"""

from __future__ import annotations

import base64
import binascii
import hmac
import http.client
import select
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "proxy-connection", "te",
               "trailers", "transfer-encoding", "upgrade"}
_CHUNK = 1 << 16


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, proxy: "AuthProxy"):
        self.proxy = proxy
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = 60

    def log_message(self, format, *args):  # noqa: A002,ANN001 - quiet
        pass

    def _authorized(self) -> bool:
        scheme, _unused, value = (self.headers.get("Proxy-Authorization") or "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            given = base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(given, self.server.proxy.credentials)

    def _refuse(self) -> None:
        body = b"Proxy Authentication Required\n"
        self.send_response(407)
        self.send_header("Proxy-Authenticate", 'Basic realm="ct200-test"')
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(body)

    def _record(self, status: int, authorized: bool) -> None:
        self.server.proxy.record(self.command, self.path, authorized, status)

    def do_CONNECT(self) -> None:  # noqa: N802
        authorized = self._authorized()
        if not authorized:
            self._record(407, False)
            return self._refuse()
        host, _unused, port = self.path.rpartition(":")
        try:
            upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
        except (OSError, ValueError):
            self._record(502, True)
            self.send_error(502, "cannot reach the tunnel's target")
            return
        self._record(200, True)
        self.send_response(200, "Connection established")
        self.end_headers()
        self._relay(upstream)
        self.close_connection = True

    def _relay(self, upstream: socket.socket) -> None:
        sockets = [self.connection, upstream]
        try:
            while True:
                readable, _unused, _unused = select.select(sockets, [], [], 30)
                if not readable:
                    return
                for sock in readable:
                    data = sock.recv(_CHUNK)
                    if not data:
                        return
                    (upstream if sock is self.connection else self.connection).sendall(data)
        except OSError:
            return
        finally:
            upstream.close()

    def _forward(self) -> None:
        authorized = self._authorized()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not authorized:
            self._record(407, False)
            return self._refuse()
        target = urlsplit(self.path)
        if target.scheme != "http" or not target.hostname:
            self._record(400, True)
            self.send_error(400, "forward requests need an absolute http:// URL")
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        conn = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=60)
        try:
            conn.request(self.command, (target.path or "/") + ("?" + target.query if target.query else ""),
                         body=body or None, headers=headers)
            resp = conn.getresponse()
            self._record(resp.status, True)
            self.send_response(resp.status, resp.reason)
            for key, value in resp.getheaders():
                if key.lower() not in _HOP_BY_HOP:
                    self.send_header(key, value)
            length = resp.getheader("Content-Length")
            if length is None and self.command != "HEAD":
                self.close_connection = True
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                while True:
                    chunk = resp.read(_CHUNK)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
        except OSError:
            self.close_connection = True
        finally:
            conn.close()

    do_GET = do_HEAD = do_POST = _forward  # noqa: N815


class AuthProxy:
    """A running authenticated proxy on 127.0.0.1 (a thread of this process)."""

    def __init__(self, user: str, password: str):
        self.user = user
        self.password = password
        self.credentials = f"{user}:{password}".encode()
        self._lock = threading.Lock()
        self.log: list[dict] = []
        self._server: _Server | None = None

    def record(self, method: str, target: str, authorized: bool, status: int) -> None:
        with self._lock:
            self.log.append({"method": method, "target": target, "authorized": authorized, "status": status})

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("AuthProxy is not started")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url_with_credentials(self) -> str:
        return f"http://{quote(self.user, safe='')}:{quote(self.password, safe='')}@127.0.0.1:{self.port}"

    def start(self) -> "AuthProxy":
        self._server = _Server(self)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True,
                         name=f"authproxy:{self.port}").start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> "AuthProxy":
        return self.start()

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        self.stop()


def self_signed_cert(directory, host: str = "localhost") -> tuple[str, str]:  # noqa: ANN001
    """(cert, key) paths of a fresh self-signed certificate for ``host`` (openssl req); the cert is its own CA."""
    import os
    import subprocess

    cert, key = os.path.join(directory, "tls-cert.pem"), os.path.join(directory, "tls-key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={host}",
                    "-addext", f"subjectAltName=DNS:{host},IP:127.0.0.1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True, timeout=60)
    return cert, key


class TlsFront:
    """TLS in front of a plain-HTTP server (the local Hub): what a proxy's CONNECT tunnel reaches."""

    def __init__(self, cert: str, key: str, backend_port: int, backend_host: str = "127.0.0.1"):
        import ssl

        self._ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ctx.load_cert_chain(cert, key)
        self._backend = (backend_host, backend_port)
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()

    def _serve(self) -> None:
        try:
            while not self._stop.is_set():
                readable, _unused, _unused = select.select([self._sock], [], [], 0.2)
                if readable:
                    client, _addr = self._sock.accept()
                    threading.Thread(target=self._relay, args=(client,), daemon=True).start()
        except OSError:
            pass  # closed while stopping
        finally:
            self._sock.close()

    def _relay(self, client: socket.socket) -> None:
        try:
            tls = self._ctx.wrap_socket(client, server_side=True)
            upstream = socket.create_connection(self._backend, timeout=10)
        except OSError:
            client.close()
            return
        try:
            while True:
                readable = [tls] if tls.pending() else select.select([tls, upstream], [], [], 30)[0]
                if not readable:
                    return
                for sock in readable:
                    data = sock.recv(_CHUNK)
                    if not data:
                        return
                    (upstream if sock is tls else tls).sendall(data)
        except OSError:
            return
        finally:
            upstream.close()
            tls.close()

    def __enter__(self) -> "TlsFront":
        threading.Thread(target=self._serve, daemon=True, name=f"tlsfront:{self.port}").start()
        return self

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        self._stop.set()
