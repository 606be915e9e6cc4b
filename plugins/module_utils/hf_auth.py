# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face token handling shared by the ct200.deploy modules.

Pure functions, no huggingface_hub import: token normalisation, resolution in
huggingface_hub 2.4's order for a given OS user, fingerprints, and where the
token file of a user lives.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pwd
import unicodedata
from dataclasses import dataclass, field

ENV_TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


class TokenError(ValueError):
    """A token that must never be sent; the message names the problem and the fix."""


def _describe_char(ch: str) -> str:
    names = {"\n": "a newline (\\n)", "\r": "a carriage return (\\r)", "\t": "a tab", " ": "a space"}
    if ch in names:
        return names[ch]
    return "the control character U+%04X" % ord(ch) if unicodedata.category(ch).startswith("C") \
        else "the character U+%04X (%s)" % (ord(ch), unicodedata.name(ch, "unnamed"))


def normalize_token(raw, source: str = "token") -> str:
    """Strip surrounding whitespace and refuse what huggingface_hub would send broken.

    An empty token makes huggingface_hub send ``Authorization: Bearer `` (h11
    then crashes with "Illegal header value b'Bearer '"); a newline inside a
    token is silently deleted by huggingface_hub, turning it into another token.
    Both are refused here with a message naming the source, never the value.
    """
    if raw is None:
        raise TokenError("%s is missing: set it to a Hugging Face access token (hf_...)" % source)
    if not isinstance(raw, str):
        raise TokenError("%s must be a string, got %s" % (source, type(raw).__name__))
    token = raw.strip()
    if not token:
        what = "empty" if raw == "" else "whitespace-only"
        raise TokenError(
            "%s is %s: an empty token would be sent as 'Authorization: Bearer ' and rejected; "
            "set it to a Hugging Face access token (hf_...)" % (source, what))
    for pos, ch in enumerate(token):
        if ch.isspace() or unicodedata.category(ch).startswith("C") or ord(ch) > 126:
            raise TokenError(
                "%s contains %s at position %d: a token is one line of printable ASCII; "
                "re-copy it from https://huggingface.co/settings/tokens" % (source, _describe_char(ch), pos))
    return token


def fingerprint(token: str) -> str:
    """Identify a token without revealing it: ``sha256:`` + first 12 hex digits."""
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()[:12]


def tokens_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def _current_user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def user_home(user: str | None) -> str:
    if user is None:
        return os.path.expanduser("~")
    try:
        return pwd.getpwnam(user).pw_dir
    except KeyError:
        raise TokenError("user %r does not exist on this host: create it first or set owner to an existing user" % user)


def _expand(path: str, home: str) -> str:
    if path.startswith("~"):
        path = home + path[1:]
    return os.path.expandvars(path)


def hf_token_path(user: str | None = None, environ=None) -> str:
    """Where huggingface_hub 2.4 reads the token file, for ``user``.

    For the user this process runs as, the process environment applies
    (``HF_TOKEN_PATH``, else ``$HF_HOME/token``, else
    ``$XDG_CACHE_HOME/huggingface/token``, else ``~/.cache/huggingface/token``).
    For another user, their environment is unknown here, so their home default
    is used: a module run with ``become`` reads root's file, not the service
    user's, which is exactly the field failure this function exists to expose.
    """
    env = os.environ if environ is None else environ
    if user is None or user == _current_user():
        home = user_home(None)
        if env.get("HF_TOKEN_PATH"):
            return _expand(env["HF_TOKEN_PATH"], home)
        cache_home = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
        hf_home = env.get("HF_HOME") or os.path.join(cache_home, "huggingface")
        return os.path.join(_expand(hf_home, home), "token")
    return os.path.join(user_home(user), ".cache", "huggingface", "token")


@dataclass
class ResolvedToken:
    """The token a module will send, and where it came from (never the value in reprs)."""
    token: str | None
    source: str | None                      # "explicit", "env:HF_TOKEN", "file:/path", or None
    checked: list = field(default_factory=list)   # sources looked at, in order
    problems: list = field(default_factory=list)  # sources that were set but unusable

    def __repr__(self):
        fp = fingerprint(self.token) if self.token else None
        return "ResolvedToken(source=%r, fingerprint=%r)" % (self.source, fp)

    @property
    def fingerprint(self):
        return fingerprint(self.token) if self.token else None


def resolve_token(explicit=None, user: str | None = None, environ=None) -> ResolvedToken:
    """Resolve the token like huggingface_hub 2.4 for ``user``: explicit > HF_TOKEN >
    HUGGING_FACE_HUB_TOKEN > token file (HF_TOKEN_PATH / $HF_HOME/token).

    An explicit token is validated strictly (an empty one is an error, never
    "anonymous"). An environment variable or file that is set but empty falls
    through as in huggingface_hub, and is recorded in ``problems``; one with a
    newline or control character inside is an error.
    """
    env = os.environ if environ is None else environ
    res = ResolvedToken(token=None, source=None)
    if explicit is not None:
        res.checked.append("explicit")
        res.token = normalize_token(explicit, "the token option")
        res.source = "explicit"
        return res
    same_user = user is None or user == _current_user()
    if same_user:
        for var in ENV_TOKEN_VARS:
            if var not in env:
                continue
            res.checked.append("env:" + var)
            if not env[var].strip():
                res.problems.append("%s is set but empty" % var)
                continue
            res.token = normalize_token(env[var], "environment variable " + var)
            res.source = "env:" + var
            return res
    path = hf_token_path(user, env)
    res.checked.append("file:" + path)
    try:
        with open(path, "r", encoding="utf-8") as fh:
            content = fh.read()
    except FileNotFoundError:
        res.problems.append("token file %s does not exist" % path)
        return res
    except PermissionError:
        res.problems.append("token file %s is not readable by %s" % (path, user or _current_user()))
        return res
    except UnicodeDecodeError:
        raise TokenError("token file %s is not UTF-8 text: rewrite it with the hf_token module" % path)
    if not content.strip():
        res.problems.append("token file %s is empty" % path)
        return res
    res.token = normalize_token(content, "token file " + path)
    res.source = "file:" + path
    return res


def describe_missing(res: ResolvedToken, user: str | None = None) -> str:
    """Why no token was found, for a message that says what was looked at."""
    who = user or _current_user()
    looked = ", ".join(res.checked) or "nothing"
    why = "; ".join(res.problems)
    return "no Hugging Face token for user %s (looked at: %s%s)" % (who, looked, "; " + why if why else "")
