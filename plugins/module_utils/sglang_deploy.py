# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Plan one SGLang instance (PRIVATE to the collection).

``plan(host, params)`` is everything the sglang_service module does; ``host``
is a small adapter (``AnsibleHost`` wraps AnsibleModule) so the flow is
unit-testable with real files.

Order: introspect -> dialect -> validate -> render -> ``systemd-analyze
verify`` -> compare with what is on disk. The module only reads: the role
installs the files (``copy validate=``), reloads and starts the unit
(``systemd_service``) and proves it (``uri``), so check mode is exact.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.ct200.deploy.plugins.module_utils import sglang_flags as flags
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_model as model
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_spec as specmod
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_unit as unit


class DeployError(Exception):
    """Failure with a message and extra result keys (argv, unit_content, problems...)."""

    def __init__(self, message: str, **extra: Any):
        super().__init__(message)
        self.message = message
        self.extra = extra


class AnsibleHost(object):
    """Adapter over AnsibleModule."""

    def __init__(self, module):
        self.module = module
        self.check_mode = module.check_mode
        self.diff_mode = module._diff

    def run(self, argv: List[str]) -> Tuple[int, str, str]:
        return self.module.run_command(argv)

    def which(self, name: str) -> Optional[str]:
        return self.module.get_bin_path(name)


def _introspect(spec: specmod.Spec) -> Tuple[Optional[model.ModelInfo], Optional[model.ModelInfo]]:
    target = model.inspect_model(spec.target, "target") if spec.target else None
    draft = None
    if spec.draft and spec.algorithm != "none":
        draft = model.inspect_model(spec.draft, "draft")
    return target, draft


def _runtime_missing(spec: specmod.Spec) -> str:
    return ("SGLang is not installed on this host: %s does not exist or is not executable. Install it with the "
            "role %s (the inventory variable %s sets its venv, whose bin/python this is), or set %s in the "
            "inventory to render the plan for that version before SGLang is installed"
            % (spec.python, specmod.RUNTIME_ROLE, specmod.RUNTIME_VENV_VAR, specmod.RUNTIME_VERSION_VAR))


def _dialect(host, spec: specmod.Spec) -> flags.Dialect:
    if spec.sglang_version:
        wanted = spec.speculative.ddtree_dialect
        return flags.static_dialect(spec.sglang_version, None if wanted == "auto" else wanted)
    if not os.path.isabs(spec.python) or not os.access(spec.python, os.X_OK):
        raise flags.DialectError(_runtime_missing(spec))
    return flags.probe_dialect(host.run, spec.python, spec.cache_dir, write_cache=not host.check_mode)


def _gpus(host) -> Tuple[List[Dict[str, Any]], Optional[str]]:
    """Detected GPUs (empty when nvidia-smi is missing) and a note."""
    smi = host.which("nvidia-smi")
    if not smi:
        return [], "nvidia-smi not found"
    rc, out, err = host.run([smi] + specmod.NVIDIA_SMI_QUERY[1:])
    if rc != 0:
        return [], "nvidia-smi failed (rc %s): %s" % (rc, (err or out).strip()[:200])
    try:
        return specmod.parse_nvidia_smi(out), None
    except ValueError as exc:
        raise DeployError("cannot read nvidia-smi output: %s" % exc)


def _verify(host, spec: specmod.Spec, unit_text: str, warnings: List[str]) -> List[str]:
    analyze = host.which("systemd-analyze")
    if not analyze:
        raise DeployError("systemd-analyze not found, so the rendered unit cannot be verified; install the "
                          "systemd package or set verify_unit: false")
    text = unit_text
    if not os.access(spec.python, os.X_OK):
        # A plan rendered before SGLang is installed (sglang_version): verify everything
        # else with an interpreter that exists.
        warnings.append("python %s does not exist yet (SGLang is not installed; role %s installs it); the unit "
                        "was verified with %s in its place" % (spec.python, specmod.RUNTIME_ROLE, sys.executable))
        text = text.replace(unit.systemd_quote(spec.python), unit.systemd_quote(sys.executable))
    return unit.verify_unit(host.run, spec.unit_name, text, systemd_analyze=analyze)


def _on_disk(path: str, warnings: List[str]) -> Optional[str]:
    """Current content at path; a symlink or odd file counts as different (the role replaces it)."""
    try:
        return unit.read_existing(path)
    except unit.NotOurs as exc:
        warnings.append("%s; it is not read, and installing the rendered file replaces it" % exc)
        return None


def _absent(spec: specmod.Spec) -> Dict[str, Any]:
    problem = specmod.check_instance_name(spec.name)
    if problem:
        raise DeployError("sglang_service refused the spec: %s" % problem, problems=[problem])
    unit_path, env_path = unit.unit_path(spec), unit.env_path(spec)
    existing = [p for p in (unit_path, env_path, spec.secret_path) if os.path.lexists(p)]
    return {"changed": bool(existing), "unit_name": spec.unit_name, "unit_path": unit_path,
            "env_path": env_path, "secret_path": spec.secret_path}


