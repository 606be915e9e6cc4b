#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: disk_space
short_description: Check that several pending writes fit together on their filesystems
version_added: "0.1.0"
description:
  - Groups O(requirements) by the filesystem that holds (or will hold) each path, sums the bytes per
    filesystem and compares the sum plus O(min_free_bytes) with the free space (C(statvfs) C(f_bavail)).
  - "Fails with one message per short filesystem naming the numbers, the mount point and the filesystem type,
    for example \"need 600.1 GB more on /models (xfs, 593.0 GB free, headroom 10 GB): target 595.3 GB + drafter 4.8 GB\"."
  - The C(ct200.deploy.model_weights) role feeds it the C(disk.needed_bytes) of a check-mode
    M(ct200.deploy.hf_download) per repository, so the target and the drafter are checked together.
  - Changes nothing. Standard library only.
author: ct200-deploy developers (@ct200-deploy)
options:
  requirements:
    description: What will be written where.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Directory the bytes go to; it may not exist yet (its nearest existing parent is used).
        type: path
        required: true
      bytes:
        description: Bytes still to be written there. Must be known; a missing or null size is an error.
        type: raw
        required: true
      label:
        description: Name used in the message (for example the repository id). Defaults to O(requirements[].path).
        type: str
      reused_bytes:
        description:
          - Bytes hard-linked from kept snapshots (unchanged files of a new commit). They take no new space, are not
            counted, and are named in the message so an operator sees why a staging needs only its new bytes.
        type: int
        default: 0
  min_free_bytes:
    description: Headroom that must stay free on each filesystem. Bytes, or a string such as C(10GB) or C(10GiB).
    type: raw
    default: 10GB
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Target and drafter must fit together
  ct200.deploy.disk_space:
    requirements:
      - {label: moonshotai/Kimi-K2.6, path: /models/moonshotai/Kimi-K2.6, bytes: 595300000000}
      - {label: z-lab/Kimi-K2.6-DFlash, path: /models/z-lab/Kimi-K2.6-DFlash, bytes: 4800000000}
    min_free_bytes: 10GB
"""

RETURN = r"""
filesystems:
  description: One entry per filesystem involved.
  returned: always
  type: list
  elements: dict
  contains:
    mountpoint:
      description: Mount point of the filesystem.
      type: str
    fstype:
      description: Filesystem type from C(/proc/self/mountinfo).
      type: str
    free_bytes:
      description: Bytes available to unprivileged users.
      type: int
    needed_bytes:
      description: Sum of the requirements on this filesystem.
      type: int
    headroom_bytes:
      description: O(min_free_bytes).
      type: int
    ok:
      description: Whether needed + headroom fits.
      type: bool
    shortfall_bytes:
      description: How much is missing (0 when ok).
      type: int
    message:
      description: The human-readable verdict.
      type: str
needed_bytes:
  description: Sum of all requirements.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.ct200.deploy.plugins.module_utils import disk_preflight  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            requirements=dict(
                type="list",
                elements="dict",
                required=True,
                options=dict(
                    path=dict(type="path", required=True),
                    bytes=dict(type="raw", required=True),
                    label=dict(type="str"),
                    reused_bytes=dict(type="int", default=0),
                ),
            ),
            min_free_bytes=dict(type="raw", default="10GB"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        headroom = disk_preflight.parse_size(p["min_free_bytes"])
    except ValueError as exc:
        module.fail_json(msg="min_free_bytes: %s" % exc)
    reqs = []
    for item in p["requirements"]:
        label = item["label"] or item["path"]
        raw = item["bytes"]
        if raw is None or raw == "":
            needed = None
        else:
            try:
                needed = disk_preflight.parse_size(raw)
            except ValueError as exc:
                module.fail_json(msg="bytes of %s: %s" % (label, exc))
        reqs.append((label, item["path"], needed, max(0, item["reused_bytes"] or 0)))
    try:
        checks = disk_preflight.check_requirements(reqs, headroom)
    except disk_preflight.DiskSpaceError as exc:
        module.fail_json(
            msg=str(exc),
            filesystems=[c.as_dict() for c in exc.checks],
            needed_bytes=sum(r[2] for r in reqs if isinstance(r[2], int)),
        )
    module.exit_json(
        changed=False,
        filesystems=[c.as_dict() for c in checks],
        needed_bytes=sum(r[2] for r in reqs),
        msg="; ".join(
            "%s fits on %s (%s free, headroom %s)%s"
            % (
                disk_preflight.format_bytes(c.needed_bytes),
                c.fs.mountpoint,
                disk_preflight.format_bytes(c.fs.free_bytes),
                disk_preflight.format_headroom(c.headroom_bytes),
                ("; %s hard-linked from kept snapshots" % disk_preflight.format_bytes(c.reused_bytes)) if c.reused_bytes else "",
            )
            for c in checks
        ),
    )


if __name__ == "__main__":
    main()
