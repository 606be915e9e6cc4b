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
    logs = os.environ.get("CT200_DEPLOY_LOGS")  # as test_deploy_preflight.deploy: keep each step's output
    if logs:
        os.makedirs(logs, exist_ok=True)
        with open(os.path.join(logs, "%.3f-molecule-%s-%s.log" % (time.time(), scenario, command)), "w",
                  encoding="utf-8") as handle:
            handle.write(out)
    return proc.returncode, out
