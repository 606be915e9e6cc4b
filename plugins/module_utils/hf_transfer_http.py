# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Lean HTTP/1.1 byte mover for Hub files (standard library only).

PRIVATE to the ct200.deploy collection.

Why not huggingface_hub's own client: it reads the body through httpx2 in
10 MiB chunks that are re-buffered; measured on this kind of machine it costs
~2-2.7 s of CPU per GiB received, against ~0.33 s for ``http.client`` with
``readinto`` into one preallocated 1 MiB buffer.

Redirect rule (mirrors ``huggingface_hub.utils._http._is_same_or_hub_host``):
a redirect to the same origin or a Hub origin is followed *with* the
Authorization header; any other origin is a CDN and gets the request
*without* it.
"""

from __future__ import annotations

import base64
import http.client
import os
import re
import socket
import time
import urllib.parse

from ansible_collections.ct200.deploy.plugins.module_utils.redact import redact, redact_url

__all__ = [
    "HttpError",
    "RangeIgnored",
    "TransferError",
    "Connections",
    "origin_of",
    "parse_retry_after",
    "parse_ratelimit",
    "open_stream",
    "get_json",
    "HUB_ORIGINS",
    "shutdown_socket",
]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_MAX_REDIRECTS = 10
RETRYABLE_STATUS = frozenset([408, 425, 429, 500, 502, 503, 504])


def origin_of(url):
    parsed = urllib.parse.urlsplit(url)
    return (parsed.scheme, (parsed.hostname or "").lower(), parsed.port or _DEFAULT_PORTS.get(parsed.scheme, 0))


HUB_ORIGINS = frozenset(
    origin_of(u) for u in ("https://huggingface.co", "https://hub-ci.huggingface.co", "https://hf.co")
)


def token_may_follow(from_url, to_url, allowed_origins=HUB_ORIGINS):
    """A redirect keeps Authorization only on the request's own origin or a Hub origin
    (the Hub's 307 to /api/resolve-cache); a CDN or storage host never gets the token."""
    return origin_of(to_url) in ({origin_of(from_url)} | set(allowed_origins))


class TransferError(Exception):
    """A transfer problem; ``retryable`` tells the engine whether to try again."""

    retryable = True
    retry_after = None

    def __init__(self, message, retryable=None, retry_after=None):
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable
        if retry_after is not None:
            self.retry_after = retry_after


class _Headers(object):
    """Case-insensitive header view with ``.get`` (what hf_errors.classify reads)."""

    def __init__(self, items):
        self._items = {}
        for key, value in items:
            self._items[key.lower()] = value

    def get(self, name, default=None):
        return self._items.get(name.lower(), default)

    def __contains__(self, name):
        return name.lower() in self._items


class _ResponseInfo(object):
    """Enough of a response for ``hf_errors.classify`` (status_code, headers, text)."""

    def __init__(self, status, headers, text, url):
        self.status_code = status
        self.headers = headers
        self.text = text
        self.url = url


class HttpError(TransferError):
    """Non-success HTTP status.  ``response`` mimics what hf_errors.classify expects."""

    def __init__(self, status, url, headers, body_text, what=None):
        self.status = status
        self.url = url
        self.response = _ResponseInfo(status, headers, body_text, url)
        # whatever the server says is quoted only through the one redaction (an upstream may echo the token)
        code = redact(_short(headers.get("X-Error-Code"), 80))
        detail = redact(_short(headers.get("X-Error-Message")) or _short(body_text))
        message = "HTTP %d%s from %s%s" % (
            status,
            " " + code if code else "",
            _redact_url(url),
            (": " + detail) if detail else "",
        )
        if what:
            message = "%s: %s" % (what, message)
        retry_after = parse_retry_after(headers.get("Retry-After")) if status in (429, 503) else None
        # the Hub's own limit first, as huggingface_hub does (utils/_http.py, _http_backoff_base)
        self.rate_limit = parse_ratelimit(headers.get("RateLimit"), headers.get("RateLimit-Policy")) if status == 429 else None
        if self.rate_limit is not None:
            retry_after = self.rate_limit[1] + 1.0  # +1 s like huggingface_hub: t= is rounded down
        super().__init__(message, retryable=status in RETRYABLE_STATUS, retry_after=retry_after)
        self.server_message = detail


class RangeIgnored(TransferError):
    """The server answered 200 to a Range request: restart the file as one segment."""


def _short(text, limit=300):
    text = (text or "").strip().replace("\n", " ")
    return text[:limit]


def _redact_url(url):
    """No userinfo and no query string (signed CDN URLs carry credentials in it): redact.redact_url."""
    return redact_url(url)


def parse_retry_after(value, now=None):
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date); None if absent/invalid."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
        return max(0.0, seconds)
    except ValueError:
        pass
    import email.utils

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


