# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Install, restore or remove a Hugging Face token file: born 0600, atomic, idempotent.

Every byte goes through ``_io`` (temp file created O_EXCL|O_NOFOLLOW with its
final mode and owner, fsync, rename, directory fsync). Before anything is
written the token path's parents are walked: a symlink anywhere on the path,
or a directory that someone other than root and the token's owner can write
to, is refused, because such a directory lets that someone redirect root's
write (the field case: a symlinked ~/.cache owned by another user). The write
itself then walks down from the deepest root-owned parent with O_NOFOLLOW, so
the owner cannot swap a directory for a symlink between check and write.
Changes are decided by a constant-time comparison of the normalised contents;
diffs and results carry fingerprints, never the token.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
import time
from dataclasses import dataclass

from ansible_collections.ct200.deploy.plugins.module_utils._io import (
    UnsafePathError, atomic_write, open_nofollow, parent_fd, remove_stale_temps, safe_remove)
from ansible_collections.ct200.deploy.plugins.module_utils.hf_auth import (
    TokenError, fingerprint, normalize_token, tokens_equal)

BACKUP_MODE = 0o600
MAX_TOKEN_FILE_BYTES = 64 * 1024


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


def check_path(path) -> str:
    """The token path must be absolute: a relative one would land wherever the module happens to run."""
    if not isinstance(path, str) or not path:
        raise TokenError("the token path is empty: give an absolute path such as /root/.cache/huggingface/token")
    if not os.path.isabs(path):
        raise TokenError("token path %r is relative (it would be written into whatever directory the module runs "
                         "in): give an absolute path such as /root/.cache/huggingface/token" % path)
    if "\x00" in path:
        raise TokenError("token path %r contains a NUL byte: give a plain absolute path" % path)
    return os.path.normpath(path)


def parse_mode(mode) -> int:
    try:
        value = mode if isinstance(mode, int) else int(str(mode), 8)
    except ValueError:
        raise TokenError("mode %r is not an octal mode such as '0600'" % (mode,)) from None
    if value < 0 or value > 0o7777:
        raise TokenError("mode %r is not a file mode: use 0600" % (mode,))
    if value & 0o7000:
        raise TokenError("mode %s sets setuid, setgid or sticky bits, which have no place on a token file: use 0600"
                         % mode)
    if not value & 0o400:
        raise TokenError("mode %s does not let the owner read the token, so huggingface_hub could not use it: "
                         "use 0600" % mode)
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


def resolve_ids(owner, group):
    try:
        uid = pwd.getpwnam(owner).pw_uid if owner else os.geteuid()
    except KeyError:
        raise TokenError("owner %r does not exist on this host: create the user first" % owner) from None
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise TokenError("group %r does not exist on this host: create it first" % group) from None
    elif owner:
        gid = pwd.getpwnam(owner).pw_gid
    else:
        gid = os.getegid()
    return uid, gid


# ------------------------------------------------------------------ parents

def _unsafe_dir_reason(st, uid, gid, is_token_dir):
    """Why a directory on the token path lets someone else redirect the write, or None."""
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid not in (0, uid):
        return "is owned by %s, neither root nor the token's owner" % _name_of_uid(st.st_uid)
    if mode & stat.S_IWGRP and st.st_gid not in (0, gid):
        return "is writable by group %s" % _name_of_gid(st.st_gid)
    if mode & stat.S_IWOTH:
        # A sticky world-writable ancestor (/tmp) is tolerated: others may add entries but
        # not rename or replace ours, and an entry they add is owned by them, which the
        # check of the next component refuses. The token's own directory gets no such pass.
        if is_token_dir or not mode & stat.S_ISVTX:
            return "is writable by every user"
    return None


def check_parents(path, uid, gid):
    """Walk the existing parents of ``path`` from / down; refuse symlinks and foreign-writable directories.

    Returns (trusted_root, missing): the deepest existing parent reached through root-owned
    directories only (everything below it is walked with O_NOFOLLOW when writing) and the parent
    directories that do not exist yet, top-down.
    """
    directory = os.path.dirname(path)
    parts = [p for p in directory.split("/") if p]
    current, trusted_root, missing = "/", "/", []
    for i in range(len(parts) + 1):
        if i:
            current = os.path.join(current, parts[i - 1])
        if missing:
            missing.append(current)
            continue
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            missing.append(current)
            continue
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePathError("%s (a parent of the token path %s) is a symlink: ct200.deploy never writes a "
                                  "token through a symlink; point the path at the real directory or remove the "
                                  "link" % (current, path))
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePathError("%s (a parent of the token path %s) is not a directory: remove it or choose "
                                  "another path" % (current, path))
        reason = _unsafe_dir_reason(st, uid, gid, is_token_dir=(current == directory))
        if reason:
            raise UnsafePathError("%s (a parent of the token path %s) %s, who could redirect the write: make it "
                                  "owned by root or %s and not writable by others, or choose another path"
                                  % (current, path, reason, _name_of_uid(uid)))
        # Below the first directory root does not own, its owner could swap entries: the
        # write walks with O_NOFOLLOW from the last directory of an all-root chain.
        if st.st_uid == 0 and trusted_root == os.path.dirname(current.rstrip("/")) or current == "/":
            trusted_root = current
    return trusted_root, missing


