# SPDX-License-Identifier: Apache-2.0
"""Run a Molecule scenario from pytest, with the venv first on PATH (ansible-compat needs it)."""

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_scenario(scenario, env=None, timeout=900, command="test"):
    full = dict(os.environ)
    full.update(env or {})
    full["PATH"] = str(Path(sys.executable).parent) + os.pathsep + full.get("PATH", "")
    full["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    full.setdefault("ANSIBLE_FORCE_COLOR", "0")
    full["NO_COLOR"] = "1"
    proc = subprocess.run(["molecule", command, "-s", scenario], cwd=REPO, env=full, capture_output=True,
                          text=True, timeout=timeout, check=False)
    out = proc.stdout + proc.stderr
    keep_output("molecule-%s-%s" % (scenario, command), out)
    return proc.returncode, out


def keep_output(label, text):
    """TEXT kept as <time>-LABEL.log under $CT200_DEPLOY_LOGS when it is set: every playbook and Molecule step
    of the integration tests, with per-task times when profile_tasks is enabled."""
    logs = os.environ.get("CT200_DEPLOY_LOGS")
    if logs:
        os.makedirs(logs, exist_ok=True)
        with open(os.path.join(logs, "%.3f-%s.log" % (time.time(), label)), "w", encoding="utf-8") as handle:
            handle.write(text)
