# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""One sglang_service instance's options and run facts (PRIVATE to the collection).

* ``options`` -- what the role's README promises: role-level values < ``sglang_service_defaults`` < the
  instance's own keys (top-level keys, as ``combine`` without ``recursive``).
* ``others`` -- what the module must know of the host's other instances to refuse a clash (ports, GPUs).
* ``run_facts`` -- what the run path (instance_run.yml) needs of one instance: its unit, the URL the host
  reaches it on, the health wait's budget, whether it is speculative.

Why Python and not Jinja: the role read these through ``combine`` in task ``vars:``, and Ansible renders a
task variable again at each reference. The plan task's 45 references (each a ``combine`` whose argument
checks render every value of the instance again) cost about 2 s of controller CPU per batch of two hosts in a
rollout, and the run facts 0.3 s more. A filter called once in a ``set_fact`` renders the instance once.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible.module_utils.parsing.convert_bool import boolean

SPECULATIVE = ("dflash", "ddtree")
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def options(item: Mapping[str, Any], defaults: Optional[Mapping[str, Any]] = None,
            base: Optional[Mapping[str, Any]] = None, optional: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """BASE < OPTIONAL < DEFAULTS < ITEM. OPTIONAL holds role-level values that count only when set: an entry
    whose value is None or empty (an unset launcher, GPU count or NUMA list) is left out."""
    merged = dict(base or {})
    merged.update((key, value) for key, value in (optional or {}).items() if value not in (None, "", [], {}))
    merged.update(defaults or {})
    merged.update(item or {})
    return merged


def others(instances: Sequence[Mapping[str, Any]], defaults: Optional[Mapping[str, Any]],
           name: str) -> List[Dict[str, Any]]:
    """The host's instances but NAME, each as its name, port (30000), NCCL port (None) and GPUs ([]), after
    DEFAULTS: the module's ``other_instances``."""
    out = []
    for item in instances:
        if item.get("name") == name:
            continue
        merged = options(item, defaults)
        out.append({"name": merged.get("name"), "port": merged.get("port", 30000),
                    "nccl_port": merged.get("nccl_port"), "gpus": merged.get("gpus", [])})
    return out


def client_address(listen: Any) -> str:
    """The address the host itself reaches an instance on that listens on LISTEN (a wildcard is reached on
    loopback; an IPv6 literal goes in brackets in a URL)."""
    listen = "127.0.0.1" if listen is None else str(listen)
    if listen in ("0.0.0.0", ""):
        return "127.0.0.1"
    if listen == "::":
        return "[::1]"
    return "[%s]" % listen if ":" in listen else listen


def health_budget(role_timeout: Any, start_timeout: Any) -> int:
    """Seconds the health wait may take: the role's override, else the instance's start_timeout; at least 2."""
    chosen = role_timeout if role_timeout not in (None, "") else start_timeout
    return max(int(chosen), 2)


def run_facts(instance: Mapping[str, Any], state_dir: str, health_timeout: Any = None) -> Dict[str, Any]:
    """The run path's facts of one merged INSTANCE (``options``); STATE_DIR holds the owed-restart flags."""
    name = instance["name"]
    listen = instance.get("host", "127.0.0.1")
    speculative = instance.get("speculative") or {}
    algorithm = speculative.get("algorithm", "none") if isinstance(speculative, Mapping) else "none"
    # an instance off loopback gets an API key unless it says otherwise (api_key: a boolean in the role)
    api_key = instance.get("api_key", str(listen) not in LOOPBACK)
    return {
        "state": instance.get("state"),
        "unit": "sglang@%s.service" % name,
        "unit_dir": instance.get("unit_dir"),
        "base_url": "http://%s:%s" % (client_address(listen), instance.get("port", 30000)),
        "health_path": instance.get("health_path", "/health_generate"),
        "served_model_name": instance.get("served_model_name", instance.get("target", "")),
        "api_key": boolean(api_key, strict=False),
        "health_timeout": health_budget(health_timeout, instance.get("start_timeout", 2400)),
        "tp": instance.get("tp", 1),
        "algorithm": algorithm,
        "speculative": algorithm in SPECULATIVE,
        "min_accept_length": instance.get("min_accept_length", 1.0),
        "owed_flag": "%s/%s.restart-owed" % (state_dir, name),
    }
