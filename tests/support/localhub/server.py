# SPDX-License-Identifier: Apache-2.0
"""HTTP/1.1 front end of the local Hub (stdlib ``http.server``, keep-alive,
``sendfile`` for file bodies)."""

from __future__ import annotations

import base64
import json
import re
import select
import socket
import sys
import threading
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from .faults import BODY_KINDS, FaultError, FaultRule
from .hub import INVALID, INVALID_CREDENTIALS, HubError, LocalHub
from .hostile import KINDS as HOSTILE_KINDS
from .hostile import served_file as hostile_served_file
from .hostile import tree_entries as hostile_tree_entries
from .personas import PERSONAS
from . import realhub
from .repos import Repo

PAGE_SIZE = 1000
PAGE_SIZE_EXPAND = 50
API_KEYWORDS = {"revision", "tree", "paths-info", "auth-check", "refs", "resolve", "commits", "discussions"}
REPO_TYPE_PLURAL = {"models": "model", "datasets": "dataset"}
_READ_CHUNK = 1 << 20
_UNSAFE_HEADER_CHARS = re.compile(r"[\x00-\x1f\x7f]")
RATE_LIMITED = ("You have been rate-limited; you can retry this action in about 5 minutes. If you're a new user, "
                "your limits will raise progressively over time.")


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes")


def _content_type(path: str) -> str:
    if path.endswith(".json"):
        return "application/json; charset=utf-8"
    if path.endswith((".md", ".txt", ".py", ".jinja", ".gitattributes")) or path == ".gitattributes":
        return "text/plain; charset=utf-8"
    return "application/octet-stream"


class HubHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], hub: LocalHub):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.hub = hub
        self._connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()
        super().__init__(address, HubRequestHandler)

    def handle_error(self, request, client_address):  # noqa: ANN001
        # A client closing mid-body (a killed download, a stall test) is normal for a Hub.
        exc = sys.exc_info()[1]
        if isinstance(exc, (BrokenPipeError, ConnectionResetError, TimeoutError)):
            return
        super().handle_error(request, client_address)

    def process_request(self, request, client_address):  # noqa: ANN001
        with self._conn_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):  # noqa: ANN001
        with self._conn_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_all_connections(self) -> None:
        with self._conn_lock:
            conns = list(self._connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def make_server(hub: LocalHub, host: str, port: int) -> HubHTTPServer:
    return HubHTTPServer((host, port), hub)


class HubRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "localhub/1.0"
    timeout = 300  # idle keep-alive connections are closed after this
    server: HubHTTPServer

    # ------------------------------------------------------------ plumbing
    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log_file = self.server.hub.log_file
        if log_file is None:
            return
        try:
            with open(log_file, "a", encoding="utf-8") as fh:
                fh.write(f"{self.log_date_time_string()} {self.address_string()} {format % args}\n")
        except OSError:
            pass

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch("HEAD")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    def _dispatch(self, method: str) -> None:
        self.hub: LocalHub = self.server.hub
        self.method = method
        split = urlsplit(self.path)
        self.url_path = split.path
        self.query = parse_qs(split.query, keep_blank_values=True)
        self.raw_query = split.query
        self.kind = self._classify(method, self.url_path)
        self.has_auth = self.headers.get("Authorization") is not None
        self.sent_status = 0
        self.sent_bytes = 0
        self.fault_name: str | None = None
        self.started = time.time()
        self.ticket = self.hub.stats_obj.begin()
        self.body = self._read_body()
        try:
            if self.kind != "admin":
                rule = self.hub.faults.take(method, self.url_path, ("5xx", "429", "ratelimit"))
                if rule is not None:
                    self.fault_name = rule.kind
                    headers = {"Retry-After": str(rule.retry_after)} if rule.retry_after is not None else {}
                    message = "Too Many Requests" if rule.status == 429 else "Service Unavailable (injected fault)"
                    if rule.kind == "ratelimit":
                        headers.update(rule.ratelimit_headers())
                        message = RATE_LIMITED
                    raise HubError(rule.status, message, None, headers)
            self._route()
        except HubError as err:
            self._send_error(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # noqa: BLE001 - answer 500 and keep serving
            traceback.print_exc(file=sys.stderr)
            if self.sent_status == 0:
                self._send_error(HubError(500, "Internal error in localhub"))
            else:
                self.close_connection = True
        finally:
            self.hub.stats_obj.record(self.kind, method, self.path, self.sent_status, self.has_auth,
                                      self.headers.get("Range"), self.sent_bytes, self.fault_name, self.started,
                                      ticket=self.ticket)

    def _read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if not length:
            return b""
        try:
            n = int(length)
        except ValueError:
            return b""
        return self.rfile.read(n) if n > 0 else b""

    @staticmethod
    def _classify(method: str, path: str) -> str:
        if path.startswith("/_admin/"):
            return "admin"
        if path.startswith(("/cdn/", realhub.BRIDGE_PREFIX)):
            return "cdn_head" if method == "HEAD" else "cdn_get"
        if path == "/api/whoami-v2":
            return "whoami"
        if path.startswith("/api/resolve-cache/"):
            return "resolve_head" if method == "HEAD" else "resolve_get"
        segs = path.strip("/").split("/")
        if len(segs) >= 3 and segs[0] == "api" and segs[1] in REPO_TYPE_PLURAL:
            rest = segs[2:]
            for kw, kind in (("auth-check", "auth_check"), ("tree", "tree"), ("paths-info", "paths_info"),
                             ("refs", "refs")):
                if kw in rest[1:3]:
                    return kind
            return "model_info"
        if "resolve" in segs[1:4]:
            return "resolve_head" if method == "HEAD" else "resolve_get"
        return "other"

    def _send(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        self.send_response(status)
        self.sent_status = status
        headers = {"X-Request-Id": f"Root=1-{uuid.uuid4().hex[:24]}", **headers}
        if "Content-Length" not in headers:
            headers["Content-Length"] = str(len(body))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if body and self.method != "HEAD":
            self.wfile.write(body)
            self.sent_bytes += len(body)

    def _send_json(self, obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(obj).encode()
        self._send(status, {"Content-Type": "application/json; charset=utf-8", **(headers or {})}, body)

    def _send_error(self, err: HubError) -> None:
        # messages may echo user input (revision, path): keep the header on one printable line
        header_message = _UNSAFE_HEADER_CHARS.sub(" ", err.message).encode("latin-1", "replace").decode("latin-1")
        headers = {"X-Error-Message": header_message, **err.headers}
        if err.code:
            headers["X-Error-Code"] = err.code
        self._send_json({"error": err.message}, err.status, headers)

    # ------------------------------------------------------------ routing
    def _route(self) -> None:
        path, method = self.url_path, self.method
        if self.kind == "admin":
            return self._admin(path, method)
        if self.kind in ("cdn_get", "cdn_head"):
            return self._bridge_file(path) if path.startswith(realhub.BRIDGE_PREFIX) else self._cdn(path)
        persona = self.hub.authenticate(self.headers.get("Authorization"))
        if persona is INVALID:
            raise HubError(401, INVALID_CREDENTIALS)
        if path == "/api/whoami-v2":
            if persona is None:
                raise HubError(401, INVALID_CREDENTIALS)
            return self._send_json(self.hub.whoami_json(persona))
        segs = path.split("/")[1:]
        if len(segs) >= 5 and segs[:2] == ["api", "resolve-cache"] and segs[2] in REPO_TYPE_PLURAL:
            return self._resolve_cache(REPO_TYPE_PLURAL[segs[2]], segs[3:], persona)
        if len(segs) >= 3 and segs[0] == "api" and segs[1] in REPO_TYPE_PLURAL:
            return self._api(REPO_TYPE_PLURAL[segs[1]], segs[2:], persona)
        repo_type = "model"
        if segs and segs[0] in ("datasets",) and len(segs) > 1:
            repo_type, segs = "dataset", segs[1:]
        candidates = [n for n in (2, 1) if len(segs) > n + 1 and segs[n] == "resolve"]
        known = [n for n in candidates if self.hub.find_repo(repo_type, "/".join(segs[:n]))]
        for n in known or candidates[:1]:
            rev = unquote(segs[n + 1])
            file_path = "/".join(unquote(s) for s in segs[n + 2:])
            return self._resolve(repo_type, "/".join(segs[:n]), rev, file_path, persona)
        raise HubError(404, "Not Found")

    def _split_repo(self, repo_type: str, segs: list[str]) -> tuple[str, list[str]]:
        if len(segs) >= 2 and self.hub.find_repo(repo_type, f"{segs[0]}/{segs[1]}"):
            return f"{segs[0]}/{segs[1]}", segs[2:]
        if self.hub.find_repo(repo_type, segs[0]):
            return segs[0], segs[1:]
        if len(segs) >= 2 and segs[1] not in API_KEYWORDS:
            return f"{segs[0]}/{segs[1]}", segs[2:]
        return segs[0], segs[1:]

    def _api(self, repo_type: str, segs: list[str], persona) -> None:  # noqa: ANN001
        repo_id, rest = self._split_repo(repo_type, segs)
        sub = rest[0] if rest else None
        if self.method not in (("POST",) if sub == "paths-info" else ("GET", "HEAD")):
            raise HubError(405, f"Method {self.method} not allowed on this route")
        if sub is None or sub == "revision":
            repo = self.hub.lookup(repo_type, repo_id, persona)
            revision = unquote("/".join(rest[1:])) if sub == "revision" else "main"
            if sub == "revision" and not revision:
                raise HubError(404, "Not Found")
            repo = repo.at(self._require_revision(repo, revision))
            expand = self.query.get("expand")
            info = self.hub.repo_info_json(repo, persona, _truthy((self.query.get("blobs") or [None])[0]), expand)
            return self._send_json(info)
        if sub == "auth-check":
            if len(rest) > 1:
                raise HubError(404, "Not Found")
            repo = self.hub.lookup(repo_type, repo_id, persona)
            err = self.hub.gate_error(persona, repo)
            if err is not None:
                raise err
            return self._send_json({"ok": True})
        if sub == "tree":
            if len(rest) < 2:
                raise HubError(404, "Not Found")
            repo = self.hub.lookup(repo_type, repo_id, persona)
            revision = unquote(rest[1])
            sub_path = "/".join(unquote(s) for s in rest[2:]).strip("/")
            return self._tree(repo, persona, revision, sub_path)
        if sub == "paths-info":
            repo = self.hub.lookup(repo_type, repo_id, persona)
            revision = unquote("/".join(rest[1:])) or "main"
            return self._paths_info(repo, persona, revision)
        if sub == "refs":
            repo = self.hub.lookup(repo_type, repo_id, persona)
            branches = [{"name": "main", "ref": "refs/heads/main", "targetCommit": repo.commit}]
            tags = [{"name": t, "ref": f"refs/tags/{t}", "targetCommit": c.commit}
                    for c in repo.commits() for t in c.spec.tags]
            out = {"branches": branches, "converts": [], "tags": tags}
            if _truthy((self.query.get("include_prs") or [None])[0]):
                out["pullRequests"] = []
            return self._send_json(out)
        raise HubError(404, "Not Found")

    def _require_revision(self, repo: Repo, revision: str) -> str:
        commit = repo.resolve_revision(revision)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit

    # ------------------------------------------------------------ tree / paths-info
    def _tree(self, repo: Repo, persona, revision: str, sub_path: str) -> None:  # noqa: ANN001
        commit = self._require_revision(repo, revision)
        repo = repo.at(commit)
        if sub_path and sub_path not in repo.dirs:
            raise HubError(404, f"Path {sub_path} not found in revision {revision}" if sub_path not in repo.files
                           else f"Path {sub_path} is not a directory", "EntryNotFound", {"X-Repo-Commit": commit})
        recursive = _truthy((self.query.get("recursive") or [None])[0])
        expand = _truthy((self.query.get("expand") or [None])[0])
        page_size = PAGE_SIZE_EXPAND if expand else PAGE_SIZE
        if self.query.get("limit"):
            try:
                page_size = max(1, min(page_size, int(self.query["limit"][0])))
            except ValueError:
                raise HubError(400, "Invalid limit: expected a positive integer") from None
        offset = 0
        if self.query.get("cursor"):
            try:
                offset = int(base64.urlsafe_b64decode(self.query["cursor"][0].encode() + b"==").decode())
                if offset < 0:
                    raise ValueError
            except (ValueError, UnicodeDecodeError):
                raise HubError(400, "Invalid cursor") from None
        entries = repo.walk(sub_path, recursive)
        masked = self.hub.gate_error(persona, repo) is not None
        page = [self.hub.entry(repo, kind, p, masked, expand) for kind, p in entries[offset: offset + page_size]]
        hostile = self.hub.hostile.get((repo.repo_type, repo.repo_id))
        if hostile and recursive and not sub_path and offset + page_size >= len(entries):
            page += hostile_tree_entries(self.hub, repo, hostile, masked)  # hostile-Hub mode: last page
        headers = {"X-Repo-Commit": commit}
        if offset + page_size < len(entries):
            cursor = base64.urlsafe_b64encode(str(offset + page_size).encode()).decode().rstrip("=")
            params = [(k, v) for k, vs in self.query.items() if k != "cursor" for v in vs] + [("cursor", cursor)]
            host = self.headers.get("Host") or f"{self.hub.host}:{self.hub.port}"
            headers["Link"] = f'<http://{host}{self.url_path}?{urlencode(params)}>; rel="next"'
        self._send_json(page, 200, headers)

    def _paths_info(self, repo: Repo, persona, revision: str) -> None:  # noqa: ANN001
        commit = self._require_revision(repo, revision)
        repo = repo.at(commit)
        ctype = (self.headers.get("Content-Type") or "").lower()
        paths: list[str]
        expand = False
        if "application/json" in ctype:
            try:
                data = json.loads(self.body or b"{}")
            except ValueError:
                raise HubError(400, "Invalid JSON body") from None
            raw = data.get("paths", []) if isinstance(data, dict) else []
            paths = [raw] if isinstance(raw, str) else list(raw)
            expand = bool(data.get("expand")) if isinstance(data, dict) else False
        else:
            form = parse_qs(self.body.decode("utf-8", "replace"), keep_blank_values=True)
            paths = form.get("paths", [])
            expand = _truthy((form.get("expand") or [None])[0])
        if not paths:
            raise HubError(400, "Missing paths: send form field 'paths' (repeatable)")
        masked = self.hub.gate_error(persona, repo) is not None
        out, seen = [], set()
        for p in paths:
            p = str(p).strip("/")
            if p in seen:
                continue
            seen.add(p)
            if p in repo.files:
                out.append(self.hub.entry(repo, "file", p, masked, expand))
            elif p and p in repo.dirs:
                out.append(self.hub.entry(repo, "directory", p, masked, expand))
        self._send_json(out, 200, {"X-Repo-Commit": commit})

    # ------------------------------------------------------------ resolve / cdn
    def _resolve_cache(self, repo_type: str, segs: list[str], persona) -> None:  # noqa: ANN001
        """``/api/resolve-cache/{type}s/{id}/{commit}/{path}``: where the Hub's 307 sends small files."""
        repo_id, rest = self._split_repo(repo_type, segs)
        if len(rest) < 2:
            raise HubError(404, "Not Found")
        file_path = "/".join(unquote(s) for s in rest[1:])
        return self._resolve(repo_type, repo_id, unquote(rest[0]), file_path, persona, direct=True)

    def _resolve(self, repo_type: str, repo_id: str, revision: str, file_path: str, persona,  # noqa: ANN001
                 direct: bool = False) -> None:
        """Like the Hub: LFS files 302 to the CDN origin (auth dropped by the client);
        other files 307 to same-origin ``/api/resolve-cache/...`` (auth kept), unless ``direct``."""
        if self.method not in ("GET", "HEAD"):
            raise HubError(405, "Method not allowed")
        repo = self.hub.lookup(repo_type, repo_id, persona)
        if file_path != "README.md":
            err = self.hub.gate_error(persona, repo)
            if err is not None:
                raise err
        commit = self._require_revision(repo, revision)
        repo = repo.at(commit)
        f = repo.files.get(file_path)
        if f is None and (repo.repo_type, repo.repo_id) in self.hub.hostile:
            f = hostile_served_file(repo, self.hub.hostile[(repo.repo_type, repo.repo_id)], file_path)
        if f is None:
            raise HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": commit})
        common = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes", "Vary": "Origin, Accept-Encoding"}
        if f.lfs and not self.hub.lfs_redirect:
            return self._send_file(f.disk_path, f.size, {**common, "ETag": f'"{f.sha256}"',
                                                         "X-Linked-Etag": f'"{f.sha256}"',
                                                         "Content-Type": "application/octet-stream"})
        if f.lfs:
            location = self.hub.lfs_location(repo, f)
            body = f"Found. Redirecting to {location}".encode()
            xet = {"X-Xet-Hash": self.hub.xet_hash(f)} if self.hub.xet else {}
            return self._send(302, {**common, **xet, "Location": location, "X-Linked-Etag": f'"{f.sha256}"',
                                    "X-Linked-Size": str(f.size), "ETag": f'"{f.oid}"',
                                    "Content-Type": "text/plain; charset=utf-8"}, body)
        if not direct:
            plural = "datasets" if repo_type == "dataset" else "models"
            location = (f"/api/resolve-cache/{plural}/{repo.spec.repo_id}/{commit}/{quote(file_path)}"
                        f"?etag={quote(chr(34) + f.oid + chr(34))}")
            body = f"Temporary Redirect. Redirecting to {location}".encode()
            return self._send(307, {**common, "Location": location, "ETag": f'"{f.oid}"',
                                    "Content-Type": "text/plain; charset=utf-8"}, body)
        headers = {**common, "ETag": f'"{f.oid}"', "Content-Type": _content_type(file_path),
                   "Content-Disposition": f"inline; filename*=UTF-8''{quote(file_path.rsplit('/', 1)[-1])}"}
        self._send_file(f.disk_path, f.size, headers)

    def _cdn(self, path: str) -> None:
        if self.method not in ("GET", "HEAD"):
            raise HubError(405, "Method not allowed")
        sha = path[len("/cdn/"):]
        if self.hub.cdn_expiry is not None and realhub.cdn_denied(self.hub.url_secret, path, self.query):
            return self._send(403, {"Content-Type": "application/xml", "Server": "CloudFront"}, realhub.CLOUDFRONT_DENIED)
        f = self.hub.blob(sha)
        if f is None:
            raise HubError(404, "NoSuchKey: The specified key does not exist.")
        headers = {"ETag": f'"{f.sha256}"', "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes",
                   "Cache-Control": "public, max-age=604800, immutable",
                   "Content-Disposition": f"inline; filename*=UTF-8''{quote(f.path.rsplit('/', 1)[-1])}"}
        self._send_file(f.disk_path, f.size, headers)

    def _bridge_file(self, path: str) -> None:
        """The cas-bridge imitation: bytes by Xet hash behind an S3-presigned, expiring URL."""
        if self.method not in ("GET", "HEAD"):
            raise HubError(405, "Method not allowed")
        denied = realhub.bridge_denied(self.hub.url_secret, path, self.query)
        if denied is not None:
            return self._send(403, {"Content-Type": "application/xml"}, denied)
        f = self.hub.blob_by_xet_hash(path.rsplit("/", 1)[-1])
        if f is None:
            return self._send(404, {"Content-Type": "application/xml"},
                              b"<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>")
        headers = {"ETag": f'"{f.sha256}"', "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes",
                   "Content-Disposition": f"inline; filename*=UTF-8''{quote(f.path.rsplit('/', 1)[-1])}"}
        self._send_file(f.disk_path, f.size, headers)

    def _parse_range(self, size: int) -> tuple[int, int] | None:
        header = self.headers.get("Range")
        if not header or not self.hub.honour_range:
            return None
        unit, _unused, spec = header.strip().partition("=")
        if unit.strip().lower() != "bytes" or "," in spec:
            return None  # unsupported: serve the whole file
        start_s, _unused, end_s = spec.strip().partition("-")
        try:
            if start_s == "":
                suffix = int(end_s)
                if suffix <= 0:
                    raise HubError(416, "Range Not Satisfiable", None, {"Content-Range": f"bytes */{size}"})
                return max(0, size - suffix), size - 1
            start = int(start_s)
            end = int(end_s) if end_s else size - 1
        except ValueError:
            return None
        if start >= size or end < start:
            raise HubError(416, "Range Not Satisfiable", None, {"Content-Range": f"bytes */{size}"})
        return start, min(end, size - 1)

    def _send_file(self, disk_path, size: int, headers: dict[str, str]) -> None:  # noqa: ANN001
        byte_range = self._parse_range(size)
        if not self.hub.honour_range:
            headers = {**headers, "Accept-Ranges": "none"}
        if byte_range is None:
            status, start, length = 200, 0, size
        else:
            status, start = 206, byte_range[0]
            length = byte_range[1] - byte_range[0] + 1
            headers = {**headers, "Content-Range": f"bytes {byte_range[0]}-{byte_range[1]}/{size}"}
        rule: FaultRule | None = None
        if self.method == "GET" and length > 0:
            rule = self.hub.faults.take(self.method, self.url_path, BODY_KINDS)
            if rule is not None:
                self.fault_name = rule.kind
        with open(disk_path, "rb") as fh:
            self._send(status, {**headers, "Content-Length": str(length)})
            if self.method == "HEAD" or length == 0:
                return
            try:
                if rule is None:
                    self._sendfile(fh, start, length)
                elif rule.kind == "cut":
                    cut = int(length * rule.fraction)
                    self._sendfile(fh, start, cut)
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                elif rule.kind == "stall":
                    first = int(length * rule.fraction)
                    self._sendfile(fh, start, first)
                    if not self._pause(rule.seconds):
                        self.close_connection = True
                        return
                    self._sendfile(fh, start + first, length - first)
                elif rule.kind == "corrupt":
                    self._send_corrupt(fh, start, length, rule)
            except (BrokenPipeError, ConnectionResetError, TimeoutError, OSError):
                self.close_connection = True

    def _pause(self, seconds: float) -> bool:
        """Sleep ``seconds``; False if the hub stops or the client hangs up meanwhile."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            if self.hub.stop_event.is_set():
                return False
            readable, _unused, _unused = select.select([self.connection], [], [], min(remaining, 0.2))
            if readable:
                try:
                    if self.connection.recv(1, socket.MSG_PEEK) == b"":
                        return False  # client closed the connection (e.g. read timeout)
                except OSError:
                    return False
                time.sleep(min(remaining, 0.2))  # pipelined bytes: keep waiting
        return True

    def _sendfile(self, fh, offset: int, count: int) -> None:  # noqa: ANN001
        if count <= 0:
            return
        sent = 0
        try:
            while sent < count:
                n = self.connection.sendfile(fh, offset + sent, count - sent)
                if n == 0:
                    raise BrokenPipeError("connection closed during sendfile")
                sent += n
        finally:
            self.sent_bytes += sent

    def _send_corrupt(self, fh, start: int, length: int, rule: FaultRule) -> None:  # noqa: ANN001
        flip_from = min(int(length * rule.fraction), length - 1)
        flip_to = min(length, flip_from + rule.bytes)
        pos = 0
        fh.seek(start)
        while pos < length:
            chunk = bytearray(fh.read(min(_READ_CHUNK, length - pos)))
            if not chunk:
                raise OSError("file shorter than expected")
            lo, hi = max(flip_from, pos), min(flip_to, pos + len(chunk))
            for i in range(lo, hi):
                chunk[i - pos] ^= 0xFF
            self.connection.sendall(chunk)
            self.sent_bytes += len(chunk)
            pos += len(chunk)

    # ------------------------------------------------------------ admin
    def _admin(self, path: str, method: str) -> None:
        hub = self.hub
        if path == "/_admin/stats" and method == "GET":
            return self._send_json(hub.stats(self.ticket))
        if path == "/_admin/stats/reset" and method == "POST":
            hub.reset_stats(self.ticket)
            return self._send_json(hub.stats(self.ticket))
        if path == "/_admin/requests" and method == "GET":
            return self._send_json(hub.requests_log(self.ticket))
        if path == "/_admin/faults":
            if method == "GET":
                return self._send_json(hub.list_faults())
            if method == "DELETE":
                hub.clear_faults()
                return self._send_json([])
            if method in ("POST", "PUT"):
                try:
                    data = json.loads(self.body or b"null")
                except ValueError as exc:
                    raise HubError(400, f"faults: body is not valid JSON ({exc}); send a JSON list of rules") from None
                try:
                    rules = hub.set_faults(data, append=_truthy((self.query.get("append") or [None])[0]))
                except FaultError as exc:
                    raise HubError(400, str(exc)) from None
                return self._send_json(rules)
        if path == "/_admin/access" and method == "POST":
            try:
                data = json.loads(self.body or b"null")
                hub.set_access(data["repo"], data["persona"], data.get("status"), data.get("repo_type", "model"))
            except (ValueError, KeyError, TypeError) as exc:
                raise HubError(400, f"access: {exc}; send {{\"repo\": ID, \"persona\": NAME, \"status\": "
                                    "\"accepted\"|\"pending\"|\"rejected\"|null}}") from None
            return self._send_json({"ok": True})
        if path == "/_admin/hostile":
            if method == "DELETE":
                hub.clear_hostile()
                return self._send_json({"ok": True})
            if method in ("POST", "PUT"):
                try:
                    data = json.loads(self.body or b"null")
                    entries = hub.set_hostile(data["repo"], data.get("kinds"), target=data.get("target"),
                                              entries=data.get("entries"), repo_type=data.get("repo_type", "model"))
                except (ValueError, KeyError, TypeError) as exc:
                    raise HubError(400, f"hostile: {exc}; send {{\"repo\": ID, \"kinds\": [{', '.join(HOSTILE_KINDS)}], "
                                        "\"target\": \"/abs/path\" (for absolute), \"entries\": [{\"path\": ..., "
                                        "\"like\": ..., \"drop\": [...]}]}}") from None
                return self._send_json({"ok": True, "entries": len(entries)})
        if path == "/_admin/personas" and method == "GET":
            return self._send_json({n: {"username": p.username, "role": p.role, "description": p.description}
                                    for n, p in PERSONAS.items()})
        if path == "/_admin/repos" and method == "GET":
            return self._send_json([
                {"id": r.repo_id, "type": r.repo_type, "sha": r.commit, "private": r.private, "gated": r.gated,
                 "files": {p: f.size for p, f in r.files.items()}}
                for r in hub.repos()
            ])
        raise HubError(404, "Not Found")


def main(argv: list[str] | None = None) -> int:
    """Console entry point (``ct200-localhub``); same as ``python -m localhub``."""
    from .cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
