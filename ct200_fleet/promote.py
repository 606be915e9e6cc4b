# SPDX-License-Identifier: Apache-2.0
"""Promotion: the rotated token becomes the inventory's current token (the source of truth).

Like a secrets manager's finishSecret: the pending token becomes current and the
current one is kept as previous for rollback. The operator names the variable file
that holds the current token (``inventories/ct200/group_vars/ct200/vault.yml``,
plain or ansible-vault encrypted); it is rewritten atomically with its mode and
owner kept, and only the two variables change: every other line stays as written.
"""

from __future__ import annotations

import json
import os
import re

import yaml

from ansible_collections.ct200.deploy.plugins.module_utils._io import (
    UnsafePathError, atomic_write, open_nofollow)
from ansible_collections.ct200.deploy.plugins.module_utils.hf_auth import fingerprint

from ct200_fleet.errors import CliError

DEFAULT_VAR = "vault_hf_token"
VAULT_HEADER = b"$ANSIBLE_VAULT;"
MAX_FILE_BYTES = 1 << 20


def _read(path: str) -> tuple[bytes, os.stat_result]:
    try:
        fd = open_nofollow(path, os.O_RDONLY)
    except FileNotFoundError:
        raise CliError("--vault-file %s does not exist: name the variable file that holds the current "
                       "token (e.g. inventories/ct200/group_vars/ct200/vault.yml)" % path) from None
    except (UnsafePathError, OSError) as exc:
        raise CliError("--vault-file %s: %s" % (path, exc)) from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise CliError("--vault-file %s is larger than 1 MiB: it is not a variable file" % path)
    return data, st


def _vault(password_file: str | None, path: str):
    from ansible.parsing.vault import VaultLib, VaultSecret  # only for encrypted files
    if not password_file:
        raise CliError("%s is encrypted with ansible-vault: give --vault-password-file FILE" % path)
    try:
        with open(password_file, "rb") as handle:
            secret = handle.read().strip()
    except OSError as exc:
        raise CliError("--vault-password-file %s cannot be read (%s)" % (password_file, exc.strerror)) from None
    return VaultLib([("default", VaultSecret(secret))])


def _set_scalar(lines: list[str], key: str, value: str, path: str) -> list[str]:
    """Replace (or append) the top-level ``key: value`` line; refuse a multi-line value."""
    pattern = re.compile(r"^%s\s*:" % re.escape(key))
    hits = [i for i, line in enumerate(lines) if pattern.match(line)]
    new_line = "%s: %s" % (key, json.dumps(value))
    if not hits:
        return lines + [new_line]
    if len(hits) > 1:
        raise CliError("%s defines %s %d times: keep one definition and run again" % (path, key, len(hits)))
    i = hits[0]
    if i + 1 < len(lines) and lines[i + 1][:1] in (" ", "\t") and lines[i + 1].strip():
        raise CliError("%s: %s is not a one-line value; write it as %s: \"hf_...\" and run again" % (path, key, key))
    return lines[:i] + [new_line] + lines[i + 1:]


def _parse(text: str, path: str) -> dict:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CliError("%s is not valid YAML (%s): fix it and run again" % (path, str(exc).splitlines()[0])) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise CliError("%s is not a mapping of variables" % path)
    return data


def promote(path: str, token: str, var: str = DEFAULT_VAR, vault_password_file: str | None = None) -> dict:
    """Make ``token`` the value of ``var`` in ``path``, the old value ``<var>_previous``; atomic."""
    path = os.path.abspath(path)
    raw, st = _read(path)
    vault = _vault(vault_password_file, path) if raw.startswith(VAULT_HEADER) else None
    try:
        text = (vault.decrypt(raw) if vault else raw).decode("utf-8")
    except Exception as exc:  # AnsibleError on a wrong password, UnicodeDecodeError
        raise CliError("%s cannot be decrypted or decoded (%s): check --vault-password-file"
                       % (path, type(exc).__name__)) from None
    before = _parse(text, path)
    current = before.get(var)
    if current is not None and not isinstance(current, str):
        raise CliError("%s: %s is not a string" % (path, var))
    result = {"path": path, "var": var, "fingerprint": fingerprint(token),
              "previous_fingerprint": fingerprint(current) if current else None, "changed": False}
    if current == token:
        return result
    lines = text.splitlines()
    if current:
        lines = _set_scalar(lines, var + "_previous", current, path)
    lines = _set_scalar(lines, var, token, path)
    new_text = "\n".join(lines) + "\n"
    after = _parse(new_text, path)
    expected = dict(before, **{var: token}, **({var + "_previous": current} if current else {}))
    if after != expected:
        raise CliError("%s: rewriting %s would change other variables; edit it by hand" % (path, var))
    data = vault.encrypt(new_text.encode("utf-8")) if vault else new_text.encode("utf-8")
    atomic_write(path, data, mode=st.st_mode & 0o7777, uid=st.st_uid, gid=st.st_gid)
    result["changed"] = True
    return result
