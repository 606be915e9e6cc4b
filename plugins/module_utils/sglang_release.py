# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Release records of a serving host (PRIVATE to the collection; module ct200.deploy.sglang_release).

A release is what one SGLang instance serves: the target commit, the drafter commit, the SGLang
version and a hash of what sglang_service rendered. On each host, in ``release_dir``
(``/var/lib/ct200/releases``, 0755, files 0644)::

    <id>.json    {"id", "target": {repo_id, commit, dir}, "drafter": {...} | null, "sglang_version",
                  "venv", "config_hash", "units": {path: content}, "measured": {decode_tok_s, accept_length},
                  "recorded_at"}
    state.json   {"current": id | null, "previous": id | null, "keep": int}

* ``config_hash`` -- sha256 of the rendered unit file and environment file texts (the unit's
  ``ExecStart=`` is the argv, the EnvironmentFile the env; neither ever holds a secret: the API
  key lives in a separate file the unit passes by path).
* ``id`` -- ``"r" + sha256(json.dumps([target commit, drafter commit or "", sglang_version,
  config_hash]))[:12]``.
* ``record`` -- after a passing switch: current -> previous, the new one -> current, with what
  the gates measured. Recording the current release again only fills in measurements.
* ``restore`` -- the unit and env files of a recorded release written back (through _io), so the
  role's run path (instance_run.yml) restarts it; ``to=previous`` (a rollback) also swaps
  current and previous.

Anyone may read state.json and the records (``ct200 status``, release_gc); only this module writes.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shlex
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.ct200.deploy.plugins.module_utils._io import atomic_write

RELEASE_DIR = "/var/lib/ct200/releases"
STATE_FILE = "state.json"
ID_RE = re.compile(r"^r[0-9a-f]{12}\Z")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}\Z")
READ_LIMIT = 4 * 1024 * 1024  # a record holds two small text files
MANIFEST_LIMIT = 64 * 1024 * 1024
DEFAULT_KEEP = 2


class ReleaseError(Exception):
    """A release cannot be recorded or restored; the message names cause and fix."""


# ---------------------------------------------------------------------------
# Identity
def config_hash(units: Dict[str, str]) -> str:
    """sha256 hex of the rendered unit/env texts, by path (order-independent)."""
    canon = json.dumps(sorted([str(k), str(v)] for k, v in units.items()), separators=(",", ":"))
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


def release_id(target_commit: str, drafter_commit: Optional[str], sglang_version: str, chash: str) -> str:
    text = json.dumps([target_commit, drafter_commit or "", sglang_version, chash])
    return "r" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def exec_argv(unit_text: str) -> List[str]:
    """The argv of the unit's (last) ``ExecStart=`` line; [] when there is none or it does not parse."""
    line = None
    for raw in unit_text.splitlines():
        if raw.startswith("ExecStart="):
            line = raw[len("ExecStart="):]
    if line is None:
        return []
    try:
        return shlex.split(line.lstrip("-@:+!"))
    except ValueError:
        return []


def argv_value(argv: List[str], flag: str) -> Optional[str]:
    value = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def served_paths(units: Dict[str, str]) -> Dict[str, Optional[str]]:
    """Target dir, drafter dir and venv of the SGLang unit among ``units`` (the file with ``ExecStart=``)."""
    for path in sorted(units):
        argv = exec_argv(units[path])
        target = argv_value(argv, "--model-path")
        if target:
            python = next((a for a in argv if re.search(r"/bin/python[0-9.]*$", a)), None)
            venv = os.path.dirname(os.path.dirname(python)) if python else None
            return {"target": target, "drafter": argv_value(argv, "--speculative-draft-model-path"), "venv": venv,
                    "unit": path}
    raise ReleaseError("none of the unit files %s has an ExecStart= with --model-path: these are not the files "
                       "sglang_service rendered for an instance; pass the instance's unit and env files"
                       % sorted(units))


def _read_bounded(path: str, limit: int) -> Optional[bytes]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ReleaseError("%s is larger than %d bytes: it is not what ct200 writes there; move it away and "
                           "re-run" % (path, limit))
    return data


def commit_of(directory: Optional[str]) -> Optional[str]:
    """The commit a weights directory holds: ``.../snapshots/<commit40>``, else its .ct200/manifest.json tree."""
    if not directory:
        return None
    base = os.path.basename(os.path.normpath(directory))
    if COMMIT_RE.match(base) and os.path.basename(os.path.dirname(os.path.normpath(directory))) == "snapshots":
        return base
    raw = _read_bounded(os.path.join(directory, ".ct200", "manifest.json"), MANIFEST_LIMIT)
    if raw is None:
        return None
    try:
        tree = json.loads(raw.decode("utf-8")).get("tree") or {}
    except (ValueError, AttributeError):
        return None
    commit = tree.get("commit") if isinstance(tree, dict) else None
    return commit if isinstance(commit, str) and COMMIT_RE.match(commit) else None


