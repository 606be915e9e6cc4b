#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Dynamic inventory of the sandbox fleet (tests/support/sandbox/sandbox.sh up N).

Reads the JSON state written by tests/support/sandbox/sandbox.sh (path from
$CT200_SANDBOX_STATE, default <repo>/.cache/sandbox/state.json) and returns
group ``ct200`` with every host.  Hosts of ``sandbox.sh up --netns`` (own
network namespace, sshd) are reached with the ``ssh`` connection as in
production: per-fleet key, a known_hosts file written at ``up`` (host key
checking on), a per-fleet ControlPath directory, pipelining.  Hosts sharing the
machine's namespace keep ``ct200.sandbox.nsenter`` to the container's init PID.

Fails (exit 1, message on stderr) when no sandbox is up or its hosts are gone,
instead of returning an empty inventory.  Note that ansible-playbook itself
only turns a failed inventory source into a warning unless
``[inventory] unparsed_is_failed = true`` (or ANSIBLE_INVENTORY_UNPARSED_FAILED=1).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
DEFAULT_STATE = REPO / ".cache" / "sandbox" / "state.json"
CONNECTION = "ct200.sandbox.nsenter"
HOST_PYTHON = "/usr/bin/python3"


class NotRunning(Exception):
    pass


def state_path() -> Path:
    return Path(os.environ.get("CT200_SANDBOX_STATE") or DEFAULT_STATE)


def _alive_systemd(pid) -> bool:
    """The leader must still be a live systemd (guards against a stale state
    file whose PIDs were reused by unrelated processes)."""
    if not isinstance(pid, int) or pid <= 1:
        return False
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return comm == "systemd" and stat.rsplit(")", 1)[1].split()[0] != "Z"


def load_state(path: Path) -> tuple[dict, list[dict]]:
    hint = "run tests/support/sandbox/sandbox.sh up N"
    if path != DEFAULT_STATE:
        hint += f" --state {path}"
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        raise NotRunning(f"sandbox is not running: {hint} (no state file {path})") from None
    except (OSError, ValueError) as exc:
        raise NotRunning(f"sandbox is not running: {hint} (unreadable state file {path}: {exc})") from None
    hosts = state.get("hosts") if isinstance(state, dict) else None
    if not hosts:
        raise NotRunning(f"sandbox is not running: {hint} (state file {path} lists no hosts)")
    if state.get("status") != "running":
        raise NotRunning(f"sandbox is not running: {hint} (state file {path} says "
                         f"'{state.get('status')}')")
    dead = [h.get("name", "?") for h in hosts if not _alive_systemd(h.get("leader_pid"))]
    if dead:
        raise NotRunning(f"sandbox is not running: {hint} (hosts {', '.join(dead)} from "
                         f"{path} are gone; 'tests/support/sandbox/sandbox.sh down' cleans up)")
    return state, hosts


def nsenter_vars(host: dict) -> dict:
    return {"ansible_nsenter_pid": host["leader_pid"]}


def ssh_vars(host: dict) -> dict:
    return {"ansible_host": host["address"]}


def ssh_group_vars(net: dict) -> dict:
    """SSH as in production; only the key and known_hosts are the fleet's own."""
    hub = net.get("hub") or {}
    return {
        "ansible_connection": "ssh",
        "ansible_user": "root",
        "ansible_ssh_private_key_file": net["ssh_key"],
        "ansible_ssh_common_args": (f"-o UserKnownHostsFile={net['known_hosts']} "
                                    "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes "
                                    "-o ServerAliveInterval=5 -o ServerAliveCountMax=3"),
        # ansible.cfg turns host key checking off for nsenter hosts; the fleet's
        # known_hosts is exact, so keep it on here.
        "ansible_host_key_checking": True,
        "ansible_ssh_pipelining": True,
        # Per fleet: a ControlPersist master must never serve a later fleet that
        # reuses the same address (sandbox.sh down closes these masters).
        "ansible_control_path_dir": net["control_path_dir"],
        "ct200_sandbox_network": "netns",
        "ct200_sandbox_gateway": net["gateway"],
        # Where a Hub for these hosts listens: its own namespace (--hub-netns)
        # or the bridge address in the machine's namespace.
        "ct200_sandbox_hub_address": hub.get("address", net["gateway"]),
        "ct200_sandbox_hub_cdn_address": hub.get("cdn_address"),
    }


def inventory(hosts: list[dict], state: dict | None = None) -> dict:
    net = (state or {}).get("network") or {}
    netns = net.get("mode") == "netns"
    hostvars = {}
    for h in hosts:
        hostvars[h["name"]] = {
            **(ssh_vars(h) if netns else nsenter_vars(h)),
            # 1..N, stable per fleet: derive per-host ports from it when the
            # hosts share the machine's network namespace (see docs/sandbox.md).
            "ct200_sandbox_index": h.get("index", 0),
        }
    group_vars = ssh_group_vars(net) if netns else {"ansible_connection": CONNECTION}
    # The client entry point (sglang-router, role ct200.deploy.router) on the fleet's first host; a serving host
    # too, as a small site would have it. CT200_SANDBOX_ROUTER_INDEX=0 leaves the group empty.
    router_index = int(os.environ.get("CT200_SANDBOX_ROUTER_INDEX", "1") or 0)
    router = sorted(n for n, h in zip(hostvars, hosts) if router_index and h.get("index", 0) == router_index)
    return {
        "_meta": {"hostvars": hostvars},
        "all": {"children": ["ungrouped", "ct200", "ct200_router"]},
        "ct200_router": {"hosts": router},
        "ct200": {
            "hosts": sorted(hostvars),
            "vars": {
                **group_vars,
                "ansible_python_interpreter": HOST_PYTHON,
                "ct200_sandbox": True,
            },
        },
    }


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[1] == "--list":
        mode = "list"
    elif len(argv) == 3 and argv[1] == "--host":
        mode = "host"
    else:
        print("usage: fleet.py --list | --host NAME", file=sys.stderr)
        return 2
    try:
        state, hosts = load_state(state_path())
        inv = inventory(hosts, state)
    except NotRunning as exc:
        print(str(exc), file=sys.stderr)
        return 1
    if mode == "list":
        json.dump(inv, sys.stdout, indent=2, sort_keys=True)
    else:
        json.dump(inv["_meta"]["hostvars"].get(argv[2], {}), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
