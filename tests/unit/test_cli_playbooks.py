# SPDX-License-Identifier: Apache-2.0
"""Every playbook the `ct200` command runs is one of the collection's own (playbooks/), so an installed
collection runs it by FQCN (ansible-playbook ct200.deploy.<name>) and the wheel carries none."""

import subprocess
import sys
from pathlib import Path

import pytest

from ct200_fleet import COLLECTION, cli

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = str(Path(sys.executable).parent / "ansible-playbook")


@pytest.mark.parametrize("command", sorted(cli.PLAYBOOKS))
def test_each_command_runs_a_collection_playbook(command):
    path = Path(cli.PLAYBOOKS[command])
    assert path.parent == COLLECTION.root / "playbooks", path
    assert path.is_file(), path


def test_the_package_ships_no_playbook():
    assert not list((REPO / "ct200_fleet").rglob("*.yml"))
    assert "package-data" not in (REPO / "pyproject.toml").read_text()


def test_status_runs_by_fqcn_from_the_checkout(tmp_path):
    """`ansible-playbook ct200.deploy.status` resolves to the collection's playbooks/status.yml and loads its tasks
    (--list-tasks runs nothing; tests/cli/test_cli_runs.py runs it, its vars file included, through `ct200 status`)."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("ct200:\n  hosts:\n    h1:\n      ansible_connection: local\n")
    proc = subprocess.run([PLAYBOOK_BIN, "ct200.deploy.status", "-i", str(inventory), "--list-tasks"], cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "playbook: %s" % (REPO / "playbooks" / "status.yml") in proc.stdout.replace(
        str(REPO / "collections" / "ansible_collections" / "ct200" / "deploy"), str(REPO))
    assert "Status | SGLang units" in proc.stdout
