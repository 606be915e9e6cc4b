# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""What hf_download accepts from the Hub and the operator before it touches the disk.

PRIVATE to the ct200.deploy collection.  Standard library only (used on the no-op path).

* ``repo_path_problem``: a tree-listing path is joined to ``local_dir`` only if
  huggingface_hub 2.4 itself would accept it (``_local_folder._validate_relative_filename``:
  no ``..`` segment, nothing absolute, drive-relative or UNC under POSIX *or* Windows
  rules) and, stricter, no ``.``/empty segment, no backslash, no NUL or other control
  character, and no collision with what hf_download keeps in ``local_dir`` itself
  (the ``.ct200/`` state directory, huggingface_hub's ``.cache/huggingface/``, and the
  ``*.ct200tmp`` temp names of the atomic writer).
* ``tree_entry_problem``: size and oid of a listing entry have the types and forms the
  rest of the code relies on (an int size >= 0, a 64-hex LFS sha256 or 40-hex git sha1).
* ``repo_id_problem``: huggingface_hub's ``validate_repo_id`` rule.
* ``endpoint_problem`` / ``redact_url``: an http(s) URL without credentials, and a form of
  any URL that is safe to print.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import PureWindowsPath

from ansible_collections.ct200.deploy.plugins.module_utils import redact as _redact

STATE_DIR = ".ct200"
HF_LOCAL_DIR = (".cache", "huggingface")
TMP_SUFFIX = ".ct200tmp"  # _io.TMP_SUFFIX; kept here so the no-op path imports nothing else
SHA256_RE = re.compile(r"^[0-9a-f]{64}\Z")
SHA1_RE = re.compile(r"^[0-9a-f]{40}\Z")
REPO_ID_RE = re.compile(r"^(\b[\w\-.]{1,96}\b/)?\b[\w\-.]{1,96}\b\Z")  # huggingface_hub's REPO_ID_REGEX, \Z: no final newline
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
NAME_MAX = 255  # bytes per path component on Linux filesystems (ext4, xfs, btrfs, tmpfs)


def repo_path_problem(path):
    """Why ``path`` (from a tree listing) must not be written under local_dir; None if it is fine."""
    if not isinstance(path, str) or not path:
        return "it is empty or not a string"
    if _CONTROL.search(path):
        return "it contains a NUL or another control character"
    if "\\" in path:
        return "it contains a backslash"
    if path.startswith("/"):
        return "it is an absolute path"
    parts = path.split("/")
    if ".." in parts:
        return "it has a '..' segment"
    if any(part in ("", ".") for part in parts):
        return "it has an empty or '.' segment"
    long_part = next((part for part in parts if len(part.encode("utf-8")) > NAME_MAX), None)
    if long_part is not None:
        return ("its component %r... is %d bytes long; Linux filesystems allow at most %d bytes per name"
                % (long_part[:40], len(long_part.encode("utf-8")), NAME_MAX))
    if any(PureWindowsPath(part).drive or PureWindowsPath(part).root for part in parts):
        return "it is a drive-relative or UNC path"
    if parts[0] == STATE_DIR:
        return "it is inside %s/, where hf_download keeps its manifest, lock and partial files" % STATE_DIR
    if tuple(parts[:2]) == HF_LOCAL_DIR:
        return "it is inside .cache/huggingface/, huggingface_hub's own metadata directory"
    if parts[-1].endswith(TMP_SUFFIX):
        return "its name ends in %s, the suffix of ct200.deploy's temp files" % TMP_SUFFIX
    return None


def tree_shape_problem(paths):
    """Why a listing's ``paths`` cannot all be files at once (one is also a directory of another); None if fine."""
    files = set(paths)
    for path in sorted(files):
        parts = path.split("/")
        for depth in range(1, len(parts)):
            directory = "/".join(parts[:depth])
            if directory in files:
                return ("it lists %r as a file and also %r inside it, as if %r were a directory; a filesystem "
                        "cannot hold both" % (directory, path, directory))
    return None


def tree_entry_problem(entry):
    """Why a tree entry ({"size", "oid", "lfs"}) cannot be planned; None if it is fine."""
    if not isinstance(entry, dict):
        return "the entry is not an object"
    size = entry.get("size")
    if isinstance(size, bool) or not isinstance(size, int):
        return "its size is missing or not an integer (%r)" % (size,)
    if size < 0:
        return "its size is negative (%d)" % size
    oid = entry.get("oid")
    if entry.get("lfs"):
        if not isinstance(oid, str) or not SHA256_RE.match(oid):
            return "its lfs.oid is not a 64-hex sha256 (%r)" % (oid if not isinstance(oid, str) else oid[:80],)
    elif not isinstance(oid, str) or not SHA1_RE.match(oid):
        return "its oid is not a 40-hex git blob sha1 (%r)" % (oid if not isinstance(oid, str) else oid[:80],)
    return None


def repo_id_problem(repo_id):
    """huggingface_hub's validate_repo_id rule, as a reason string or None."""
    if not isinstance(repo_id, str) or not repo_id:
        return "it is empty"
    if repo_id.count("/") > 1:
        return "it has more than one '/' (use repo_type for datasets and spaces)"
    if not REPO_ID_RE.match(repo_id):
        return ("use 'org/name' with letters, digits, '-', '_' or '.', not starting or ending with "
                "'-' or '.', at most 96 characters per part")
    if "--" in repo_id or ".." in repo_id:
        return "it contains '--' or '..'"
    if repo_id.endswith(".git"):
        return "it ends in '.git'"
    return None


def redact_url(url):
    """``url`` with any ``user:password@`` replaced by ``***@`` and a signed query masked (safe to print)."""
    return _redact.redact_url(url, keep_query=True)


def url_credentials(url):
    """The secret parts (userinfo, password) of ``url``, to hide from every output."""
    if not isinstance(url, str):
        return []
    try:
        parts = urllib.parse.urlsplit(url)
    except (ValueError, TypeError, AttributeError):
        return []
    if "@" not in parts.netloc:
        return []
    userinfo = parts.netloc.rsplit("@", 1)[0]
    return sorted(s for s in (userinfo, parts.password, urllib.parse.unquote(parts.password or "")) if s)


def endpoint_problem(endpoint):
    """Why ``endpoint`` is not usable as a Hub URL; None if it is fine."""
    if not isinstance(endpoint, str):
        return "it is not a string"
    try:
        parts = urllib.parse.urlsplit(endpoint)
    except (ValueError, TypeError, AttributeError):
        return "it is not a URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "it is not an http:// or https:// URL"
    if "@" in parts.netloc:
        return "it carries credentials (user:password@); they would end up in logs. Pass the Hub token as 'token'"
    if _CONTROL.search(endpoint) or " " in endpoint:
        return "it contains whitespace or control characters"
    return None
