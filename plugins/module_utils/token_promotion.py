# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Promotion: the rotated token becomes the inventory's current token (the source of truth).

Like a secrets manager's finishSecret: the pending token becomes current and the current one is
kept for rollback. One implementation for both places an inventory reads its token from, called
by the ``ct200.deploy.hf_token_promote`` action (``playbooks/promote_hf_token.yml``, which
``ct200 promote-token`` and ``ct200 rotate-token --promote`` run):

* a controller token file (``ct200_hf_token: "{{ lookup('file', ...) }}"``): rewritten born 0600,
  atomic, the previous content kept next to it as a 0600 backup;
* a variable file (``group_vars/ct200/vault.yml``, ansible-vault encrypted or plain): only
  ``<var>`` and ``<var>_previous`` change, every other line stays as written; an encrypted file
  stays encrypted with the run's vault secret. A plain-text file that its group or others can read
  is refused (the token would be readable by them); a file that does not exist is created 0600.
  Either plain case says how to encrypt it.
"""

from __future__ import annotations

import json
import os
import re


from ansible_collections.ct200.deploy.plugins.module_utils import token_file
from ansible_collections.ct200.deploy.plugins.module_utils._io import UnsafePathError, atomic_write, open_nofollow
from ansible_collections.ct200.deploy.plugins.module_utils.hf_auth import TokenError, fingerprint

TARGETS = ("token_file", "vars_file")
# the options of the ct200.deploy.hf_token_promote action (its module stub declares exactly these)
ARGUMENT_SPEC = dict(
    token=dict(type="str", required=True, no_log=True),
    path=dict(type="path", required=True),
    target=dict(type="str", choices=list(TARGETS), default="token_file"),
    var=dict(type="str", default="vault_hf_token"),
)
VAULT_HEADER = b"$ANSIBLE_VAULT;"
MAX_FILE_BYTES = 1 << 20
NEW_FILE_MODE = 0o600


class PromotionError(ValueError):
    """Refused: the message names the cause and the fix; nothing was written."""


def encrypt_hint(path: str) -> str:
    return "encrypt it: ansible-vault encrypt %s (then run with --ask-vault-pass or --vault-password-file)" % path


def _read(path: str):
    """(bytes, stat) of ``path``, or (None, None) when it does not exist; never follows a symlink."""
    try:
        fd = open_nofollow(path, os.O_RDONLY)
    except FileNotFoundError:
        return None, None
    except (UnsafePathError, OSError) as exc:
        raise PromotionError("%s: %s" % (path, exc)) from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise PromotionError("%s is larger than 1 MiB: it is not a variable file" % path)
    return data, st


def _set_scalar(lines: list[str], key: str, value: str, path: str) -> list[str]:
    """Replace (or append) the top-level ``key: value`` line; refuse a multi-line value."""
    pattern = re.compile(r"^%s\s*:" % re.escape(key))
    hits = [i for i, line in enumerate(lines) if pattern.match(line)]
    new_line = "%s: %s" % (key, json.dumps(value))
    if not hits:
        return lines + [new_line]
    if len(hits) > 1:
        raise PromotionError("%s defines %s %d times: keep one definition and run again" % (path, key, len(hits)))
    i = hits[0]
    if i + 1 < len(lines) and lines[i + 1][:1] in (" ", "\t") and lines[i + 1].strip():
        raise PromotionError("%s: %s is not a one-line value; write it as %s: \"hf_...\" and run again"
                             % (path, key, key))
    return lines[:i] + [new_line] + lines[i + 1:]


def _parse(text: str, path: str) -> dict:
    import yaml  # controller side only (the action plugin); PyYAML comes with ansible-core
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PromotionError("%s is not valid YAML (%s): fix it and run again" % (path, str(exc).splitlines()[0])) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PromotionError("%s is not a mapping of variables" % path)
    return data


def _refuse_readable_plain_text(path: str, st) -> None:
    if st.st_mode & 0o077:
        raise PromotionError(
            "%s is plain text and readable by its group or others (mode %04o): the new token would be too; "
            "nothing was written. Fix: %s, or at least chmod 600 %s, and run again"
            % (path, st.st_mode & 0o7777, encrypt_hint(path), path))


def _decrypt(raw: bytes, vault, path: str) -> str:
    if vault is None or not vault.can_decrypt():
        raise PromotionError("%s is encrypted with ansible-vault: run with --vault-password-file FILE "
                             "(or --ask-vault-pass)" % path)
    try:
        return vault.decrypt(raw).decode("utf-8")
    except Exception as exc:  # AnsibleError on a wrong password, UnicodeDecodeError
        raise PromotionError("%s cannot be decrypted or decoded (%s): check the vault password"
                             % (path, type(exc).__name__)) from None


def _rewrite(text: str, token: str, var: str, current, path: str) -> str:
    """The file's text with ``var`` set to ``token`` and ``<var>_previous`` to ``current``."""
    before = _parse(text, path)
    lines = text.splitlines()
    if current:
        lines = _set_scalar(lines, var + "_previous", current, path)
    lines = _set_scalar(lines, var, token, path)
    new_text = "\n".join(lines) + "\n"
    expected = dict(before, **{var: token}, **({var + "_previous": current} if current else {}))
    if _parse(new_text, path) != expected:
        raise PromotionError("%s: rewriting %s would change other variables; edit it by hand" % (path, var))
    return new_text