def build(units: Dict[str, str], sglang_version: str, target_repo: Optional[str] = None,
          drafter_repo: Optional[str] = None, target_commit: Optional[str] = None,
          drafter_commit: Optional[str] = None, measured: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The release record of these rendered files (no recorded_at: that is stamped when written)."""
    if not units:
        raise ReleaseError("no unit or env file was given: pass what sglang_service rendered (unit_path: "
                           "unit_content, env_path: env_content)")
    if not sglang_version:
        raise ReleaseError("the SGLang version is unknown: pass sglang_version (sglang_service's dialect.version)")
    paths = served_paths(units)
    target_commit = target_commit or commit_of(paths["target"])
    if not target_commit:
        raise ReleaseError("the commit of the target weights in %s is unknown (no snapshots/<commit> path, no "
                           ".ct200/manifest.json tree): pass target_commit (the preflight's resolved commit)"
                           % paths["target"])
    drafter = None
    if paths["drafter"]:
        drafter_commit = drafter_commit or commit_of(paths["drafter"])
        if not drafter_commit:
            raise ReleaseError("the commit of the drafter weights in %s is unknown: pass drafter_commit"
                               % paths["drafter"])
        drafter = {"repo_id": drafter_repo, "commit": drafter_commit, "dir": paths["drafter"]}
    chash = config_hash(units)
    return {
        "id": release_id(target_commit, drafter["commit"] if drafter else None, sglang_version, chash),
        "target": {"repo_id": target_repo, "commit": target_commit, "dir": paths["target"]},
        "drafter": drafter, "sglang_version": str(sglang_version), "venv": paths["venv"], "config_hash": chash,
        "units": dict(units), "measured": _measured(measured),
    }


def _measured(measured: Optional[Dict[str, Any]]) -> Dict[str, Optional[float]]:
    out: Dict[str, Optional[float]] = {"decode_tok_s": None, "accept_length": None}
    for key in out:
        value = (measured or {}).get(key)
        if value is not None and value != "":
            try:
                out[key] = round(float(value), 4)
            except (TypeError, ValueError):
                raise ReleaseError("measured.%s is %r, not a number: pass what the gate measured" % (key, value))
    return out


# ---------------------------------------------------------------------------
# Store
def _load_json(path: str) -> Optional[Any]:
    raw = _read_bounded(path, READ_LIMIT)
    if raw is None:
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise ReleaseError("%s is not valid JSON (%s): it was not written by ct200.deploy.sglang_release; move "
                           "it away and re-run (a rollout adopts the serving release again)" % (path, exc))


def load_state(release_dir: str) -> Dict[str, Any]:
    data = _load_json(os.path.join(release_dir, STATE_FILE))
    state = {"current": None, "previous": None, "keep": DEFAULT_KEEP}
    if data is None:
        return state
    if not isinstance(data, dict):
        raise ReleaseError("%s/%s is not a JSON object: move it away and re-run" % (release_dir, STATE_FILE))
    for key in ("current", "previous"):
        value = data.get(key)
        if value is not None and not (isinstance(value, str) and ID_RE.match(value)):
            raise ReleaseError("%s/%s: %s is %r, not a release id (r + 12 hex): move it away and re-run"
                               % (release_dir, STATE_FILE, key, value))
        state[key] = value
    keep = data.get("keep", DEFAULT_KEEP)
    state["keep"] = keep if isinstance(keep, int) and not isinstance(keep, bool) and keep >= 1 else DEFAULT_KEEP
    return state


def load_record(release_dir: str, rid: Optional[str]) -> Optional[Dict[str, Any]]:
    if not rid:
        return None
    if not ID_RE.match(rid):
        raise ReleaseError("%r is not a release id (r + 12 hex)" % rid)
    data = _load_json(os.path.join(release_dir, rid + ".json"))
    if data is None:
        return None
    if not isinstance(data, dict) or data.get("id") != rid or not isinstance(data.get("units"), dict):
        raise ReleaseError("%s/%s.json is not the record of release %s: move it away and re-run"
                           % (release_dir, rid, rid))
    return data


def _dump(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def plan_record(state: Dict[str, Any], existing: Optional[Dict[str, Any]], release: Dict[str, Any],
                keep: int) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """(new state, record to write or None) for recording ``release`` as current."""
    new_state = dict(state, keep=int(keep))
    if state["current"] != release["id"]:
        new_state["previous"] = state["current"]
        new_state["current"] = release["id"]
    record = dict(release)
    if existing is not None:
        old = existing.get("measured") if isinstance(existing.get("measured"), dict) else {}
        record["measured"] = {k: (release["measured"][k] if release["measured"][k] is not None else old.get(k))
                              for k in release["measured"]}
        record["recorded_at"] = existing.get("recorded_at")
        same = {k: v for k, v in existing.items() if k != "recorded_at"} == \
            {k: v for k, v in record.items() if k != "recorded_at"}
        if same:
            return new_state, None
    record["recorded_at"] = record.get("recorded_at") or _now()
    return new_state, record


class Store(object):
    """Writes under release_dir (check mode: computes, writes nothing)."""

    def __init__(self, release_dir: str, check_mode: bool = False):
        if not os.path.isabs(release_dir):
            raise ReleaseError("release_dir %r is not absolute: give e.g. %s" % (release_dir, RELEASE_DIR))
        self.dir = os.path.normpath(release_dir)
        self.check_mode = check_mode
        self.written: List[str] = []

    def state(self) -> Dict[str, Any]:
        return load_state(self.dir)

    def record(self, rid: Optional[str]) -> Optional[Dict[str, Any]]:
        return load_record(self.dir, rid)

    def _ensure_dir(self) -> None:
        if os.path.islink(self.dir):
            raise ReleaseError("%s is a symlink: the release records are never written through a link; replace "
                               "it with a directory" % self.dir)
        if not os.path.isdir(self.dir):
            os.makedirs(self.dir, mode=0o755)
            os.chmod(self.dir, 0o755)

    def write(self, name: str, data: Any) -> None:
        self.written.append(os.path.join(self.dir, name))
        if self.check_mode:
            return
        self._ensure_dir()
        atomic_write(os.path.join(self.dir, name), _dump(data), mode=0o644)

    def write_state(self, old: Dict[str, Any], new: Dict[str, Any], exists: bool) -> bool:
        if exists and old == new:
            return False
        self.write(STATE_FILE, new)
        return True

    def state_exists(self) -> bool:
        return os.path.isfile(os.path.join(self.dir, STATE_FILE))


def record(store: Store, release: Dict[str, Any], keep: int, only_if_unrecorded: bool = False) -> Dict[str, Any]:
    """Record ``release`` as current (or, with only_if_unrecorded, only when the host has no current release)."""
    state = store.state()
    if only_if_unrecorded and state["current"] is not None:
        return {"changed": False, "state": state, "before": state, "adopted": False}
    existing = store.record(release["id"])
    new_state, to_write = plan_record(state, existing, release, keep)
    changed = False
    if to_write is not None:
        store.write(release["id"] + ".json", to_write)
        changed = True
    if store.write_state(state, new_state, store.state_exists()):
        changed = True
    return {"changed": changed, "state": new_state, "before": state, "record": to_write or existing,
            "adopted": only_if_unrecorded and changed}


def unit_changes(units: Dict[str, str]) -> List[str]:
    """Paths whose content on disk differs from ``units`` (missing counts as different)."""
    changes = []
    for path, content in sorted(units.items()):
        raw = _read_bounded(path, READ_LIMIT)
        if raw is None or raw.decode("utf-8", "replace") != content:
            changes.append(path)
    return changes


def restore(store: Store, to: str = "current", restart_flag: Optional[str] = None,
            unit_name: Optional[str] = None) -> Dict[str, Any]:
    """Write the unit/env files of state[to] back; ``to=previous`` also makes it current (rollback)."""
    state = store.state()
    rid = state[to]
    if rid is None:
        raise ReleaseError("this host has no %s release recorded in %s/%s (state %s): there is nothing to go back "
                           "to; deploy the release you want (deploy_kimi.yml / ct200 rollout) instead"
                           % (to, store.dir, STATE_FILE, json.dumps(state, sort_keys=True)))
    rec = store.record(rid)
    if rec is None:
        raise ReleaseError("the %s release %s has no record %s/%s.json: it cannot be restored; deploy it again "
                           "with ct200 rollout" % (to, rid, store.dir, rid))
    units = {str(k): str(v) for k, v in rec["units"].items()}
    for path in units:
        if not os.path.isabs(path):
            raise ReleaseError("record %s names the relative path %r: it was not written by this module" % (rid, path))
    missing = [d for d in (rec.get("target", {}).get("dir"), (rec.get("drafter") or {}).get("dir"), rec.get("venv"))
               if d and not os.path.isdir(d)]
    if missing:
        raise ReleaseError("release %s needs %s, which is no longer on this host: it cannot be restored without a "
                           "download; run ct200 rollout with that release's revisions instead" % (rid, missing))
    changed_files = unit_changes(units)
    if not store.check_mode:
        for path in changed_files:
            atomic_write(path, units[path], mode=0o644)
    store.written.extend(changed_files)
    flag_written = False
    if restart_flag and changed_files:
        flag_written = True
        store.written.append(restart_flag)
        if not store.check_mode:
            atomic_write(restart_flag, "%s\n" % (unit_name or "sglang"), mode=0o644, create_dirs=False)
    new_state = dict(state)
    if to == "previous":
        new_state.update(current=state["previous"], previous=state["current"])
    state_changed = store.write_state(state, new_state, store.state_exists())
    return {"changed": bool(changed_files) or state_changed, "state": new_state, "before": state, "record": rec,
            "files": changed_files, "restart_owed": flag_written}