# huggingface_hub's patterns (utils/_http.py): RateLimit: "api";r=0;t=55 and
# RateLimit-Policy: "fixed window";"api";q=500;w=300 (IETF draft-ietf-httpapi-ratelimit-headers-09)
_RATELIMIT_RE = re.compile(r"\"(?P<resource>\w+)\"\s*;\s*r\s*=\s*(?P<r>\d+)\s*;\s*t\s*=\s*(?P<t>\d+)")
_RATELIMIT_POLICY_RE = re.compile(r"q\s*=\s*(?P<q>\d+).*?w\s*=\s*(?P<w>\d+)")


def parse_ratelimit(value, policy=None):
    """(resource, seconds until reset, limit or None, window seconds or None) from the Hub's RateLimit
    headers when the limit is exhausted (r=0); None otherwise (the headers ride on every answer)."""
    match = _RATELIMIT_RE.search(value or "")
    if match is None or int(match.group("r")) != 0:
        return None
    limit = window = None
    policy_match = _RATELIMIT_POLICY_RE.search(policy or "")
    if policy_match is not None:
        limit, window = int(policy_match.group("q")), int(policy_match.group("w"))
    return match.group("resource"), float(match.group("t")), limit, window


class ProxyRefused(TransferError):
    """The proxy answered 407: the credentials in the proxy URL are missing or wrong."""

    retryable = False


def proxy_display(proxy_url):
    """The proxy URL without its user:password (for messages: never print the credentials)."""
    p = urllib.parse.urlsplit(proxy_url if "://" in proxy_url else "http://" + proxy_url)
    host = p.hostname or ""
    return "%s://%s%s" % (p.scheme, "[%s]" % host if ":" in host else host, ":%d" % p.port if p.port else "")


def _proxy_authorization(p):
    """Basic credentials from the proxy URL's userinfo (percent-decoded, as curl and httpx read it)."""
    if p.username is None:
        return None
    userinfo = "%s:%s" % (urllib.parse.unquote(p.username), urllib.parse.unquote(p.password or ""))
    return "Basic " + base64.b64encode(userinfo.encode("utf-8")).decode("ascii")


def _proxy_for(url):
    """(host, port, Proxy-Authorization value or None, URL for messages) of the proxy for ``url``
    from the environment, honouring no_proxy; or None."""
    parts = urllib.parse.urlsplit(url)
    if not any(k.lower().endswith("_proxy") for k in os.environ):
        return None
    from urllib import request as urllib_request

    proxies = urllib_request.getproxies_environment()
    proxy = proxies.get(parts.scheme)
    if not proxy:
        return None
    if urllib_request.proxy_bypass_environment(parts.hostname or "", proxies):
        return None
    p = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
    return p.hostname, p.port or 8080, _proxy_authorization(p), proxy_display(proxy)


class Connections(object):
    """Keep-alive connections of ONE thread, one per origin."""

    def __init__(self, timeout):
        self.timeout = timeout
        self._conns = {}
        self._ssl = None

    def _ssl_context(self):
        if self._ssl is None:
            import ssl

            self._ssl = ssl.create_default_context()
        return self._ssl

    def get(self, url):
        key = origin_of(url)
        conn = self._conns.get(key)
        if conn is None:
            scheme, host, port = key
            proxy = _proxy_for(url)
            if scheme == "https":
                if proxy:
                    conn = http.client.HTTPSConnection(proxy[0], proxy[1], timeout=self.timeout, context=self._ssl_context())
                    # the CONNECT carries the credentials; the tunnelled requests never do
                    conn.set_tunnel(host, port, headers={"Proxy-Authorization": proxy[2]} if proxy[2] else None)
                else:
                    conn = http.client.HTTPSConnection(host, port, timeout=self.timeout, context=self._ssl_context())
                conn._ct200_absolute = False
            elif scheme == "http":
                if proxy:
                    conn = http.client.HTTPConnection(proxy[0], proxy[1], timeout=self.timeout)
                    conn._ct200_absolute = True
                    conn._ct200_proxy_auth = proxy[2]  # a forward proxy reads it on every request
                else:
                    conn = http.client.HTTPConnection(host, port, timeout=self.timeout)
                    conn._ct200_absolute = False
            else:
                raise TransferError("unsupported URL scheme in %s" % _redact_url(url), retryable=False)
            self._conns[key] = conn
        return conn

    def drop(self, url):
        conn = self._conns.pop(origin_of(url), None)
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def close(self):
        for conn in self._conns.values():
            try:
                conn.close()
            except Exception:
                pass
        self._conns.clear()


