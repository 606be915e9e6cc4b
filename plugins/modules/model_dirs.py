#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_dirs
short_description: Make the model directories a download fills, owned by the download user, in one call
version_added: "0.1.0"
description:
  - Makes each of O(paths) a directory owned by O(owner) (and O(group) when given) with O(mode), with its missing
    parents made the same way, as C(ansible.builtin.file) with C(state=directory) does.
  - One call for every directory of a host. The role C(ct200.deploy.model_weights) made a fan-out's six directories
    (each repository's root, C(snapshots/) and the commit's snapshot) with a C(file) loop, six module runs per
    host, about 7 s of a rollout's stage play on eight hosts.
  - A path that exists as a symlink or as a file is refused with a message naming it, and nothing after it is made.
    A directory is never reached through a symlink at its own name; owner and mode are set on a descriptor opened
    without following one. Existing parents are trusted, as an administrator may mount or link a disk there.
author: ct200-deploy developers (@ct200-deploy)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reports what would be made or fixed and changes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  paths:
    description: Absolute paths of the directories, made in this order.
    type: list
    elements: path
    required: true
  owner:
    description: The user that owns each directory (a name or a numeric id).
    type: str
    required: true
  group:
    description: The group that owns each directory; left as it is when not given.
    type: str
  mode:
    description: The directories' mode, in octal (C(0755)).
    type: str
    default: "0755"
"""

EXAMPLES = r"""
- name: The roots and the snapshot directory of the commit, owned by the download user
  ct200.deploy.model_dirs:
    paths:
      - /srv/models/kimi
      - /srv/models/kimi/snapshots
      - /srv/models/kimi/snapshots/0123456789abcdef0123456789abcdef01234567
    owner: ct200
  become: true
"""

RETURN = r"""
created:
  description: The paths that were made (in check mode, that would be).
  returned: always
  type: list
  elements: str
fixed:
  description: The paths that existed and had their owner or mode set (in check mode, would have).
  returned: always
  type: list
  elements: str
"""

import grp
import os
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ct200.deploy.plugins.module_utils._io import UnsafePathError, ensure_dir

ARGUMENT_SPEC = {
    "paths": {"type": "list", "elements": "path", "required": True},
    "owner": {"type": "str", "required": True},
    "group": {"type": "str"},
    "mode": {"type": "str", "default": "0755"},
}


def numeric_id(name, lookup, what):
    """The id of NAME (a name or digits) through LOOKUP (pwd.getpwnam, grp.getgrnam); None when unknown."""
    if name.isdigit():
        return int(name)
    try:
        return getattr(lookup(name), "pw_uid" if what == "user" else "gr_gid")
    except KeyError:
        return None


def parse_mode(text):
    """An octal mode string as an int, None when it is not one of 0-07777."""
    try:
        mode = int(text, 8)
    except (TypeError, ValueError):
        return None
    return mode if 0 <= mode <= 0o7777 else None


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    uid = numeric_id(params["owner"], pwd.getpwnam, "user")
    gid = -1 if params["group"] is None else numeric_id(params["group"], grp.getgrnam, "group")
    mode = parse_mode(params["mode"])
    if uid is None or gid is None:
        module.fail_json(msg="user %r or group %r does not exist on this host: create it first, or name an "
                             "existing one" % (params["owner"], params["group"]))
    if mode is None:
        module.fail_json(msg="mode %r is not an octal mode such as 0755" % params["mode"])
    relative = [path for path in params["paths"] if not os.path.isabs(path)]
    if relative:
        module.fail_json(msg="paths must be absolute: %s" % ", ".join(relative))
    done = {"created": [], "fixed": []}
    for path in params["paths"]:
        try:
            outcome = ensure_dir(path, uid, gid, mode, check=module.check_mode)
        except (UnsafePathError, OSError) as exc:
            module.fail_json(msg="cannot make directory %s: %s" % (path, exc), **done)
        if outcome != "ok":
            done[outcome].append(path)
    module.exit_json(changed=bool(done["created"] or done["fixed"]), **done)


if __name__ == "__main__":
    main()
