# SPDX-License-Identifier: Apache-2.0
"""The module's docs, the module's argument_spec and the role's argument_specs agree.

ARGUMENT_SPEC (plugins/module_utils/sglang_spec.py) is the single source of
truth. DOCUMENTATION must describe exactly those options (names, types,
defaults, choices, elements, suboptions); the role's meta/argument_specs.yml
mirrors them under sglang_service_instances. Regenerate the role file with
CT200_UPDATE_GOLDEN=1 after changing the spec.
"""
import os
import subprocess
import sys

import yaml

from ansible_collections.ct200.deploy.plugins.module_utils.sglang_spec import ARGUMENT_SPEC
from ansible_collections.ct200.deploy.plugins.modules import sglang_service

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE_SPEC = os.path.join(REPO, "roles", "sglang_service", "meta", "argument_specs.yml")
KEYS = ("type", "choices", "default", "elements", "required", "no_log")

ROLE_VARS = {
    "sglang_service_instances": {
        "type": "list", "elements": "dict", "default": [],
        "description": ["Instances on this host; each item takes the options of the"
                        " ct200.deploy.sglang_service module (see ansible-doc ct200.deploy.sglang_service).",
                        "Keys missing in an item come from sglang_service_defaults, then from the role-level"
                        " variables below."]},
    "sglang_service_defaults": {"type": "dict", "default": {},
                                "description": "Module options shared by every instance (the item wins)."},
    "sglang_service_state": {"type": "str", "default": "started",
                             "choices": ["present", "started", "stopped", "absent"],
                             "description": "State of every instance that does not set its own."},
    "sglang_service_user": {"type": "str", "default": "sglang", "description": "Dedicated service user."},
    "sglang_service_group": {"type": "str", "default": "sglang", "description": "Group of the service user."},
    "sglang_service_create_user": {"type": "bool", "default": True,
                                   "description": "Create the service user and group (system, no login)."},
    "sglang_service_python": {"type": "str", "default": "/opt/sglang/venv/bin/python",
                              "description": "Interpreter of the SGLang venv on the host."},
    "sglang_service_launcher": {"type": "list", "elements": "str", "default": [],
                                "description": ["TEST ONLY. Replaces C(-m sglang.launch_server), e.g. with the"
                                                " SGLang test stand-in in the Molecule scenario. Keep [] in"
                                                " production."]},
    "sglang_service_unit_dir": {"type": "str", "default": "/etc/systemd/system", "description": "Unit directory."},
    "sglang_service_env_dir": {"type": "str", "default": "/etc/sglang",
                               "description": "Directory of the per-instance environment files."},
    "sglang_service_cache_dir": {"type": "str", "default": "/var/cache/ct200-sglang",
                                 "description": "Cache of probed SGLang flag manifests."},
    "sglang_service_target": {"type": "bool", "default": True,
                              "description": "Install sglang.target, which wants every instance of the host."},
    "sglang_service_api_key": {"type": "str", "default": "", "no_log": True,
                               "description": ["API key of every instance that listens beyond loopback (from a"
                                               " vault); written to the instance's secret file (0640, no_log),"
                                               " never to argv, the unit or the environment file."]},
    "sglang_service_gpu_count": {"type": "int", "default": None,
                                 "description": ["GPUs on the host from the preflight (ct200.deploy.sglang_runtime);"
                                                 " null lets the module ask nvidia-smi."]},
    "sglang_service_gpu_numa_nodes": {"type": "list", "elements": "int", "default": [],
                                      "description": "NUMA node of each GPU by index, from the preflight (-1 unknown)."},
    "sglang_service_state_dir": {"type": "str", "default": "/var/lib/ct200-sglang",
                                 "description": ["Where a restart owed after a failed run is remembered (one flag"
                                                 " file per instance)."]},
    "sglang_service_health_timeout": {"type": "int", "default": None,
                                      "description": ["Seconds the run waits for each instance's health endpoint"
                                                      " after a start; null uses the instance's"
                                                      " O(sglang_service_instances[].start_timeout). Changes no file"
                                                      " on the host (the unit keeps its own C(TimeoutStartSec=)).",
                                                      "An instance whose process exits during the wait fails the run"
                                                      " at once (ct200.deploy.sglang_health_wait reads the unit between"
                                                      " probes), whatever this budget."]},
    "sglang_service_health_delay": {"type": "int", "default": 2,
                                    "description": ["Seconds between two probes of an instance's health endpoint while"
                                                    " the run waits after a start (the wait's budget stays"
                                                    " O(sglang_service_health_timeout))."]},
    "sglang_service_warmup_requests": {"type": "int", "default": 3,
                                       "description": ["Chat completions sent to a DFLASH/DDTree instance after the"
                                                       " smoke completion; then /server_info's"
                                                       " C(internal_states[0].avg_spec_accept_length) must exceed the"
                                                       " instance's O(sglang_service_instances[].min_accept_length)."]},
    "sglang_service_traffic": {"type": "str", "default": "none", "choices": ["router", "external", "none"],
                               "description": ["Who routes client traffic (docs/traffic.md). Every stop or restart of an"
                                               " instance first takes it out of rotation and puts it back only after"
                                               " its readiness gate passed (tasks/instance_traffic.yml,"
                                               " ct200.deploy.traffic_rotation). deploy_kimi.yml passes"
                                               " C(ct200_traffic), C(router) by default."]},
    "sglang_service_traffic_router_url": {"type": "str", "default": None,
                                          "description": "The router's base URL as seen from O(sglang_service_traffic_delegate)."},
    "sglang_service_traffic_delegate": {"type": "str", "default": None,
                                        "description": ["Inventory host the drain step runs on (the router's host; the"
                                                        " controller for external commands); null runs it on the"
                                                        " instance's host."]},
    "sglang_service_traffic_address": {"type": "str", "default": None,
                                       "description": ["Address the router reaches this host's instances at; null uses"
                                                       " C(ansible_host), else the inventory name."]},
    "sglang_service_traffic_shared_loopback": {"type": "bool", "default": False,
                                               "description": ["The router reaches this host's loopback (hosts that"
                                                               " share one network namespace, as the nsenter sandbox)."]},
    "sglang_service_traffic_external_out": {"type": "list", "elements": "str", "default": [],
                                            "description": ["With C(external): the argv that takes a host out of the"
                                                            " site's load balancer; elements may name {host}, {url},"
                                                            " {name}. No shell."]},
    "sglang_service_traffic_external_in": {"type": "list", "elements": "str", "default": [],
                                           "description": "With C(external): the argv that puts the host back (same placeholders)."},
    "sglang_service_install_phase": {"type": "bool", "default": True,
                                     "description": ["False skips the install phase (service group and user,"
                                                     " directories, the strict systemd-analyze wrapper): the caller"
                                                     " ran it already (playbooks/rollout.yml's stage play, on every"
                                                     " host at once, so that each switch batch only renders,"
                                                     " restarts and proves)."]},
    "sglang_service_traffic_rejoin": {"type": "bool", "default": True,
                                      "description": ["False leaves a started instance out of rotation after the run"
                                                      " path; the caller puts it back after gates of its own"
                                                      " (playbooks/rollout.yml does, after the release's gates)."]},
    "sglang_service_traffic_timeout": {"type": "int", "default": 120,
                                       "description": "Seconds a drain step waits for the router (or the command)."},
    "sglang_service_check_gpu_release": {"type": "bool", "default": True,
                                         "description": ["After every stop, and before the start of an owed restart,"
                                                         " fail when a process of the unit still holds GPU memory"
                                                         " (ct200.deploy.sglang_gpu_release, nvidia-smi"
                                                         " --query-compute-apps); skipped where nvidia-smi is"
                                                         " missing."]},
}


