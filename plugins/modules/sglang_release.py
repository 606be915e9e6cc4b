#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_release
short_description: Record, read and restore the SGLang releases of a host (current and previous)
version_added: "0.3.0"
description:
  - A release is one recorded thing - target commit, drafter commit, SGLang version and C(config_hash), the sha256 of
    the unit and environment files C(ct200.deploy.sglang_service) rendered (the argv is the unit's C(ExecStart=), the
    environment its EnvironmentFile; neither holds a secret). Its id is C(r) + 12 hex of
    C(sha256(json.dumps([target commit, drafter commit or "", sglang_version, config_hash]))).
  - Records live in O(release_dir) - C(<id>.json) per release and C(state.json) with C(current), C(previous) and
    C(keep) - mode 0644, written atomically. Anyone may read them (C(ct200 status), C(ct200.deploy.release_gc)).
  - O(state=read) reads; given O(units) (or O(unit_paths)) it also computes the release those files make
    (RV(release)) and whether it is the current one (RV(is_current)).
  - O(state=recorded) after a passing switch - current becomes previous, the new release current, with what the
    gates measured (O(measured)). Recording the current release again only fills in measurements (idempotent).
    O(only_if_unrecorded=true) adopts the serving release on a host that has none recorded yet.
  - O(state=restored) writes the unit and env files of a recorded release back (O(to=current) after a failed gate,
    O(to=previous) for a rollback, which also swaps current and previous) and the restart flag O(restart_flag), so
    the role's run path restarts it. Refused, naming the path, when the release's weights or venv are gone.
author: ct200-deploy developers (@ct200-deploy)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Computes what would change and writes nothing.
  diff_mode:
    support: full
    details: state.json before and after, and the restored files.
  platform:
    platforms: posix
options:
  state:
    description: What to do.
    type: str
    choices: [read, recorded, restored]
    default: read
  release_dir:
    description: Directory of the records.
    type: path
    default: /var/lib/ct200/releases
  keep:
    description: Releases to keep (current and previous count), written to C(state.json) for the garbage collector.
    type: int
    default: 2
  units:
    description: The rendered files, absolute path to content (what C(sglang_service) returns as C(unit_path)/C(unit_content) and
      C(env_path)/C(env_content)). The unit's C(ExecStart=) names the target, drafter and venv.
    type: dict
  unit_paths:
    description: Read these installed files instead of O(units) (adopting the serving release).
    type: list
    elements: path
  sglang_version:
    description: The SGLang version the files were rendered for (C(dialect.version) of what C(sglang_service) returns).
    type: str
  target_repo:
    description: Hub repository of the target, for the record.
    type: str
  drafter_repo:
    description: Hub repository of the drafter, for the record.
    type: str
  target_commit:
    description: Commit of the target weights; read from the directory (C(snapshots/<commit>) or its manifest) when
      not given.
    type: str
  drafter_commit:
    description: Commit of the drafter weights; read from the directory when not given.
    type: str
  measured:
    description: What the gates measured on this release, C(decode_tok_s) and C(accept_length) (null when not measured).
    type: dict
  only_if_unrecorded:
    description: With O(state=recorded), record only when the host has no current release (adoption).
    type: bool
    default: false
  to:
    description: With O(state=restored), the release to write back.
    type: str
    choices: [current, previous]
    default: current
  restart_flag:
    description: With O(state=restored), the file whose presence makes the role's run path restart the unit
      (C(<sglang_service_state_dir>/<name>.restart-owed)); written when a file was restored.
    type: path
  unit_name:
    description: The unit the restart flag names, e.g. C(sglang@kimi.service).
    type: str
"""

EXAMPLES = r"""
- name: Record the release that passed its gates
  ct200.deploy.sglang_release:
    state: recorded
    units: "{{ {sglang_service_plan.unit_path: sglang_service_plan.unit_content,
               sglang_service_plan.env_path: sglang_service_plan.env_content} }}"
    sglang_version: "{{ sglang_service_plan.dialect.version }}"
    target_repo: moonshotai/Kimi-K2.6
    drafter_repo: z-lab/Kimi-K2.6-DFlash
    measured: {decode_tok_s: 41.2, accept_length: 3.5}

