# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# Apache-2.0
"""Plan and apply one SGLang instance (PRIVATE to the collection).

``deploy(host, params)`` is everything the sglang_service module does;
``host`` is a small adapter (``AnsibleHost`` wraps AnsibleModule) so the flow
is unit-testable with real files and a fake ``systemctl``.

Order: introspect -> dialect -> validate -> render -> ``systemd-analyze
verify`` -> (not check mode) atomic writes -> daemon-reload if the unit
changed -> start/restart/stop -> wait for active (ExecStartPost already
polled health) -> GET /health and /server_info and compare. Any failure after
start carries the last journal lines.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.ct200.deploy.plugins.module_utils import sglang_flags as flags
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_model as model
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_spec as specmod
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_unit as unit

JOURNAL_LINES = 50


class DeployError(Exception):
    """Failure with a message and extra result keys (argv, unit, journal...)."""

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

    def atomic_move(self, src: str, dest: str) -> None:
        self.module.atomic_move(src, dest)

    def warn(self, msg: str) -> None:
        self.module.warn(msg)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def http_get(self, url: str, timeout: float = 30.0) -> Tuple[int, str]:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # local endpoint: never a proxy
        try:
            with opener.open(url, timeout=timeout) as answer:
                return answer.status, answer.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return exc.code, ""
        except Exception as exc:  # connection refused, timeout
            return 0, str(exc)


def _sha(*texts: str) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


class Systemd(object):
    def __init__(self, host, unit_name: str):
        self.host = host
        self.unit = unit_name
        self.systemctl = host.which("systemctl")
        self._available = None

    def _ctl(self, *args: str) -> Tuple[int, str, str]:
        if not self.systemctl:
            raise DeployError("systemctl not found; sglang_service manages systemd units "
                              "(use state=present on a host without systemd)")
        return self.host.run([self.systemctl] + list(args))

    def available(self) -> bool:
        """Whether a systemd manager answers (PID 1 is systemd)."""
        if self._available is None:
            if not self.systemctl:
                self._available = False
            else:
                rc, out, err = self.host.run([self.systemctl, "show", "--property=Version"])
                self._available = rc == 0 and "Version=" in out
        return self._available

    def show(self) -> Dict[str, str]:
        rc, out, err = self._ctl("show", self.unit, "--property=LoadState,ActiveState,SubState,Result,"
                                 "UnitFileState,NeedDaemonReload,MainPID")
        if rc != 0:
            raise DeployError("systemctl show %s failed (rc %s): %s" % (self.unit, rc, (err or out).strip()))
        props = {}
        for line in out.splitlines():
            if "=" in line:
                key, value = line.split("=", 1)
                props[key] = value
        return props

    def must(self, *args: str) -> None:
        rc, out, err = self._ctl(*args)
        if rc != 0:
            raise DeployError("systemctl %s failed (rc %s): %s" % (" ".join(args), rc, (err or out).strip()),
                              journal=self.journal())

    def journal(self) -> List[str]:
        journalctl = self.host.which("journalctl")
        if not journalctl:
            return ["(journalctl not found)"]
        rc, out, err = self.host.run([journalctl, "--unit", self.unit, "--lines", str(JOURNAL_LINES),
                                      "--no-pager", "--output", "short-iso"])
        return (out or err).splitlines()[-JOURNAL_LINES:]


def _introspect(spec: specmod.Spec) -> Tuple[Optional[model.ModelInfo], Optional[model.ModelInfo]]:
    target = model.inspect_model(spec.target, "target") if spec.target else None
    draft = None
    if spec.draft and spec.algorithm != "none":
        draft = model.inspect_model(spec.draft, "draft")
    return target, draft


def _dialect(host, spec: specmod.Spec) -> flags.Dialect:
    if spec.sglang_version:
        wanted = spec.speculative.ddtree_dialect
        return flags.static_dialect(spec.sglang_version, None if wanted == "auto" else wanted)
    return flags.probe_dialect(host.run, spec.python, spec.cache_dir, write_cache=not host.check_mode)


def _gpus(host, spec: specmod.Spec) -> Tuple[List[Dict[str, Any]], Optional[str]]:
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


def _verify(host, spec: specmod.Spec, unit_text: str) -> List[str]:
    analyze = host.which("systemd-analyze")
    if not analyze:
        raise DeployError("systemd-analyze not found, so the rendered unit cannot be verified; install the "
                          "systemd package or set verify_unit: false; nothing was written")
    text = unit_text
    if not os.access(spec.python, os.X_OK):
        # Rendering for a plan before SGLang is installed: verify everything
        # else with an interpreter that exists.
        host.warn("python %s does not exist yet; the unit was verified with %s in its place"
                  % (spec.python, sys.executable))
        text = text.replace(unit.systemd_quote(spec.python), unit.systemd_quote(sys.executable))
    return unit.verify_unit(host.run, spec.unit_name, text, systemd_analyze=analyze)


def _absent(host, spec: specmod.Spec) -> Dict[str, Any]:
    unit_path = os.path.join(spec.unit_dir, spec.unit_name)
    env_path = os.path.join(spec.env_dir, "%s.env" % spec.name)
    applied = os.path.join(spec.env_dir, ".%s.applied" % spec.name)
    existing = [p for p in (unit_path, env_path, applied) if os.path.exists(p)]
    result: Dict[str, Any] = {"changed": bool(existing), "argv": [], "unit": "", "unit_path": unit_path,
                              "env_path": env_path}
    if host.diff_mode:
        result["diff"] = {"before": unit.read_text(unit_path) or "", "after": "",
                          "before_header": unit_path, "after_header": unit_path}
    if not existing or host.check_mode:
        return result
    sd = Systemd(host, spec.unit_name)
    if sd.systemctl and sd.available():
        props = sd.show()
        if props.get("ActiveState") in ("active", "activating", "reloading"):
            sd.must("stop", spec.unit_name)
        if props.get("UnitFileState") == "enabled":
            sd.must("disable", spec.unit_name)
    for path in existing:
        os.unlink(path)
    if sd.systemctl and sd.available():
        sd.must("daemon-reload")
    return result


def deploy(host, params: Dict[str, Any]) -> Dict[str, Any]:
    spec = specmod.Spec.from_params(params)
    if spec.state == "absent":
        return _absent(host, spec)

    result: Dict[str, Any] = {"changed": False, "argv": [], "unit": "", "warnings": []}
    try:
        target, draft = _introspect(spec)
        dialect = _dialect(host, spec)
    except (model.ModelConfigError, flags.DialectError) as exc:
        raise DeployError(str(exc) + "; nothing was written")
    detected, gpu_note = ([], None)
    if spec.gpu_memory_gib is None or spec.gpus is None:
        detected, gpu_note = _gpus(host, spec)
    peers = unit.read_peers(spec.env_dir, spec.name) + [dict(p, source="other_instances")
                                                        for p in spec.other_instances]
    try:
        resolved = specmod.validate(spec, dialect, target, draft, detected, peers)
    except specmod.SpecError as exc:
        raise DeployError(exc.message + "; nothing was written", problems=exc.problems,
                          dialect=dialect.describe(), target=target.summary() if target else None,
                          gpu_detection=gpu_note or "ok")
    argv = specmod.render_argv(spec, dialect, resolved)
    numactl = host.which("numactl") if spec.numa_node is not None else None
    try:
        unit_text = unit.render_unit(spec, argv, numactl)
        env_text = unit.render_env(spec, resolved.gpus, specmod.FIXED_ENV)
    except unit.UnitError as exc:
        raise DeployError("%s; nothing was written" % exc, argv=argv)
    result.update(
        argv=argv,
        unit=unit_text,
        env_file=env_text,
        unit_name=spec.unit_name,
        unit_path=os.path.join(spec.unit_dir, spec.unit_name),
        env_path=os.path.join(spec.env_dir, "%s.env" % spec.name),
        dialect=dialect.describe(),
        gpus=resolved.gpus,
        gpu_memory_gib=resolved.gpu_memory_gib,
        expected_server_info=specmod.expected_server_info(spec, resolved),
        target=target.summary() if target else None,
        draft=draft.summary() if draft else None,
    )
    if gpu_note and spec.gpu_memory_gib is None:
        result["warnings"].append(gpu_note)
    result["warnings"].extend(resolved.warnings)

    if spec.verify_unit:
        problems = _verify(host, spec, unit_text)
        if problems:
            raise DeployError("systemd-analyze verify rejected the rendered unit: %s; nothing was written"
                              % " | ".join(problems), argv=argv, unit=unit_text)

    wait_path = os.path.join(spec.env_dir, unit.WAIT_SCRIPT_NAME)
    files = [
        (result["unit_path"], unit_text, 0o644),
        (result["env_path"], env_text, 0o644),
        (wait_path, unit.WAIT_HEALTHY_SCRIPT, 0o755),
    ]
    changed_files = [(p, c, m) for p, c, m in files if unit.read_text(p) != c or
                     (os.path.exists(p) and (os.stat(p).st_mode & 0o7777) != m)]
    result["changed_files"] = [p for p, _content, _mode in changed_files]
    unit_changed = result["unit_path"] in result["changed_files"]
    if changed_files:
        result["changed"] = True
    if host.diff_mode:
        result["diff"] = [
            {"before": unit.read_text(p) or "", "after": c, "before_header": p, "after_header": p}
            for p, c, _mode in changed_files if p != wait_path
        ]
    applied_path = os.path.join(spec.env_dir, ".%s.applied" % spec.name)
    applied_hash = _sha(unit_text, env_text, unit.WAIT_HEALTHY_SCRIPT)

    if not host.check_mode:
        for directory in (spec.unit_dir, spec.env_dir):
            if not os.path.isdir(directory):
                os.makedirs(directory, 0o755)
        for path, content, mode in changed_files:
            unit.write_atomic(path, content, mode, host.atomic_move)

    sd = Systemd(host, spec.unit_name)
    if spec.state in ("started", "stopped") or spec.enabled is not None:
        if not sd.systemctl or not sd.available():
            raise DeployError("state=%s needs a running systemd (PID 1), which this host lacks; use "
                              "state=present to only write the unit" % spec.state, **_keep(result))
    if not sd.systemctl or not sd.available():
        result["warnings"].append("systemd is not running here: unit written, not loaded")
        return result

    if unit_changed and not host.check_mode:
        sd.must("daemon-reload")
    props = sd.show() if not (host.check_mode and unit_changed and not os.path.exists(result["unit_path"])) \
        else {"ActiveState": "inactive", "UnitFileState": "", "LoadState": "not-found"}
    active = props.get("ActiveState") in ("active", "activating", "reloading")
    applied = unit.read_text(applied_path)
    stale = applied is not None and applied.strip() != applied_hash
    enabled = spec.enabled if spec.enabled is not None else (True if spec.state == "started" else None)
    if enabled is not None:
        is_enabled = props.get("UnitFileState") == "enabled"
        if enabled != is_enabled:
            result["changed"] = True
            if not host.check_mode:
                sd.must("enable" if enabled else "disable", spec.unit_name)

    if spec.state == "present":
        result["restart_required"] = bool(active and (stale or applied is None and changed_files))
        result["state"] = props.get("ActiveState")
        return result
    if spec.state == "stopped":
        if active:
            result["changed"] = True
            if not host.check_mode:
                sd.must("stop", spec.unit_name)
        result["state"] = "inactive"
        return result

    # state == started
    action = None
    if not active:
        action = "start"
    elif changed_files or stale or applied is None:
        action = "restart"
    result["action"] = action
    if action:
        result["changed"] = True
    if host.check_mode:
        result["state"] = "active" if (active or action) else props.get("ActiveState")
        return result
    if spec.state == "started" and spec.service_user:
        try:
            pwd.getpwnam(spec.service_user)
        except KeyError:
            raise DeployError("service_user %s does not exist on this host; create it (the "
                              "ct200.deploy.sglang_service role does) or set service_user"
                              % spec.service_user, **_keep(result))
    if action:
        if props.get("ActiveState") == "failed" or props.get("SubState") == "auto-restart":
            sd.must("reset-failed", spec.unit_name)
        sd.must(action, "--no-block", spec.unit_name)
        _wait_active(host, sd, spec, result)
    _prove(host, sd, spec, result)
    unit.write_atomic(applied_path, applied_hash + "\n", 0o644, host.atomic_move) \
        if applied != applied_hash + "\n" else None
    result["state"] = "active"
    return result


def _keep(result: Dict[str, Any]) -> Dict[str, Any]:
    return {k: result[k] for k in ("argv", "unit", "unit_path", "env_path", "dialect") if k in result}


def _wait_active(host, sd: Systemd, spec: specmod.Spec, result: Dict[str, Any]) -> None:
    timeout = spec.wait_timeout if spec.wait_timeout is not None else spec.start_timeout + 60
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        props = sd.show()
        state, sub = props.get("ActiveState"), props.get("SubState")
        seen.append("%s/%s" % (state, sub))
        if state == "active" and sub == "running":
            return
        was_starting = any(s.startswith(("activating", "active")) for s in seen[:-1])
        main_gone = sub == "start-post" and props.get("MainPID") == "0"
        if state == "failed" or sub == "auto-restart" or main_gone or (state == "inactive" and was_starting):
            raise DeployError(
                "%s did not start: it is %s/%s (result %s); last journal lines are in 'journal'"
                % (spec.unit_name, state, sub, props.get("Result")), journal=sd.journal(), **_keep(result))
        if time.monotonic() > deadline:
            raise DeployError(
                "%s is still %s/%s after wait_timeout %d s (loading or warming up); raise wait_timeout "
                "or read 'journal'" % (spec.unit_name, state, sub, timeout), journal=sd.journal(), **_keep(result))
        host.sleep(2)


def _prove(host, sd: Systemd, spec: specmod.Spec, result: Dict[str, Any]) -> None:
    url = unit.health_url(spec.host, spec.port, spec.health_path)
    status, body = host.http_get(url)
    if status != 200:
        raise DeployError("%s is active but %s answered %s %s" % (spec.unit_name, url, status, body[:200]),
                          journal=sd.journal(), **_keep(result))
    if not spec.check_server_info:
        return
    info_url = unit.health_url(spec.host, spec.port, "/server_info")
    status, body = host.http_get(info_url)
    try:
        info = json.loads(body) if status == 200 else None
    except ValueError:
        info = None
    if not isinstance(info, dict):
        raise DeployError("%s answered %s without a JSON object" % (info_url, status),
                          journal=sd.journal(), **_keep(result))
    problems = specmod.compare_server_info(result["expected_server_info"], info)
    shown = set(result["expected_server_info"]) | {"version", "standin", "served_model_name", "model_path"}
    result["server_info"] = {k: info.get(k) for k in sorted(shown) if k in info}
    if problems:
        raise DeployError("%s runs but does not serve what was rendered: %s"
                          % (spec.unit_name, "; ".join(problems)), journal=sd.journal(), **_keep(result))
