# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""nsenter connection to sandbox hosts, with a clean environment."""

from __future__ import annotations

DOCUMENTATION = r"""
name: nsenter
short_description: Run tasks inside a local systemd-nspawn sandbox host, with a clean environment
description:
  - Extends P(community.docker.nsenter#connection) for the ct200 sandbox fleet
    started by C(tests/support/sandbox/sandbox.sh up N). Commands enter every namespace of the host's
    init process (O(nsenter_pid)) and run there as root.
  - Unlike the upstream plugin, the controller's environment is B(not) passed to the host.
    Every command starts from C(env -i) with only C(PATH), C(LANG) and C(HOME) set, as on
    a host reached over SSH. Without this, variables such as E(HF_TOKEN), E(HF_HOME) or
    E(HF_ENDPOINT) set on the controller would silently change what modules see on the hosts.
  - Supports pipelining (module source sent on stdin), which saves one file transfer
    and one C(chmod) per task.
author: ct200-deploy developers (@ct200-deploy)
version_added: 0.1.0
options:
  nsenter_pid:
    description:
      - PID (as seen from the controller) of the sandbox host's init process.
      - C(inventories/sandbox/fleet.py) sets it from the state file of C(tests/support/sandbox/sandbox.sh).
    type: int
    default: 1
    vars:
      - name: ansible_nsenter_pid
    env:
      - name: ANSIBLE_NSENTER_PID
    ini:
      - section: nsenter_connection
        key: nsenter_pid
  host_path:
    description:
      - Value of E(PATH) for commands run on the host.
    type: str
    default: /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    vars:
      - name: ansible_nsenter_host_path
extends_documentation_fragment:
  - ansible.builtin.connection_pipelining
notes:
  - The remote user is ignored; commands always run as root, like the upstream plugin.
  - Requires C(nsenter) on the controller, root on the controller, and C(env) on the host.
  - Variables set with the C(environment) task keyword still reach the module
    (Ansible puts them inside the command, after C(env -i)).
seealso:
  - plugin: community.docker.nsenter
    plugin_type: connection
"""

EXAMPLES = r"""
# inventory (what inventories/sandbox/fleet.py returns for one host)
# ct200-h1:
#   ansible_connection: ct200.sandbox.nsenter
#   ansible_nsenter_pid: 4242
#   ansible_python_interpreter: /usr/bin/python3
"""

from ansible_collections.community.docker.plugins.connection.nsenter import (
    Connection as _UpstreamNsenter,
)

_HOST_LANG = "C.UTF-8"
_HOST_HOME = "/root"


def clean_env_prefix(host_path):
    """argv prefix that starts a command with an empty environment on the host."""
    return ["env", "-i", "PATH=" + host_path, "LANG=" + _HOST_LANG, "HOME=" + _HOST_HOME]


def wrap_command(cmd, host_path):
    """Prefix cmd (a shell string or an argv list, as Ansible passes them) with
    the clean-environment argv. The string form is run by the controller's
    shell after nsenter, so the prefix words must be shell-safe (they are:
    host_path is validated by the caller)."""
    prefix = clean_env_prefix(host_path)
    if isinstance(cmd, bytes):
        return b" ".join(p.encode() for p in prefix) + b" " + cmd
    if isinstance(cmd, str):
        return " ".join(prefix) + " " + cmd
    return prefix + list(cmd)


def check_host_path(value):
    """PATH is put unquoted into a shell command line: allow only path characters."""
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/:._-")
    if not value or set(value) - allowed:
        raise ValueError(
            "ansible_nsenter_host_path %r may contain only letters, digits and '/:._-'" % (value,)
        )
    return value


class Connection(_UpstreamNsenter):
    """community.docker.nsenter with a clean environment and pipelining."""

    transport = "ct200.sandbox.nsenter"
    has_pipelining = True

    def exec_command(self, cmd, in_data=None, sudoable=True):
        from ansible.errors import AnsibleConnectionFailure

        try:
            host_path = check_host_path(self.get_option("host_path"))
        except ValueError as exc:
            raise AnsibleConnectionFailure(str(exc)) from None
        return super().exec_command(wrap_command(cmd, host_path), in_data=in_data, sudoable=sudoable)

    def reset(self):
        """Nothing persists between commands (each one is a new nsenter)."""
        self.close()