def _diff(paths_before_after: List[Tuple[str, Optional[str], str]]) -> List[Dict[str, str]]:
    return [{"before": before or "", "after": after, "before_header": path, "after_header": path}
            for path, before, after in paths_before_after if before != after]


def _validate(host, spec: specmod.Spec):
    try:
        target, draft = _introspect(spec)
        dialect = _dialect(host, spec)
    except (model.ModelConfigError, flags.DialectError) as exc:
        raise DeployError(str(exc))
    detected, gpu_note = ([], None)
    if spec.gpu_memory_gib is None or spec.gpus is None:
        if spec.gpu_count != 0:
            detected, gpu_note = _gpus(host)
    peers = unit.read_peers(spec.env_dir, spec.name) + [dict(p, source="other_instances")
                                                        for p in spec.other_instances]
    try:
        resolved = specmod.validate(spec, dialect, target, draft, detected, peers)
    except specmod.SpecError as exc:
        raise DeployError(exc.message, problems=exc.problems, dialect=dialect.describe(),
                          target=target.summary() if target else None, gpu_detection=gpu_note or "ok")
    if gpu_note and spec.gpu_memory_gib is None:
        resolved.warnings.insert(0, gpu_note)
    return target, draft, dialect, resolved


def plan(host, params: Dict[str, Any]) -> Dict[str, Any]:
    """Validate, render and verify; compare with the files on disk. Never writes."""
    spec = specmod.Spec.from_params(params)
    if spec.state == "absent":
        return _absent(spec)
    target, draft, dialect, resolved = _validate(host, spec)
    argv = specmod.render_argv(spec, dialect, resolved)
    numactl = host.which("numactl") if spec.numa_node is not None else None
    boot = unit.detect_boot(host.which, [spec.unit_dir] + list(unit.SYSTEM_UNIT_PATH))
    try:
        unit_text = unit.render_unit(spec, argv, numactl, boot)
        env_text = unit.render_env(spec, resolved.gpus, specmod.FIXED_ENV)
    except unit.UnitError as exc:
        raise DeployError(str(exc), argv=argv)
    warnings = list(resolved.warnings)
    loader_text = unit.render_uvm_loader(boot)
    if spec.verify_unit:
        problems = _verify(host, spec, unit_text, warnings)
        if loader_text and not problems:
            problems = unit.verify_unit(host.run, unit.UVM_LOADER_UNIT, loader_text, host.which("systemd-analyze"))
        if problems:
            raise DeployError("systemd-analyze verify rejected the rendered unit: %s" % " | ".join(problems),
                              argv=argv, unit_content=unit_text)
    result = _result(spec, dialect, resolved, argv, unit_text, env_text, target, draft)
    result["boot"] = _boot_result(spec, boot, loader_text)
    before = [(result["unit_path"], _on_disk(result["unit_path"], warnings), unit_text),
              (result["env_path"], _on_disk(result["env_path"], warnings), env_text)]
    result["changed"] = any(old != new for _path, old, new in before)
    if host.diff_mode:
        result["diff"] = _diff(before)
    result["warnings"] = warnings
    return result


def _boot_result(spec: specmod.Spec, boot: unit.BootDeps, loader_text: Optional[str]) -> Dict[str, Any]:
    """Host-wide boot files the role installs next to the instance (unit.py "Boot order")."""
    out = boot.describe()
    out.update({
        "uvm_loader_path": os.path.join(spec.unit_dir, unit.UVM_LOADER_UNIT) if loader_text else None,
        "uvm_loader_content": loader_text,
        "modules_load_path": unit.MODULES_LOAD_PATH if boot.driver else None,
        "modules_load_content": unit.modules_load_text() if boot.driver else None,
        "requires_mounts_for": unit.mount_paths(spec),
    })
    return out


def _result(spec, dialect, resolved, argv, unit_text, env_text, target, draft) -> Dict[str, Any]:
    return {
        "unit_name": spec.unit_name,
        "unit_path": unit.unit_path(spec),
        "unit_content": unit_text,
        "env_path": unit.env_path(spec),
        "env_content": env_text,
        "argv": argv,
        "command_line": unit.command_line(argv),
        "health_url": unit.health_url(spec.host, spec.port, spec.health_path),
        "chat_url": unit.health_url(spec.host, spec.port, "/v1/chat/completions"),
        "server_info_url": unit.health_url(spec.host, spec.port, "/server_info"),
        "served_model_name": spec.served_model_name or spec.target,
        "host": spec.host,
        "port": spec.port,
        "api_key": resolved.api_key,
        "secret_path": spec.secret_path,
        "dialect": dialect.describe(),
        "fit": resolved.fit,
        "gpus": resolved.gpus,
        "gpu_memory_gib": resolved.gpu_memory_gib,
        "expected_server_info": specmod.expected_server_info(spec, resolved),
        "min_accept_length": spec.min_accept_length,
        "target": target.summary() if target else None,
        "draft": draft.summary() if draft else None,
    }