class _IndentDumper(yaml.SafeDumper):
    """Indent block sequences under their key (yamllint's default indentation)."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


def _doc():
    return yaml.safe_load(sglang_service.DOCUMENTATION)


def _mirror(spec, docs):
    out = {}
    for name, opt in spec.items():
        entry = {"description": docs[name]["description"]}
        for key in KEYS:
            if key in opt:
                entry[key] = opt[key]
        if "options" in opt:
            entry["options"] = _mirror(opt["options"], docs[name]["suboptions"])
        out[name] = entry
    return out


def build_role_argument_specs():
    instance_opts = _mirror(ARGUMENT_SPEC, _doc()["options"])
    role_vars = {k: dict(v) for k, v in ROLE_VARS.items()}
    role_vars["sglang_service_instances"]["options"] = instance_opts
    return {"argument_specs": {"main": {
        "short_description": "SGLang DFlash/DDTree instances as systemd units, validated before they are written",
        "description": [
            "Creates the service user, then for every instance plans it with ct200.deploy.sglang_service (read-only:"
            " validate, render, systemd-analyze verify) and installs the unit and environment file with"
            " ansible.builtin.copy validate=, then starts it with ansible.builtin.systemd_service, waits for health"
            " with ansible.builtin.uri, asserts /server_info and runs one chat completion; on failure prints the"
            " journal tail and leaves the unit stopped and disabled, keeping the owed restart for the next run.",
            "Tags: sglang_service_preflight, sglang_service_install, sglang_service_configure, sglang_service_run"
            " (and sglang_service). Options of sglang_service_instances items mirror the module"
            " (generated from its argument_spec by tests/sglang/test_docs.py).",
        ],
        "options": role_vars,
    }}}


def _compare(spec, docs, path=""):
    problems = []
    if set(spec) != set(docs):
        problems.append("%s: spec %s vs docs %s" % (path or "options", sorted(set(spec) - set(docs)),
                                                    sorted(set(docs) - set(spec))))
    for name in set(spec) & set(docs):
        opt, doc = spec[name], docs[name]
        for key in KEYS:
            want = opt.get(key, False if key == "required" else None)
            got = doc.get(key, False if key == "required" else None)
            if key == "type" and want is None:
                want = "str"
            if want != got:
                problems.append("%s%s.%s: spec %r, docs %r" % (path, name, key, want, got))
        if "options" in opt or "suboptions" in doc:
            problems += _compare(opt.get("options", {}), doc.get("suboptions", {}), path + name + ".")
    return problems


def test_documentation_matches_argument_spec():
    assert _compare(ARGUMENT_SPEC, _doc()["options"]) == []


def test_examples_and_return_are_yaml():
    examples = yaml.safe_load(sglang_service.EXAMPLES)
    assert sum("ct200.deploy.sglang_service" in task for task in examples) == 3
    returned = yaml.safe_load(sglang_service.RETURN)
    assert {"unit_name", "unit_path", "unit_content", "env_path", "env_content", "argv", "command_line", "health_url",
            "chat_url", "served_model_name", "host", "port", "dialect", "fit", "changed", "secret_path",
            "problems"} <= set(returned)
    assert not {"unit", "journal", "action", "server_info", "restart_required"} & set(returned)


def test_role_argument_specs_mirror_the_module():
    expected = build_role_argument_specs()
    if os.environ.get("CT200_UPDATE_GOLDEN"):
        with open(ROLE_SPEC, "w", encoding="utf-8") as handle:
            handle.write("---\n# Generated by tests/sglang/test_docs.py from the module's argument_spec; "
                         "do not edit by hand.\n")
            yaml.dump(expected, handle, Dumper=_IndentDumper, sort_keys=False, width=110)
    with open(ROLE_SPEC, encoding="utf-8") as handle:
        actual = yaml.safe_load(handle)
    assert actual == expected, "run CT200_UPDATE_GOLDEN=1 pytest tests/sglang/test_docs.py"


def test_role_defaults_match_role_argument_specs():
    with open(os.path.join(REPO, "roles", "sglang_service", "defaults", "main.yml"), encoding="utf-8") as handle:
        defaults = yaml.safe_load(handle)
    assert set(defaults) == set(ROLE_VARS)
    for name, value in defaults.items():
        assert value == ROLE_VARS[name]["default"], name


def test_ansible_doc_renders_the_module():
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    doc = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    proc = subprocess.run([doc, "ct200.deploy.sglang_service"], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    for needle in ("ddtree_budget", "allow_hybrid_tree", "EXAMPLES", "RETURN VALUES", "expected_server_info",
                   "TEST ONLY", "systemd-analyze verify", "min_concurrent_requests", "gpu_numa_nodes", "chat_url"):
        assert needle in proc.stdout, needle
    assert "WARNING" not in proc.stderr.upper(), proc.stderr


def test_ansible_doc_renders_the_role():
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    doc = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    proc = subprocess.run([doc, "-t", "role", "ct200.deploy.sglang_service"], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "sglang_service_instances" in proc.stdout and "sglang_service_launcher" in proc.stdout