def promote_vars_file(path: str, token: str, var: str, vault=None, check_mode: bool = False) -> dict:
    """Make ``token`` the value of ``var`` in the variable file ``path``, the old value ``<var>_previous``.

    ``vault`` decrypts and encrypts ansible-vault data (``can_decrypt()``, ``decrypt(bytes)``,
    ``encrypt(bytes, raw)``) or is None when the run has no vault secret."""
    path = os.path.abspath(path)
    raw, st = _read(path)
    result = {"path": path, "var": var, "target": "vars_file", "fingerprint": fingerprint(token),
              "previous_fingerprint": None, "changed": False, "created": raw is None, "encrypted": False,
              "warnings": []}
    encrypted = raw is not None and raw.startswith(VAULT_HEADER)
    if raw is None:
        text, current = "", None
    elif encrypted:
        text = _decrypt(raw, vault, path)
        result["encrypted"] = True
    else:
        _refuse_readable_plain_text(path, st)
        text = raw.decode("utf-8", "strict") if raw else ""
    current = _parse(text, path).get(var)
    if current is not None and not isinstance(current, str):
        raise PromotionError("%s: %s is not a string" % (path, var))
    result["previous_fingerprint"] = fingerprint(current) if current else None
    if current == token:
        return result
    new_text = _rewrite(text, token, var, current, path)
    if not encrypted:
        result["warnings"].append("%s holds the token in plain text (mode 0600): %s" % (path, encrypt_hint(path)))
    result["changed"] = True
    if check_mode:
        return result
    data = vault.encrypt(new_text.encode("utf-8"), raw) if encrypted else new_text.encode("utf-8")
    mode, uid, gid = (NEW_FILE_MODE, None, None) if st is None else (st.st_mode & 0o7777, st.st_uid, st.st_gid)
    atomic_write(path, data, mode=mode, uid=uid, gid=gid)
    return result


def promote_token_file(path: str, token: str, check_mode: bool = False) -> dict:
    """Write ``token`` into the controller token file ``path`` (born 0600, atomic), the previous
    content kept next to it as a 0600 backup."""
    try:
        path = token_file.check_path(os.path.abspath(path))
        token = token_file.validated_token(token)
        current, current_token = token_file.read_state(path)
    except (TokenError, UnsafePathError) as exc:
        raise PromotionError("token not promoted: %s; nothing was written" % exc) from None
    result = {"path": path, "target": "token_file", "fingerprint": fingerprint(token),
              "previous_fingerprint": current.fingerprint, "changed": current_token != token,
              "created": not current.exists, "encrypted": False, "warnings": []}
    if not result["changed"] or check_mode:
        return result
    try:  # owned by the user running the controller (owner None), as the file it replaces
        if current.exists:
            result["backup_file"] = token_file.backup(path, None, None)
        token_file.write_token(path, token, None, None, NEW_FILE_MODE)
    except (TokenError, UnsafePathError, OSError) as exc:
        raise PromotionError("token not promoted at %s: %s; the previous token file is unchanged" % (path, exc)) from None
    return result
