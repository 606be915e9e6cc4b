# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""The one redaction step for every string that leaves a process or lands in a file.

PRIVATE to the ct200.deploy collection.  Standard library only (used on the no-op path too).

An upstream that is not the Hub (a debugging proxy, a broken mirror, a hostile peer) may echo
the request's ``Authorization`` header, a signed CDN URL or credentials it saw into an error
body, ``X-Error-Message`` or any other header, and that text is what error messages quote.
:func:`redact` removes from any text:

* the secrets the caller knows (the token in use, URL passwords): every occurrence;
* ``Bearer <anything>`` (any case, also ``Authorization: Basic ...``) and ``token=...``/``token: ...``
  (also ``password``, ``secret``, ``api_key``);
* strings shaped like Hugging Face tokens (``hf_`` + 20 or more letters and digits; the
  collection's own names such as ``hf_download`` are shorter or contain ``_``);
* the userinfo of a URL (``scheme://user:password@host`` -> ``scheme://***@host``);
* the query of a URL that carries a signature or credential (``X-Amz-Signature``, ``Signature``,
  ``Key-Pair-Id``, ``Policy``, ``sig``, ``token``...): it is dropped whole.

:func:`scrub` applies it to every string of a JSON-like value (module results, progress and
state documents, reports).  :func:`redact_url` is the form of one URL that may be printed.
"""

from __future__ import annotations

import re
import urllib.parse

MASK = "***"
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=\-]{6,}")
_ASSIGNED = re.compile(r"(?i)\b(token|access_token|api_key|password|secret)([\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9._~+/\-]{6,}")
_HF_TOKEN = re.compile(r"\b(hf|api)_[A-Za-z0-9]{20,}")
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


def redact(text, secrets=()):
    """``text`` without any secret in it (see the module doc); non-strings are returned as they are."""
    if not isinstance(text, str) or not text:
        return text
    for secret in sorted((s for s in secrets if isinstance(s, str) and len(s) >= 4), key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _ASSIGNED.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _HF_TOKEN.sub(lambda m: m.group(1) + "_" + MASK, text)
    text = _USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    return _URL_QUERY.sub(_drop_signed_query, text)


def scrub(value, secrets=()):
    """A copy of a JSON-like ``value`` (dicts, lists, tuples, strings) with :func:`redact` applied to
    every string in it, keys included."""
    secrets = tuple(secrets)
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return dict((redact(k, secrets) if isinstance(k, str) else k, scrub(v, secrets)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(scrub(v, secrets) for v in value)
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
