# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""The wait for a started SGLang unit to become healthy, watching the unit as well as the endpoint.

An instance that exits at start (a flag its SGLang build does not know, a missing module, a bad
model path) will never answer its health probe. Probing alone waits out the whole budget for it:
the default is 2400 s, sized for Kimi-K2.6's load and CUDA-graph capture. systemd knows at once.
When the main process has exited since the wait began, the wait stops with systemd's own words for
it (Result=, the exit status, the restart count) and the role prints the journal tail.

Decisions are pure functions over ``systemctl show`` properties; the loop takes its probe, its unit
reader, clock and sleep as arguments (unit-tested without a host).
"""

from __future__ import annotations

import time
from typing import Callable, Dict, Optional, Tuple

from ansible_collections.ct200.deploy.plugins.module_utils import sglang_gate as gate

# what `systemctl show` is asked for (one call per poll)
PROPERTIES = ("ActiveState", "SubState", "Result", "NRestarts", "ExecMainCode", "ExecMainStatus")


def parse_show(text: str) -> Dict[str, str]:
    """``systemctl show -p A -p B`` output (``A=value`` lines) as a dict; other lines are ignored."""
    props = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key in PROPERTIES:
            props[key] = value.strip()
    return props


def restarts(props: Dict[str, str]) -> int:
    value = props.get("NRestarts", "")
    return int(value) if value.isdigit() else 0


def exit_detail(props: Dict[str, str]) -> str:
    """systemd's words for how the main process ended, e.g. 'Result=exit-code, status 2'."""
    parts = []
    if props.get("Result") and props["Result"] != "success":
        parts.append("Result=%s" % props["Result"])
    if props.get("ExecMainStatus") not in (None, "", "0"):
        parts.append("%s %s" % ("signal" if props.get("ExecMainCode") == "2" else "status", props["ExecMainStatus"]))
    return ", ".join(parts) or "exit status 0"


def unit_exited(props: Dict[str, str], restarts_at_start: int) -> Optional[str]:
    """Why the unit can no longer become healthy in this wait, or None while it may (loading, starting).

    failed: systemd gave up (start limit, or no Restart=); auto-restart: the process exited and systemd waits
    RestartSec= before the next try; a restart counter above the one at the wait's start: it exited and was
    started again; inactive: it exited cleanly (Restart=on-failure does not restart that) or was stopped."""
    active, sub = props.get("ActiveState", ""), props.get("SubState", "")
    count = restarts(props)
    if active == "failed":
        return "the unit failed (%s) after %d restart(s)" % (exit_detail(props), count)
    if sub == "auto-restart":
        return "the main process exited (%s) and systemd is about to restart it%s" % (
            exit_detail(props), " (%d restart(s) so far)" % count if count else "")
    if count > restarts_at_start:
        return "the main process exited (%s) and was restarted %d time(s) during the wait" % (
            exit_detail(props), count - restarts_at_start)
    if active in ("inactive", "deactivating"):
        return "the unit is %s (%s): nothing is running to become healthy" % (active, exit_detail(props))
    return None


def probe(url: str, timeout: float) -> Tuple[Optional[int], str]:
    """(HTTP status or None, what went wrong) of one GET of the health URL (sglang_gate's client)."""
    status, answer = gate.Client(url).call("", timeout=timeout)
    if status == 200:
        return status, ""
    return status, "HTTP %d" % status if status is not None else str(answer)[:200]


def wait_healthy(check: Callable[[], Tuple[Optional[int], str]], show: Callable[[], Dict[str, str]],
                 timeout: float, delay: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> Dict[str, object]:
    """Probe until 200, the unit exits, or TIMEOUT seconds pass: {healthy, waited, probes, exited, last}."""
    start = clock()
    restarts_at_start = restarts(show())
    probes, last = 0, ""
    while True:
        status, last = check()
        probes += 1
        waited = round(clock() - start, 1)
        if status == 200:
            return {"healthy": True, "waited": waited, "probes": probes, "exited": None, "last": "HTTP 200"}
        exited = unit_exited(show(), restarts_at_start)
        if exited or waited >= timeout:
            return {"healthy": False, "waited": waited, "probes": probes, "exited": exited, "last": last}
        sleep(min(delay, max(timeout - waited, 0)))


def failure_message(unit: str, url: str, timeout: float, result: Dict[str, object]) -> str:
    if result.get("exited"):
        return ("%s stopped before %s answered 200 (%.0f s into the wait): %s; journalctl -u %s says why"
                % (unit, url, float(result["waited"]), result["exited"], unit))
    return ("%s did not answer 200 on %s within %.0f s (last probe: %s); the unit is still running, so it is loading "
            "or hung: raise the start timeout for a model this large, or read journalctl -u %s"
            % (unit, url, timeout, result.get("last") or "no answer", unit))
