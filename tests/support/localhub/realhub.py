# SPDX-License-Identifier: Apache-2.0
"""Real-Hub behaviours the plain local Hub leaves out (off until a test switches them on).

* **Signed, expiring CDN URLs** (``hub.cdn_expiry = N``): the LFS 302 points to
  ``/cdn/<sha256>?Expires=..&Signature=..&Key-Pair-Id=..`` (the CloudFront form of
  ``cdn-lfs*.hf.co``); after ``N`` seconds, or with a wrong signature, the CDN answers
  403 with CloudFront/S3's XML body ``<Error><Code>AccessDenied</Code><Message>Access
  Denied</Message></Error>`` (as reported from cdn-lfs-us-1.hf.co, huggingface_hub#4430).
  A stream that started before the expiry keeps going, like on the real CDN.
* **Edge-cached redirects** (``hub.redirect_cache = S``): ``/resolve`` hands back the same
  signed URL for ``S`` seconds (an edge that caches the 302), so a client that re-resolves at
  once can get the URL that just expired.
* **Xet** (``hub.xet = True``): tree listings carry ``xetHash`` (the real Xet hash, computed by
  ``hf_xet.hash_files``) beside ``lfs``, and LFS files 302 to a second origin imitating
  ``cas-bridge.xethub.hf.co``: ``http://localhost:<bridge port>/xet-bridge-us/<repo>/<xetHash>``
  signed the S3 way (``X-Amz-Date``, ``X-Amz-Expires``, ``X-Amz-Signature``); expired URLs
  get S3's 403 "Request has expired" body.  ``hub.xet_without_lfs = True`` lists those
  files with ``xetHash`` and **no** ``lfs`` (what a client that only knows sha256 cannot verify).
  The resolve answer carries ``X-Xet-Hash`` but no ``xet-auth`` Link, so huggingface_hub
  itself stays on plain HTTP.

The rate limit (``RateLimit``/``RateLimit-Policy`` on 429) is the fault kind ``ratelimit``
(localhub.faults); the authenticated proxy is localhub.proxy.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import math
import time
from urllib.parse import quote, urlencode

CLOUDFRONT_DENIED = (b'<?xml version="1.0" encoding="UTF-8"?>\n'
                     b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>")
KEY_PAIR_ID = "K3LOCALHUBCDN"
BRIDGE_PREFIX = "/xet-bridge-us/"
DEFAULT_BRIDGE_EXPIRY = 3600  # the real cas-bridge signs for an hour (X-Amz-Expires=3600)


def _sign(secret: bytes, *parts: str) -> str:
    return hmac.new(secret, "\n".join(parts).encode(), hashlib.sha256).hexdigest()


def cdn_query(secret: bytes, path: str, expiry: float, now: float | None = None) -> str:
    """The CloudFront-style query of a CDN URL valid ``expiry`` seconds from ``now``."""
    expires = int(math.ceil((time.time() if now is None else now) + expiry))
    return urlencode({"Expires": expires, "Signature": _sign(secret, path, str(expires)), "Key-Pair-Id": KEY_PAIR_ID})


def cdn_denied(secret: bytes, path: str, query: dict, now: float | None = None) -> bool:
    """True when a signed CDN URL is expired, unsigned or tampered with."""
    expires = (query.get("Expires") or [""])[0]
    signature = (query.get("Signature") or [""])[0]
    if not expires.isdigit() or not hmac.compare_digest(signature, _sign(secret, path, expires)):
        return True
    return (time.time() if now is None else now) >= int(expires)


def _amz_date(epoch: int) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch))


def bridge_path(repo_key: str, xet_hash: str) -> str:
    return f"{BRIDGE_PREFIX}{repo_key}/{xet_hash}"


def bridge_query(secret: bytes, path: str, expiry: int, now: float | None = None) -> str:
    """The S3 presigned query the cas-bridge URLs carry (X-Amz-*), valid ``expiry`` seconds."""
    date = int(math.ceil(time.time() if now is None else now))
    amz_date = _amz_date(date)
    credential = f"LOCALHUBBRIDGE/{amz_date[:8]}/us-east-1/s3/aws4_request"
    params = {
        "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
        "X-Amz-Content-Sha256": "UNSIGNED-PAYLOAD",
        "X-Amz-Credential": credential,
        "X-Amz-Date": amz_date,
        "X-Amz-Expires": str(int(expiry)),
        "X-Amz-Signature": _sign(secret, path, amz_date, str(int(expiry))),
        "X-Amz-SignedHeaders": "host",
        "x-id": "GetObject",
    }
    return urlencode(params, quote_via=quote)


def bridge_denied(secret: bytes, path: str, query: dict, now: float | None = None) -> bytes | None:
    """None if the presigned bridge URL is valid now, else S3's 403 XML body saying why."""
    amz_date = (query.get("X-Amz-Date") or [""])[0]
    expires = (query.get("X-Amz-Expires") or [""])[0]
    signature = (query.get("X-Amz-Signature") or [""])[0]
    if not expires.isdigit() or not hmac.compare_digest(signature, _sign(secret, path, amz_date, expires)):
        return (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SignatureDoesNotMatch</Code><Message>The '
                b"request signature we calculated does not match the signature you provided.</Message></Error>")
    try:
        signed = calendar.timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ"))
    except ValueError:
        return b"<Error><Code>AuthorizationQueryParametersError</Code><Message>Invalid X-Amz-Date</Message></Error>"
    now = time.time() if now is None else now
    if now < signed + int(expires):
        return None
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>Request has expired'
            f"</Message><X-Amz-Expires>{expires}</X-Amz-Expires><Expires>{_iso(signed + int(expires))}</Expires>"
            f"<ServerTime>{_iso(now)}</ServerTime><RequestId>LOCALHUB</RequestId></Error>").encode()


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def xet_hash_of(disk_path) -> str:  # noqa: ANN001
    """The file's real Xet hash (hf_xet's chunking and merkle hash), as the Hub lists it in ``xetHash``."""
    try:
        import hf_xet
    except ImportError as exc:  # pragma: no cover - hf_xet ships with huggingface_hub 2.4
        raise RuntimeError("hub.xet needs the hf_xet package (pip install hf_xet) to compute real Xet hashes") from exc
    return hf_xet.hash_files([str(disk_path)])[0].hash