def _make_dirs(missing, trusted_root, uid, gid):
    """Create the missing parents 0700, owned by the token owner (like huggingface_hub's login), without
    following a symlink anywhere below ``trusted_root``."""
    for directory in missing:
        dir_fd, name = parent_fd(directory, root=trusted_root)
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                os.fchown(fd, uid, gid)
                os.fchmod(fd, 0o700)
            finally:
                os.close(fd)
        finally:
            os.close(dir_fd)
    return missing


# ------------------------------------------------------------------ reading

def _read_file(path):
    """(stat, bytes) of a regular file, never following a symlink in the last component."""
    try:
        fd = open_nofollow(path, os.O_RDONLY)
    except UnsafePathError:
        raise TokenError("%s exists and is not a regular file (a symlink, fifo or directory): remove it or choose "
                         "another path" % path) from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        return st, fh.read(MAX_TOKEN_FILE_BYTES + 1)


def read_state(path: str):
    """Current file state and its normalised token (None if absent or unparseable)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return FileState(exists=False), None
    if not stat.S_ISREG(st.st_mode):
        raise TokenError("%s exists and is not a regular file (a symlink or directory): remove it or choose "
                         "another path" % path)
    st, content = _read_file(path)
    state = FileState(exists=True, mode="%04o" % stat.S_IMODE(st.st_mode), owner=_name_of_uid(st.st_uid),
                      group=_name_of_gid(st.st_gid))
    try:
        current = normalize_token(content.decode("utf-8"), "existing token file " + path)
        state.fingerprint = fingerprint(current)
        return state, current
    except (TokenError, UnicodeDecodeError) as exc:
        state.problem = str(exc)
        state.fingerprint = "unparseable"
        return state, None


def read_backup(backup_path, token_path):
    """The token held by a backup made by :func:`backup` (same directory as the token file)."""
    backup_path = check_path(backup_path)
    if os.path.dirname(backup_path) != os.path.dirname(token_path) or \
            not os.path.basename(backup_path).startswith(os.path.basename(token_path) + "."):
        raise TokenError("restore_from %s is not a backup of %s (backups sit next to the token file and start with "
                         "its name)" % (backup_path, token_path))
    try:
        _unused, content = _read_file(backup_path)
    except FileNotFoundError:
        raise TokenError("backup %s does not exist: nothing to restore from" % backup_path) from None
    try:
        return normalize_token(content.decode("utf-8"), "backup " + backup_path)
    except UnicodeDecodeError:
        raise TokenError("backup %s is not UTF-8 text: it is not a token backup" % backup_path) from None


# ------------------------------------------------------------------ planning

def plan(path, token, state, owner, group, mode):
    """What must change to reach ``state``; returns (current, current_token, desired, needs_write, needs_attrs)."""
    current, current_token = read_state(path)
    uid, gid = resolve_ids(owner, group)
    desired = FileState(exists=True, fingerprint=fingerprint(token) if token else None, mode="%04o" % mode,
                        owner=_name_of_uid(uid), group=_name_of_gid(gid))
    if state != "present":
        return current, current_token, FileState(exists=False), False, False
    needs_write = current_token is None or not tokens_equal(current_token, token)
    needs_attrs = (not needs_write) and (current.mode, current.owner, current.group) != (
        desired.mode, desired.owner, desired.group)
    return current, current_token, desired, needs_write, needs_attrs


# ------------------------------------------------------------------ writing

def write_token(path, token, owner, group, mode):
    """Write ``token`` to ``path`` through ``_io`` (born with its final mode and owner); returns created dirs."""
    uid, gid = resolve_ids(owner, group)
    trusted_root, missing = check_parents(path, uid, gid)
    created = _make_dirs(missing, trusted_root, uid, gid)
    remove_stale_temps(os.path.dirname(path), root=trusted_root)  # left by a run killed mid-write
    atomic_write(path, token + "\n", mode=mode, uid=uid, gid=gid, root=trusted_root)
    return created


def fix_attributes(path, owner, group, mode):
    """Rewrite the same token with the wanted owner and mode: atomic, and never chmod through a symlink."""
    _unused, token = read_state(path)
    if token is None:
        raise TokenError("%s no longer holds a token: run again" % path)
    write_token(path, token, owner, group, mode)


def backup(path, owner, group):
    """Keep the file's current bytes next to it, born 0600 whatever the old file's mode was."""
    uid, gid = resolve_ids(owner, group)
    trusted_root, _unused = check_parents(path, uid, gid)
    st, content = _read_file(path)
    backup_path = "%s.%s.%d.bak" % (path, time.strftime("%Y%m%dT%H%M%S"), os.getpid())
    atomic_write(backup_path, content[:MAX_TOKEN_FILE_BYTES], mode=BACKUP_MODE, uid=st.st_uid, gid=st.st_gid,
                 root=trusted_root)
    return backup_path


def remove(path, owner, group):
    uid, gid = resolve_ids(owner, group)
    trusted_root, _unused = check_parents(path, uid, gid)
    return safe_remove(path, root=trusted_root)


def validated_token(raw):
    return normalize_token(raw, "the token option")