- name: Back to the previous release (then run the role's run path)
  ct200.deploy.sglang_release:
    state: restored
    to: previous
    restart_flag: /var/lib/ct200-sglang/kimi.restart-owed
    unit_name: sglang@kimi.service
"""

RETURN = r"""
state:
  description: C(state.json) after the task (C(current), C(previous), C(keep)).
  returned: always
  type: dict
  sample: {"current": "r1f2e3d4c5b6a", "previous": "r0a1b2c3d4e5f", "keep": 2}
before:
  description: C(state.json) before the task.
  returned: always
  type: dict
current:
  description: The record of the current release (null when none), without its file contents.
  returned: always
  type: dict
previous:
  description: The record of the previous release (null when none), without its file contents.
  returned: always
  type: dict
release:
  description: The release O(units) / O(unit_paths) make (id, target, drafter, sglang_version, venv, config_hash,
    measured), without its file contents.
  returned: when O(units) or O(unit_paths) is given
  type: dict
is_current:
  description: Whether RV(release) is the host's current release.
  returned: when O(units) or O(unit_paths) is given
  type: bool
adopted:
  description: With O(only_if_unrecorded), whether the serving release was recorded now.
  returned: with O(state=recorded)
  type: bool
files:
  description: With O(state=restored), the unit and env files written back.
  returned: with O(state=restored)
  type: list
  elements: str
restart_owed:
  description: With O(state=restored), whether the restart flag was written (the role's run path restarts the unit).
  returned: with O(state=restored)
  type: bool
"""

import json

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ct200.deploy.plugins.module_utils import sglang_release as rel

READ_LIMIT = rel.READ_LIMIT


def _brief(record):
    if not record:
        return None
    return {k: v for k, v in record.items() if k != "units"}


def _units(module):
    units = module.params["units"]
    if units is None and module.params["unit_paths"]:
        units = {}
        for path in module.params["unit_paths"]:
            raw = rel._read_bounded(path, READ_LIMIT)  # pylint: disable=protected-access
            if raw is None:
                module.fail_json(msg="%s cannot be read: the instance's unit or env file is not installed; deploy it "
                                     "first (deploy_kimi.yml)" % path)
            units[path] = raw.decode("utf-8", "replace")
    return {str(k): str(v) for k, v in units.items()} if units is not None else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["read", "recorded", "restored"], default="read"),
            release_dir=dict(type="path", default=rel.RELEASE_DIR),
            keep=dict(type="int", default=rel.DEFAULT_KEEP),
            units=dict(type="dict"),
            unit_paths=dict(type="list", elements="path"),
            sglang_version=dict(type="str"),
            target_repo=dict(type="str"),
            drafter_repo=dict(type="str"),
            target_commit=dict(type="str"),
            drafter_commit=dict(type="str"),
            measured=dict(type="dict"),
            only_if_unrecorded=dict(type="bool", default=False),
            to=dict(type="str", choices=["current", "previous"], default="current"),
            restart_flag=dict(type="path"),
            unit_name=dict(type="str"),
        ),
        mutually_exclusive=[("units", "unit_paths")],
        required_if=[("state", "recorded", ["units", "unit_paths"], True)],
        supports_check_mode=True,
    )
    p = module.params
    if p["keep"] < 1:
        module.fail_json(msg="keep is %d: at least 1 release (the current one) is always kept; set keep to 2 to keep "
                             "the previous release for a rollback" % p["keep"])
    result = {"changed": False}
    try:
        store = rel.Store(p["release_dir"], check_mode=module.check_mode)
        units = _units(module)
        release = None
        if units is not None:
            release = rel.build(units, p["sglang_version"], p["target_repo"], p["drafter_repo"], p["target_commit"],
                                p["drafter_commit"], p["measured"])
        if p["state"] == "read":
            outcome = {"changed": False, "state": store.state()}
            outcome["before"] = outcome["state"]
        elif p["state"] == "recorded":
            outcome = rel.record(store, release, p["keep"], p["only_if_unrecorded"])
        else:
            outcome = rel.restore(store, p["to"], p["restart_flag"], p["unit_name"])
            result.update(files=outcome["files"], restart_owed=outcome["restart_owed"])
        state = outcome["state"]
        known = outcome.get("record")
        current = known if known and known.get("id") == state["current"] else store.record(state["current"])
        result.update(changed=outcome["changed"], state=state, before=outcome["before"], current=_brief(current),
                      previous=_brief(store.record(state["previous"])))
        if "adopted" in outcome:
            result["adopted"] = outcome["adopted"]
        if release is not None:
            result["release"] = _brief(release)
            result["is_current"] = state["current"] == release["id"]
        if module._diff and outcome["changed"]:  # pylint: disable=protected-access
            result["diff"] = {"before": json.dumps(outcome["before"], indent=2, sort_keys=True) + "\n",
                              "after": json.dumps(state, indent=2, sort_keys=True) + "\n",
                              "before_header": "%s/%s" % (store.dir, rel.STATE_FILE),
                              "after_header": "%s/%s (%s)" % (store.dir, rel.STATE_FILE,
                                                              ", ".join(store.written) or "no file")}
    except (rel.ReleaseError, OSError, ValueError) as exc:
        module.fail_json(msg=str(exc), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