def shutdown_socket(holder):
    """Shut down ``holder.sock`` (a connection or a transfer) from another thread, so that a read blocked on it
    returns at once (a stall or a time box ran out); nothing when it has no socket or it is gone already."""
    sock = holder.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _request_target(conn, url):
    if getattr(conn, "_ct200_absolute", False):
        return url
    parts = urllib.parse.urlsplit(url)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return target


def _send(conns, method, url, headers, on_socket=None):
    """One request on a kept-alive connection; a stale keep-alive connection is retried once."""
    for attempt in (0, 1):
        conn = conns.get(url)
        try:
            conn.putrequest(method, _request_target(conn, url), skip_accept_encoding=True)
            for key, value in headers.items():
                conn.putheader(key, value)
            if getattr(conn, "_ct200_proxy_auth", None):
                conn.putheader("Proxy-Authorization", conn._ct200_proxy_auth)
            conn.endheaders()
            if on_socket is not None and conn.sock is not None:
                on_socket(conn.sock)
            return conn, conn.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
            conns.drop(url)
            if attempt:
                raise TransferError("connection to %s lost: %s" % (_redact_url(url), exc))
        except (http.client.HTTPException, OSError) as exc:
            conns.drop(url)
            if isinstance(exc, socket.timeout):
                raise TransferError("timed out waiting for %s" % _redact_url(url))
            if " 407 " in str(exc):  # http.client's CONNECT failure: "Tunnel connection failed: 407 ..."
                raise _proxy_refused(url)
            raise TransferError("request to %s failed: %s" % (_redact_url(url), exc))
    raise TransferError("request to %s failed" % _redact_url(url))  # pragma: no cover


def _proxy_refused(url):
    proxy = _proxy_for(url)
    where = proxy[3] if proxy else "the proxy"
    sent = "the credentials from the proxy URL were refused" if proxy and proxy[2] else "the proxy URL has no credentials"
    return ProxyRefused(
        "the proxy %s answered 407 Proxy Authentication Required for %s (%s): put the proxy's user and password "
        "in the proxy URL (https_proxy/http_proxy=http://USER:PASSWORD@HOST:PORT, percent-encoded) and check them"
        % (where, _redact_url(url), sent))


def _drain(resp, limit=65536):
    try:
        return resp.read(limit).decode("utf-8", "replace")
    except Exception:
        return ""


def open_stream(conns, url, headers, byte_range=None, allowed_origins=HUB_ORIGINS, on_socket=None, what=None):
    """GET ``url`` following redirects; return ``(response, final_url, status)``.

    ``byte_range``: (start, end_inclusive) or None.  Authorization is dropped for
    any redirect target that is neither the request's origin nor a Hub origin.
    A 2xx response is returned unread; errors raise :class:`HttpError`.
    """
    headers = dict(headers)
    headers.setdefault("Accept-Encoding", "identity")
    if byte_range is not None:
        headers["Range"] = "bytes=%d-%d" % byte_range
    current = url
    for _hop in range(_MAX_REDIRECTS):
        conn, resp = _send(conns, "GET", current, headers, on_socket)
        status = resp.status
        if status in (301, 302, 303, 307, 308):
            location = resp.getheader("Location")
            _drain(resp)
            if resp.will_close:
                conns.drop(current)
            if not location:
                raise TransferError("redirect without Location from %s" % _redact_url(current), retryable=False)
            target = urllib.parse.urljoin(current, location)
            if not token_may_follow(current, target, allowed_origins):
                headers.pop("Authorization", None)
                headers.pop("authorization", None)
            current = target
            continue
        if 200 <= status < 300:
            return resp, current, status
        body = _drain(resp)
        if status == 407 and getattr(conn, "_ct200_absolute", False):
            conns.drop(current)
            raise _proxy_refused(current)
        if resp.will_close:
            conns.drop(current)
        raise HttpError(status, current, _Headers(resp.getheaders()), body, what=what)
    raise TransferError("too many redirects starting at %s" % _redact_url(url), retryable=False)


def get_json(conns, url, headers, what=None):
    """Small JSON GET (the lean revision resolution); returns the decoded object."""
    import json

    resp, _final, _status = open_stream(conns, url, headers, allowed_origins=HUB_ORIGINS, what=what)
    try:
        body = resp.read()
    except (http.client.HTTPException, OSError) as exc:
        conns.drop(url)
        raise TransferError("reading %s failed: %s" % (_redact_url(url), exc))
    try:
        return json.loads(body.decode("utf-8"))
    except ValueError as exc:
        raise TransferError("invalid JSON from %s: %s" % (_redact_url(url), exc), retryable=False)
