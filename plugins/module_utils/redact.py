# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""The one redaction step for every string that leaves a process or lands in a file.

PRIVATE to the ct200.deploy collection.  Standard library only (used on the no-op path too).

An upstream that is not the Hub (a debugging proxy, a broken mirror, a hostile peer) may echo
the request's ``Authorization`` header, a signed CDN URL or credentials it saw into an error
body, ``X-Error-Message`` or any other header, and that text is what error messages quote.
:func:`redact` removes from any text:

* the secrets the caller knows (the token in use, the API key, URL passwords): every occurrence, also
  URL-encoded (``%2F``, ``+``, either hex case, twice encoded), JSON- or Python-escaped (``\\/``, ``\\u00..``);
  text in which a decoded view (URL-decoded, JSON unescaped) still shows a known secret that no form above
  matched is withheld whole (:data:`WITHHELD`), so an upstream cannot smuggle a secret past in another encoding;
* ``Bearer <anything>`` (any case, also ``Authorization: Basic ...``, also ``Bearer%20...``/``Bearer+...``) and ``token=...``/``token: ...``
  (also ``password``, ``secret``, ``api_key``);
* strings shaped like Hugging Face tokens (``hf_`` + 20 or more letters and digits; the
  collection's own names such as ``hf_download`` are shorter or contain ``_``);
* the userinfo of a URL (``scheme://user:password@host`` -> ``scheme://***@host``);
* the query of a URL that carries a signature or credential (``X-Amz-Signature``, ``Signature``,
  ``Key-Pair-Id``, ``Policy``, ``sig``, ``token``...): it is dropped whole.

:func:`scrub` applies it to every string of a JSON-like value (module results, progress and
state documents, reports).  :func:`redact_url` is the form of one URL that may be printed.

Redact before cutting: a text cut first may keep the head of a secret that no rule then recognises
(:func:`shorten` does both in that order).
"""

from __future__ import annotations

import functools
import json
import re
import urllib.parse

MASK = "***"
WITHHELD = "<upstream text withheld: it carried a credential in an encoded form>"
# the separator after "Bearer" may be a space, or its URL-encoded forms (%20, +)
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+|%20|\+)[A-Za-z0-9._~+/=%\-]{6,}")
# token=..., "api_key": "...", also JSON inside JSON (\"api_key\": \"...\") and URL-encoded (token%3D...)
_ASSIGNED = re.compile(r"(?i)\b(token|access_token|api_key|apikey|password|secret)"
                       r"(\\?[\"']?\s*(?:[:=]|%3[ad])\s*\\?[\"']?)[A-Za-z0-9._~+/%\-]{6,}")
# no \b before it: "%22hf_..." or "token%3Dhf_..." put a letter or digit right before the prefix
_HF_TOKEN = re.compile(r"(hf|api)_[A-Za-z0-9]{20,}")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#@\"'<>]+@")
_URL_QUERY = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s?#\"'<>]+)\?([^\s#\"'<>]*)")
# query parameters that carry credentials in signed URLs (S3/CloudFront/GCS/Azure/Hub CDN) or tokens
_SIGNED_PARAMS = re.compile(r"(?i)^(x-amz-.*|x-goog-.*|x-xet-.*|signature|sig|key-pair-id|policy|expires|se|sp|sv|"
                            r"token|access_token|auth|authorization|api_key|apikey|key|credential|password|secret)\Z")


def _signed(query):
    names = [part.split("=", 1)[0] for part in query.split("&") if part]
    return any(_SIGNED_PARAMS.match(urllib.parse.unquote(name)) for name in names)


def _drop_signed_query(match):
    return match.group(1) + ("?" + MASK if _signed(match.group(2)) else "?" + match.group(2))


def _encoded_forms(secret):
    """The forms of one secret an upstream may echo: as it is, URL-encoded, JSON- and Python-escaped."""
    forms = {secret, secret.replace("/", "\\/")}
    for quoted in (urllib.parse.quote(secret, safe=""), urllib.parse.quote(secret),
                   urllib.parse.quote_plus(secret)):
        forms.add(quoted)
        forms.add(re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quoted))
        forms.add(urllib.parse.quote(quoted, safe=""))
    for escaped in (json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], repr(secret)[1:-1]):
        forms.add(escaped)
        forms.add(escaped.replace("/", "\\/"))
    return forms


_JSON_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[\"\\/bfnrt])")
_JSON_CHARS = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _json_unescaped(text):
    def one(match):
        code = match.group(1)
        return chr(int(code[1:], 16)) if code[0] == "u" else _JSON_CHARS.get(code, code)
    return _JSON_ESCAPE.sub(one, text)


def _decoded_views(text):
    """What a reader of ``text`` may decode it to (bounded: a few passes, no loop on hostile input)."""
    views = []
    for view in (urllib.parse.unquote(text), urllib.parse.unquote_plus(text), _json_unescaped(text)):
        views.append(view)
        views.append(urllib.parse.unquote(_json_unescaped(view)))
    return views


def _secrets(secrets):
    return tuple(s for s in secrets if isinstance(s, str) and len(s) >= 4)


@functools.lru_cache(maxsize=16)
def _all_forms(known):
    """Every form of the known secrets, longest first (scrub calls redact once per string: computed once)."""
    forms = set()
    for secret in known:
        forms |= _encoded_forms(secret)
    return tuple(sorted((f for f in forms if len(f) >= 4), key=len, reverse=True))


def redact(text, secrets=()):
    """``text`` without any secret in it (see the module doc); non-strings are returned as they are."""
    if not isinstance(text, str) or not text:
        return text
    known = _secrets(secrets)
    for form in _all_forms(known):
        text = text.replace(form, MASK)
    if known and any(c in text for c in "%+\\") and any(
            secret in view for view in _decoded_views(text) for secret in known):
        return WITHHELD
    text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _ASSIGNED.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _HF_TOKEN.sub(lambda m: m.group(1) + "_" + MASK, text)
    text = _USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    return _URL_QUERY.sub(_drop_signed_query, text)


def shorten(text, limit, secrets=()):
    """``text`` redacted, then cut to ``limit`` characters (in this order: see the module doc)."""
    text = redact(text if isinstance(text, str) else str(text), secrets)
    return text if len(text) <= limit else text[:limit] + "..."


def scrub(value, secrets=()):
    """A copy of a JSON-like ``value`` (dicts, lists, tuples, strings) with :func:`redact` applied to
    every string in it, keys included."""
    secrets = tuple(secrets)
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return dict((redact(k, secrets) if isinstance(k, str) else k, scrub(v, secrets)) for k, v in value.items())
    if isinstance(value, tuple):
        return tuple(scrub(v, secrets) for v in value)
    if isinstance(value, list):  # a plain list: ansible-core 2.19's lazy list cannot be built by its type
        return [scrub(v, secrets) for v in value]
    return value


def redact_url(url, keep_query=False):
    """``url`` as it may be printed: ``user:password@`` replaced by ``***@``, the query string dropped
    (signed CDN URLs carry credentials in it; ``keep_query``: only a signed one is masked)."""
    if not isinstance(url, str):
        return repr(url)
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = MASK + "@" + netloc.rsplit("@", 1)[1]
    return redact(urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query if keep_query else "", "")))
