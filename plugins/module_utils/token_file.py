# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# Apache-2.0
"""Install or remove a Hugging Face token file: born 0600, atomic, idempotent.

The file is created with mode 0600 from its first byte (O_CREAT|O_EXCL in the
target directory), fsynced, given its owner and final mode, and only then
renamed over the old file, so a reader sees either the old token or the new
one, never a partial or world-readable file. Changes are decided by a
constant-time comparison of the normalised contents; diffs and results carry
fingerprints, never the token.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
import tempfile
from dataclasses import dataclass

from ansible_collections.ct200.deploy.plugins.module_utils.hf_auth import (
    TokenError, fingerprint, normalize_token, tokens_equal)


@dataclass
class FileState:
    exists: bool
    fingerprint: str | None = None
    mode: str | None = None
    owner: str | None = None
    group: str | None = None
    problem: str | None = None

    def as_diff(self):
        if not self.exists:
            return {"state": "absent"}
        return {"state": "present", "fingerprint": self.fingerprint, "mode": self.mode,
                "owner": self.owner, "group": self.group}


def parse_mode(mode) -> int:
    if isinstance(mode, int):
        return mode
    try:
        value = int(str(mode), 8)
    except ValueError:
        raise TokenError("mode %r is not an octal mode such as '0600'" % (mode,))
    if value & 0o077 & ~0o040:
        raise TokenError("mode %s would let other users read or write the token: use 0600 (or 0640 for a "
                         "group that must read it)" % mode)
    return value


def _name_of_uid(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _name_of_gid(gid):
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def read_state(path: str):
    """Current file state and its normalised token (None if absent or unreadable)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return FileState(exists=False), None
    if not stat.S_ISREG(st.st_mode):
        raise TokenError("%s exists and is not a regular file (a symlink or directory): remove it or choose "
                         "another path" % path)
    state = FileState(exists=True, mode="%04o" % stat.S_IMODE(st.st_mode), owner=_name_of_uid(st.st_uid),
                      group=_name_of_gid(st.st_gid))
    try:
        with open(path, "r", encoding="utf-8") as fh:
            content = fh.read()
        current = normalize_token(content, "existing token file " + path)
        state.fingerprint = fingerprint(current)
        return state, current
    except (TokenError, UnicodeDecodeError) as exc:
        state.problem = str(exc)
        state.fingerprint = "unparseable"
        return state, None


def resolve_ids(owner, group):
    try:
        uid = pwd.getpwnam(owner).pw_uid if owner else os.geteuid()
    except KeyError:
        raise TokenError("owner %r does not exist on this host: create the user first" % owner)
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise TokenError("group %r does not exist on this host: create it first" % group)
    elif owner:
        gid = pwd.getpwnam(owner).pw_gid
    else:
        gid = os.getegid()
    return uid, gid


def plan(path, token, state, owner, group, mode):
    """What must change to reach 'present'; returns (current, desired, needs_write, needs_attrs)."""
    current, current_token = read_state(path)
    uid, gid = resolve_ids(owner, group)
    desired = FileState(exists=True, fingerprint=fingerprint(token) if token else None, mode="%04o" % mode,
                        owner=_name_of_uid(uid), group=_name_of_gid(gid))
    if state == "absent":
        return current, FileState(exists=False), False, False
    needs_write = current_token is None or not tokens_equal(current_token, token)
    needs_attrs = (not needs_write) and (current.mode, current.owner, current.group) != (
        desired.mode, desired.owner, desired.group)
    return current, desired, needs_write, needs_attrs


def _ensure_parent(path, uid, gid):
    """Create missing parent directories 0700, owned by the token owner (like huggingface_hub's login)."""
    parent = os.path.dirname(path)
    missing = []
    while parent and not os.path.isdir(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    for d in reversed(missing):
        os.mkdir(d, 0o700)
        os.chown(d, uid, gid)
    return list(reversed(missing))


def write_atomically(path, token, owner, group, mode):
    """Write ``token`` to ``path`` born 0600 and rename it into place.

    os.replace, not AnsibleModule.atomic_move: the latter copies the old file's
    mode onto the new one, which would publish a token under a 0644 it replaces.
    """
    uid, gid = resolve_ids(owner, group)
    created_dirs = _ensure_parent(path, uid, gid)
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".hf_token.", dir=directory)  # mkstemp opens O_EXCL with 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(token + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chown(tmp, uid, gid)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return created_dirs


def fix_attributes(path, owner, group, mode):
    uid, gid = resolve_ids(owner, group)
    os.chown(path, uid, gid)
    os.chmod(path, mode)


def validated_token(raw):
    return normalize_token(raw, "the token option")
