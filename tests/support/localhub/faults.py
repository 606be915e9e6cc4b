# SPDX-License-Identifier: Apache-2.0
"""Fault knobs and request statistics of the local Hub.

A fault rule (JSON object)::

    {"kind": "5xx" | "429" | "ratelimit" | "cut" | "stall" | "corrupt",
     "path_glob": "/cdn/*",        # fnmatch on the URL path (no query); default "*"
     "methods": ["GET"],           # optional; default: any for 5xx/429, GET for body faults
     "count": 1,                   # requests it hits; -1 = forever; default 1
     "status": 503,                # 5xx only (500-599); default 503
     "retry_after": 1,             # 5xx/429: Retry-After seconds (429 default 1; 5xx none)
     "fraction": 0.5,              # cut/stall/corrupt: position in the response body (0..1)
     "seconds": 5,                 # stall duration; ratelimit: window length; default 5
     "bytes": 16,                  # corrupt: number of bytes flipped (same size); default 16
     "resource": "resolvers",      # ratelimit: the limit's name in the headers; default "resolvers"
     "limit": 3000}                # ratelimit: q= of RateLimit-Policy; default 3000

``ratelimit`` is the Hub's own rate limit: from the first matching request on, every matching
request for ``seconds`` gets 429 with ``RateLimit: "<resource>";r=0;t=<seconds left>`` and
``RateLimit-Policy: "fixed window";"<resource>";q=<limit>;w=<seconds>`` (the form
huggingface_hub's ``parse_ratelimit_headers`` reads), and no ``Retry-After`` unless
``retry_after`` is given; ``count`` bounds the 429s (default -1: the whole window).

``5xx``/``429``/``ratelimit`` answer before routing.  ``cut`` sends ``fraction`` of the body
(with the full Content-Length announced) and closes the connection; ``stall``
sends ``fraction`` of the body, pauses ``seconds``, then sends the rest;
``corrupt`` sends the whole body with ``bytes`` bytes inverted at ``fraction``.
Body faults only hit responses that carry file bytes (``/cdn/...`` and direct
``/resolve/...`` answers), and only the first matching rule with hits left fires.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatch
from typing import Any

KINDS = ("5xx", "429", "ratelimit", "cut", "stall", "corrupt")
BODY_KINDS = ("cut", "stall", "corrupt")
_ALLOWED_KEYS = {"kind", "path_glob", "methods", "count", "status", "retry_after", "fraction", "seconds", "bytes",
                 "resource", "limit"}

REQUEST_KINDS = (
    "whoami", "model_info", "auth_check", "tree", "paths_info", "refs",
    "resolve_head", "resolve_get", "cdn_head", "cdn_get", "admin", "other",
)


class FaultError(ValueError):
    """Invalid fault specification (message names the field and the fix)."""


@dataclass
class FaultRule:
    kind: str
    path_glob: str = "*"
    methods: tuple[str, ...] = ()
    count: int = 1
    status: int = 503
    retry_after: int | None = None
    fraction: float = 0.5
    seconds: float = 5.0
    bytes: int = 16
    resource: str = "resolvers"
    limit: int = 3000
    window_end: float | None = None
    id: int = 0
    hits: int = 0

    @classmethod
    def from_dict(cls, data: Any, index: int = 0) -> "FaultRule":
        where = f"fault rule #{index}"
        if not isinstance(data, dict):
            raise FaultError(f"{where}: expected a JSON object, got {type(data).__name__}")
        unknown = set(data) - _ALLOWED_KEYS
        if unknown:
            raise FaultError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(_ALLOWED_KEYS))}")
        kind = data.get("kind")
        if kind not in KINDS:
            raise FaultError(f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
        rule = cls(kind=kind)
        glob = data.get("path_glob", "*")
        if not isinstance(glob, str) or not glob:
            raise FaultError(f"{where}: path_glob must be a non-empty string such as '/cdn/*'")
        rule.path_glob = glob
        methods = data.get("methods")
        if methods is None:
            rule.methods = ("GET",) if kind in BODY_KINDS else ()
        else:
            if isinstance(methods, str):
                methods = [methods]
            if not isinstance(methods, list) or not all(isinstance(m, str) for m in methods):
                raise FaultError(f"{where}: methods must be a list of HTTP methods such as ['GET']")
            rule.methods = tuple(m.upper() for m in methods)
        count = data.get("count", -1 if kind == "ratelimit" else 1)
        if not isinstance(count, int) or isinstance(count, bool) or (count < 1 and count != -1):
            raise FaultError(f"{where}: count must be a positive integer or -1 (forever), got {count!r}")
        rule.count = count
        if kind == "5xx":
            status = data.get("status", 503)
            if not isinstance(status, int) or isinstance(status, bool) or not 500 <= status <= 599:
                raise FaultError(f"{where}: status must be an integer 500-599 for kind 5xx, got {status!r}")
            rule.status = status
        elif kind in ("429", "ratelimit"):
            rule.status = 429
            if "status" in data and data["status"] != 429:
                raise FaultError(f"{where}: status must be 429 (or omitted) for kind {kind}")
        elif "status" in data:
            raise FaultError(f"{where}: status only applies to kinds 5xx and 429")
        retry_after = data.get("retry_after", 1 if kind == "429" else None)
        if retry_after is not None:
            if kind not in ("5xx", "429", "ratelimit"):
                raise FaultError(f"{where}: retry_after only applies to kinds 5xx, 429 and ratelimit")
            if not isinstance(retry_after, int) or isinstance(retry_after, bool) or retry_after < 0:
                raise FaultError(f"{where}: retry_after must be a non-negative integer (seconds)")
        rule.retry_after = retry_after
        fraction = data.get("fraction", 0.5)
        if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 <= fraction <= 1:
            raise FaultError(f"{where}: fraction must be a number between 0 and 1, got {fraction!r}")
        if "fraction" in data and kind not in BODY_KINDS:
            raise FaultError(f"{where}: fraction only applies to kinds cut, stall and corrupt")
        rule.fraction = float(fraction)
        seconds = data.get("seconds", 5)
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 <= seconds <= 3600:
            raise FaultError(f"{where}: seconds must be a number between 0 and 3600, got {seconds!r}")
        if "seconds" in data and kind not in ("stall", "ratelimit"):
            raise FaultError(f"{where}: seconds only applies to kinds stall and ratelimit")
        rule.seconds = float(seconds)
        nbytes = data.get("bytes", 16)
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 1:
            raise FaultError(f"{where}: bytes must be a positive integer, got {nbytes!r}")
        if "bytes" in data and kind != "corrupt":
            raise FaultError(f"{where}: bytes only applies to kind corrupt")
        rule.bytes = nbytes
        rule._ratelimit_fields(data, where)
        return rule

    def _ratelimit_fields(self, data: dict, where: str) -> None:
        for key in ("resource", "limit"):
            if key in data and self.kind != "ratelimit":
                raise FaultError(f"{where}: {key} only applies to kind ratelimit")
        resource = data.get("resource", "resolvers")
        if not isinstance(resource, str) or not resource.isidentifier():
            raise FaultError(f"{where}: resource must be a word such as 'resolvers' or 'api', got {resource!r}")
        limit = data.get("limit", 3000)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise FaultError(f"{where}: limit must be a positive integer, got {limit!r}")
        self.resource, self.limit = resource, limit

    def ratelimit_headers(self, now: float | None = None) -> dict[str, str]:
        """The Hub's RateLimit headers for a request refused inside this rule's window."""
        now = time.monotonic() if now is None else now
        left = max(0, math.ceil((self.window_end or now) - now))
        return {"RateLimit": f'"{self.resource}";r=0;t={left}',
                "RateLimit-Policy": f'"fixed window";"{self.resource}";q={self.limit};w={int(self.seconds)}'}

    def matches(self, method: str, path: str) -> bool:
        if self.count == 0:
            return False
        if self.window_end is not None and time.monotonic() >= self.window_end:
            return False  # the rate-limit window is over
        if self.methods and method.upper() not in self.methods:
            return False
        return fnmatch(path, self.path_glob)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["methods"] = list(self.methods)
        return d


def parse_rules(data: Any) -> list[FaultRule]:
    """Parse a JSON rule or list of rules; raises FaultError without side effects."""
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise FaultError("faults: expected a JSON list of rule objects (or one object)")
    return [FaultRule.from_dict(item, i) for i, item in enumerate(data)]


class FaultSet:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._next_id = 1
        self.fired = 0

    def set(self, rules: list[FaultRule], append: bool = False) -> list[dict]:
        with self._lock:
            if not append:
                self._rules = []
            for rule in rules:
                rule.id = self._next_id
                self._next_id += 1
                self._rules.append(rule)
            return [r.to_dict() for r in self._rules]

    def clear(self) -> None:
        with self._lock:
            self._rules = []

    def list(self) -> list[dict]:
        with self._lock:
            return [r.to_dict() for r in self._rules]

    def take(self, method: str, path: str, kinds: tuple[str, ...]) -> FaultRule | None:
        """Consume one hit of the first matching rule of one of ``kinds``."""
        with self._lock:
            for rule in self._rules:
                if rule.kind in kinds and rule.matches(method, path):
                    if rule.count > 0:
                        rule.count -= 1
                    if rule.kind == "ratelimit" and rule.window_end is None:
                        rule.window_end = time.monotonic() + rule.seconds
                    rule.hits += 1
                    self.fired += 1
                    return rule
        return None


SETTLE_SECONDS = 2.0


@dataclass
class Stats:
    """Per-kind request counters; never records token values."""

    _lock: threading.Condition = field(default_factory=threading.Condition, repr=False)
    # Requests being answered: the client can read a whole response and ask
    # for the stats before the answering thread has recorded it, so readers
    # wait (briefly) for requests that started before them.
    _inflight: dict[int, float] = field(default_factory=dict, repr=False)
    _next_ticket: int = field(default=0, repr=False)
    requests: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REQUEST_KINDS, 0))
    authorized: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REQUEST_KINDS, 0))
    ranged: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REQUEST_KINDS, 0))
    status: dict[str, int] = field(default_factory=dict)
    cdn_bytes_sent: int = 0
    resolve_bytes_sent: int = 0
    faults_fired: int = 0
    log: deque = field(default_factory=lambda: deque(maxlen=5000))

    def begin(self) -> int:
        """Register a request being answered; pass the ticket to :meth:`record`."""
        with self._lock:
            self._next_ticket += 1
            self._inflight[self._next_ticket] = time.monotonic()
            return self._next_ticket

    def _settle(self, exclude: int | None, wait: float) -> None:
        """Wait up to ``wait`` s for requests that started before now to be recorded
        (a stalled response only delays the reader, it never blocks it). Lock held."""
        now = time.monotonic()
        deadline = now + wait
        while any(t != exclude and started <= now for t, started in self._inflight.items()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._lock.wait(remaining)

    def record(self, kind: str, method: str, path: str, status: int, has_auth: bool, range_header: str | None,
               sent: int, fault: str | None, started: float | None = None, ticket: int | None = None) -> None:
        with self._lock:
            if ticket is not None:
                self._inflight.pop(ticket, None)
                self._lock.notify_all()
            self.requests[kind] = self.requests.get(kind, 0) + 1
            if has_auth:
                self.authorized[kind] = self.authorized.get(kind, 0) + 1
            if range_header:
                self.ranged[kind] = self.ranged.get(kind, 0) + 1
            self.status[str(status)] = self.status.get(str(status), 0) + 1
            if kind == "cdn_get":
                self.cdn_bytes_sent += sent
            elif kind == "resolve_get":
                self.resolve_bytes_sent += sent
            if fault:
                self.faults_fired += 1
            self.log.append({"t": round(started or time.time(), 3), "done": round(time.time(), 3), "method": method, "path": path, "kind": kind,
                             "status": status, "authorization": has_auth, "range": range_header,
                             "bytes_sent": sent, "fault": fault})

    def snapshot(self, exclude: int | None = None, wait: float = SETTLE_SECONDS) -> dict:
        with self._lock:
            self._settle(exclude, wait)
            out: dict[str, Any] = dict(self.requests)
            out["api"] = sum(self.requests[k] for k in ("whoami", "model_info", "auth_check", "tree", "paths_info", "refs"))
            out["resolve"] = self.requests["resolve_head"] + self.requests["resolve_get"]
            out["cdn_bytes_sent"] = self.cdn_bytes_sent
            out["resolve_bytes_sent"] = self.resolve_bytes_sent
            out["faults_fired"] = self.faults_fired
            out["authorized"] = dict(self.authorized)
            out["ranged"] = dict(self.ranged)
            out["status"] = dict(self.status)
            return out

    def requests_log(self, exclude: int | None = None, wait: float = SETTLE_SECONDS) -> list[dict]:
        """Recorded requests in order of arrival (``t``); ``done`` is when the answer ended."""
        with self._lock:
            self._settle(exclude, wait)
            return sorted(self.log, key=lambda r: r["t"])

    def reset(self, exclude: int | None = None, wait: float = SETTLE_SECONDS) -> None:
        with self._lock:
            self._settle(exclude, wait)
            for d in (self.requests, self.authorized, self.ranged):
                for k in d:
                    d[k] = 0
            self.status.clear()
            self.cdn_bytes_sent = self.resolve_bytes_sent = self.faults_fired = 0
            self.log.clear()
