#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: release_gc
short_description: Delete the weights snapshots and SGLang venvs no kept release, unit or process uses
version_added: "0.3.0"
description:
  - Reads the release records of the host (C(<release_dir>/state.json) and C(<id>.json), written by
    M(ct200.deploy.sglang_release)) and keeps the directories of the current and the previous release, then of the most
    recent other records up to O(keep) releases in all.
  - Also keeps every directory named by an installed unit C(/etc/systemd/system/sglang@*.service) or the
    C(EnvironmentFile=) it names, or by the command line of a running process (C(/proc/<pid>/cmdline)), every
    O(keep_dirs) entry, and a snapshot whose download lock is held.
  - Deletes every other snapshot C(<weights root>/snapshots/<commit40>) and every other venv C(<venv root>/<version>).
    Files hard-linked into a kept snapshot stay (their blocks are not counted as freed); the kept snapshots' manifests
    are updated for the ctime the removed links changed, so they stay verified without a re-hash.
  - With no C(state.json) nothing is deleted. No symlink is followed or removed; reads are bounded.
author: ct200-deploy developers (@ct200-deploy)
options:
  release_dir:
    description: Where the release records are.
    type: path
    default: /var/lib/ct200/releases
  weights_roots:
    description:
      - Repository roots whose C(snapshots/) are collected (the model_weights role's C(local_dir) of each repository).
        The roots of the kept releases' snapshot directories are added.
    type: list
    elements: path
    default: []
  venv_roots:
    description:
      - Directories of per-version SGLang venvs. Default C(/opt/sglang) and the parent of every recorded venv laid out
        as C(.../sglang/<version>).
    type: list
    elements: path
  keep:
    description: Releases to keep in all (at least 2, current and previous). Default the C(keep) of C(state.json).
    type: int
  keep_dirs:
    description: More directories to keep, for example a release staged but not switched to yet.
    type: list
    elements: path
    default: []
  unit_dir:
    description: Where the installed units are.
    type: path
    default: /etc/systemd/system
  proc_root:
    description: The proc filesystem whose processes' command lines protect what they use (tests pass a fake one).
    type: path
    default: /proc
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: After every host passed the rollout, delete what no kept release uses
  ct200.deploy.release_gc:
    weights_roots:
      - /models/moonshotai/Kimi-K2.6
      - /models/z-lab/Kimi-K2.6-DFlash
"""

RETURN = r"""
deleted:
  description: The directories deleted (check mode, that would be deleted), each C({path, kind}) (C(snapshot), C(venv)).
  returned: always
  type: list
  elements: dict
kept:
  description: The directories kept, each C({path, kind, why}).
  returned: always
  type: list
  elements: dict
kept_releases:
  description: The release ids kept (current, previous, then the most recent).
  returned: always
  type: list
  elements: str
bytes_freed:
  description: Bytes the deletion frees (check mode, would free); blocks still linked from a kept directory excluded.
  returned: always
  type: int
skipped:
  description: Entries where a snapshot or venv belongs that are not directories (a symlink), left alone.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.ct200.deploy.plugins.module_utils import release_gc  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils._io import UnsafePathError  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            release_dir=dict(type="path", default=release_gc.RELEASE_DIR),
            weights_roots=dict(type="list", elements="path", default=[]),
            venv_roots=dict(type="list", elements="path"),
            keep=dict(type="int"),
            keep_dirs=dict(type="list", elements="path", default=[]),
            unit_dir=dict(type="path", default=release_gc.UNIT_DIR),
            proc_root=dict(type="path", default="/proc"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = release_gc.plan(p["release_dir"], p["weights_roots"], p["venv_roots"], p["keep"], p["keep_dirs"],
                                 p["unit_dir"], p["proc_root"])
        warnings = list(result["warnings"])
        if result["delete"] and not module.check_mode:
            from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_lock import DirLock

            warnings += release_gc.apply(result, lambda path: DirLock(path, 0).acquire())
    except (release_gc.GcError, UnsafePathError, OSError) as exc:
        module.fail_json(msg="release garbage collection stopped: %s" % exc)
    out = dict(changed=bool(result["delete"]), deleted=result["delete"], kept=result["keep"],
               kept_releases=result["kept_releases"], bytes_freed=result["bytes_freed"], skipped=result["skipped"])
    for text in warnings:
        module.warn(text)
    if module._diff:
        out["diff"] = release_gc.diff(result)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
