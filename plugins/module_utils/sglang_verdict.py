# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Verdicts on what a running SGLang instance answered (PRIVATE to the collection).

* ``readiness`` -- the role's smoke completion said something, and a DFLASH/DDTree
  instance's drafter accepts tokens: ``/server_info`` ``internal_states[0].avg_spec_accept_length``
  (SGLang 0.5.23 ``scheduler_components/internal_state.py``: accepted tokens / verify steps,
  absent until the first verify) above a floor after the role's warm-up requests. Kimi's
  reasoning parser puts a short answer in ``reasoning_content`` and leaves ``content`` empty,
  so either counts; both empty is a failure.
* ``parse_compute_apps`` / ``gpu_holders`` -- after a stop, which processes of the unit
  still hold GPU memory (``nvidia-smi --query-compute-apps=pid,used_memory
  --format=csv,noheader,nounits``; a process belongs to the unit when its cgroup is the
  unit's). Such a process is what a SIGKILL mid-drain leaves behind.

Each failure is ONE message naming the cause and the fix.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.ct200.deploy.plugins.module_utils.redact import scrub

SPECULATIVE = ("dflash", "ddtree")
CGROUP_LIMIT = 64 * 1024  # /proc/PID/cgroup is a few lines; more is not what we expect
COMPUTE_APPS_QUERY = ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
NO_PROCESSES = re.compile(r"^no running (compute )?processes found", re.I)


class VerdictError(Exception):
    """What the instance answered does not prove it works (the message names cause and fix)."""


# ---------------------------------------------------------------------------
# Readiness
def smoke_answer(completion: Any) -> Tuple[str, str]:
    """(field, text) of the first choice's answer: ``content``, else ``reasoning_content``."""
    choices = completion.get("choices") if isinstance(completion, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise VerdictError("the smoke completion returned no choices (%s); the endpoint is not serving chat "
                           "completions: read the journal" % _shape(completion))
    message = choices[0].get("message") if isinstance(choices[0].get("message"), dict) else {}
    for field in ("content", "reasoning_content"):
        text = message.get(field)
        if isinstance(text, str) and text.strip():
            return field, text
    usage = completion.get("usage") if isinstance(completion.get("usage"), dict) else {}
    raise VerdictError("the smoke completion's answer is empty: choices[0].message has neither content nor "
                       "reasoning_content (finish_reason %s, %s completion tokens); the model generated nothing "
                       "readable: check the journal, the chat template and the reasoning parser"
                       % (choices[0].get("finish_reason"), usage.get("completion_tokens", "?")))


def accept_length(internal_states: Any, floor: float, warmups: int) -> float:
    """``internal_states[0].avg_spec_accept_length`` when above ``floor``; VerdictError otherwise."""
    state = internal_states[0] if isinstance(internal_states, list) and internal_states else None
    value = state.get("avg_spec_accept_length") if isinstance(state, dict) else None
    if value is None:
        raise VerdictError("/server_info internal_states[0] has no avg_spec_accept_length after %d warm-up "
                           "request(s): the drafter never ran a verify step; check speculative_algorithm in "
                           "/server_info and the journal's 'accept len' lines" % warmups)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise VerdictError("/server_info internal_states[0].avg_spec_accept_length is %r, not a number; this "
                           "SGLang build reports it differently: set min_accept_length only for builds that "
                           "report it" % (value,))
    if value <= floor:
        raise VerdictError("the drafter accepts %.2f tokens per verify step on average "
                           "(internal_states[0].avg_spec_accept_length after %d warm-up request(s)), not above the "
                           "floor %s (min_accept_length): speculation gains nothing; check that the drafter "
                           "matches the target (speculative_draft_model_path), its block size and the draft "
                           "attention backend, or lower min_accept_length if this rate is expected"
                           % (value, warmups, floor))
    return float(value)


def readiness(completion: Any, internal_states: Any, algorithm: str, floor: float = 1.0,
              warmups: int = 0, secrets=()) -> Dict[str, Any]:
    """The role's verdict: ``ok``, ``msg`` and what was read (answer field and text, accept length).

    The answer and any value quoted in ``msg`` are the instance's words, which the role prints: redacted
    (``secrets``: the API key the requests carried, every encoding; token shapes without it)."""
    out: Dict[str, Any] = {"ok": False, "msg": "", "answer_field": None, "answer": None, "accept_length": None}
    try:
        out["answer_field"], out["answer"] = smoke_answer(completion)
        if str(algorithm or "none").lower() in SPECULATIVE:
            out["accept_length"] = accept_length(internal_states, float(floor), int(warmups))
    except VerdictError as exc:
        out["msg"] = str(exc)
        return scrub(out, secrets)
    out["ok"] = True
    out["msg"] = "answered in %s%s" % (out["answer_field"], "" if out["accept_length"] is None
                                       else ", drafter accepts %.2f tokens per step" % out["accept_length"])
    return scrub(out, secrets)


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        return "keys %s" % sorted(value)[:8]
    return type(value).__name__


# ---------------------------------------------------------------------------
# GPU release after a stop
def parse_compute_apps(text: str) -> List[Dict[str, Any]]:
    """``pid, used_memory`` lines (MiB; ``[N/A]`` -> None) of ``nvidia-smi --query-compute-apps``."""
    apps = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or NO_PROCESSES.match(line):
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2 or not parts[0].isdigit():
            raise VerdictError("cannot read nvidia-smi --query-compute-apps output line %r (want 'pid, used_memory'); "
                               "the driver's nvidia-smi answered in another format: check it by hand" % line[:120])
        memory = int(parts[1]) if parts[1].isdigit() else None
        apps.append({"pid": int(parts[0]), "used_memory_mib": memory})
    return apps


def cgroup_of(pid: int, proc_root: str = "/proc") -> Optional[str]:
    """The cgroup path of pid systemd manages (the unified ``0::`` line or the v1 ``name=systemd`` one, whichever
    is deeper: on a hybrid host the unified one can read ``/``); None when the process is gone."""
    path = os.path.join(proc_root, str(int(pid)), "cgroup")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, CGROUP_LIMIT).decode("utf-8", "replace")
    finally:
        os.close(fd)
    paths = []
    for line in data.splitlines():
        fields = line.split(":", 2)
        if len(fields) == 3 and (fields[0] == "0" or fields[1] == "name=systemd"):
            paths.append(fields[2])
    return max(paths, key=len) if paths else None


def in_unit(cgroup: Optional[str], unit_name: str) -> bool:
    """The cgroup is the unit's (system.slice/system-sglang.slice/sglang@kimi.service) or one below it."""
    return bool(cgroup) and unit_name in cgroup.split("/")


def gpu_holders(apps: List[Dict[str, Any]], unit_name: str, proc_root: str = "/proc") -> List[Dict[str, Any]]:
    """The compute apps that are processes of unit_name (their cgroup is the unit's or below it)."""
    holders = []
    for app in apps:
        cgroup = cgroup_of(app["pid"], proc_root)
        if in_unit(cgroup, unit_name):
            holders.append(dict(app, cgroup=cgroup))
    return holders


def release_message(unit_name: str, holders: List[Dict[str, Any]]) -> str:
    listed = ", ".join("pid %d (%s MiB)" % (h["pid"], "?" if h["used_memory_mib"] is None else h["used_memory_mib"])
                       for h in holders)
    return ("%s is stopped but %d of its processes still hold GPU memory: %s. A stop that ran out of TimeoutStopSec "
            "(stop_timeout) SIGKILLs SGLang mid-drain and can leave this; the next start would find the GPUs "
            "occupied. Wait for them to exit or kill them (kill -9 PID; a process stuck in the driver needs a "
            "GPU reset or a reboot), then raise stop_timeout if long requests were in flight"
            % (unit_name, len(holders), listed))
