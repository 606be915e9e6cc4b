# SPDX-License-Identifier: Apache-2.0
"""roles/sglang_service/tasks/instance_configure.yml hands the instance to ct200.deploy.sglang_service
option by option: every option of the module's ARGUMENT_SPEC is in that mapping, each reads the
instance's key of the same name, and nothing else is passed, so a new module option cannot be
dropped (or a value crossed between two options) in silence."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ansible_collections.ct200.deploy.plugins.module_utils.sglang_spec import ARGUMENT_SPEC

TASKS = Path(__file__).resolve().parents[2] / "roles" / "sglang_service" / "tasks" / "instance_configure.yml"
# computed by the role itself, not read from the instance
ROLE_COMPUTED = {"name": "sglang_service_options.name", "other_instances": "sglang_service_others"}
PASS_THROUGH = re.compile(r"^\{\{ sglang_service_options\.(\w+) \| default\(omit\) \}\}$")


def module_args():
    task = next(t for t in yaml.safe_load(TASKS.read_text()) if "ct200.deploy.sglang_service" in t)
    return task["ct200.deploy.sglang_service"]


def mapping_problems(args):
    """What is wrong with the task's option -> value mapping, one line each."""
    problems = ["not passed: %s" % name for name in sorted(set(ARGUMENT_SPEC) - set(args))]
    problems += ["unknown to the module: %s" % name for name in sorted(set(args) - set(ARGUMENT_SPEC))]
    for option, value in sorted(args.items()):
        if option in ROLE_COMPUTED:
            ok = ROLE_COMPUTED[option] in value
        elif option == "state":  # the instance's state: 'absent', else 'present'
            ok = "sglang_service_options.state" in value
        else:
            match = PASS_THROUGH.match(str(value).strip())
            ok = bool(match) and match.group(1) == option
        if not ok:
            problems.append("%s reads %s" % (option, value))
    return problems


def test_every_module_option_is_passed_from_the_instance_key_of_its_name():
    assert mapping_problems(module_args()) == []


def test_a_dropped_new_or_crossed_option_is_caught():
    args = module_args()
    args.pop("tp")
    args["pp"] = "{{ sglang_service_options.tp | default(omit) }}"
    args["tp_size"] = "{{ sglang_service_options.tp_size | default(omit) }}"
    assert mapping_problems(args) == ["not passed: tp", "unknown to the module: tp_size",
                                      "pp reads {{ sglang_service_options.tp | default(omit) }}"]
