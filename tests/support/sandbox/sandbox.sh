#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sandbox fleet of real systemd hosts (Debian bookworm, systemd-nspawn --boot)
# for Molecule role tests, the demo and CI. Run as root.
#
#   tests/support/sandbox/sandbox.sh up N [--name PREFIX | --names H1,H2,..] [--state FILE] [--bind SRC:DST[:ro]]...
#                           [--timeout SEC] [--recreate] [--keep-on-failure]
#                           [--netns [--subnet 10.200.K.0/24] [--link-rate RATE]
#                                    [--hub-netns] [--hub-rate RATE]]
#                           [--persist]   (writes on disk, not in RAM: the host can reboot)
#   tests/support/sandbox/sandbox.sh reboot HOST [--state FILE] [--timeout SEC]   (a --persist host)
#   tests/support/sandbox/sandbox.sh down [--state FILE]
#   tests/support/sandbox/sandbox.sh shape [--link-rate RATE] [--hub-rate RATE] [--state FILE]
#   tests/support/sandbox/sandbox.sh status [--state FILE] [--json]
#   tests/support/sandbox/sandbox.sh exec HOST [--] [CMD...]      (default: a login shell)
#
# Hosts are named ct200-h1..N (or PREFIX-1..N), share this machine's network
# namespace (so they reach services on 127.0.0.1, and two hosts cannot listen
# on the same port), and keep all writes in RAM (--volatile=overlay).
# --netns: each host in its own network namespace on a bridge, with sshd; the
# inventory then uses the ssh connection (docs/sandbox.md, "SSH fleet").
# State (JSON: hosts with name, nspawn_pid, leader_pid) goes to
# $CT200_SANDBOX_STATE or <checkout>/.cache/sandbox/state.json; the rootfs comes
# from tests/support/sandbox/build-rootfs.sh ($CT200_SANDBOX_ROOTFS). Details: docs/sandbox.md.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The machine's python3 (stdlib only), not a venv: the fleet must not depend on it.
py=/usr/bin/python3
[[ -x $py ]] || py=$(command -v python3)
exec "$py" "$here/sandbox.py" "$@"
