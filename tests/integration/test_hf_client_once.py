# SPDX-License-Identifier: Apache-2.0
"""hf_client checks its venv once per run: a deploy includes it up to three times per host (the preflight, and as
the dependency of hf_token and model_weights); a later pass with the same venv, packages and pip arguments asks pip
nothing, a pass with other settings checks again. Across runs the venv's stamp (what its last check asked pip for)
skips pip until the settings differ or the stamp does. Installs huggingface_hub from the wheelhouse into a temporary
venv."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
    hf_client_venv: %(venv)s
    hf_client_pip_extra_args: "--no-index --find-links %(wheels)s"
  tasks:
    - {name: first pass, ansible.builtin.include_role: {name: ct200.deploy.hf_client}}
    - {name: second pass, ansible.builtin.include_role: {name: ct200.deploy.hf_client}}
    - name: a pass with other pip arguments
      ansible.builtin.include_role: {name: ct200.deploy.hf_client}
      vars:
        hf_client_pip_extra_args: "--no-index --find-links %(wheels)s --no-cache-dir"
    - {name: ready, ansible.builtin.assert: {that: [hf_client_ready | bool]}}
"""
ONE_PASS = PLAY.split("    - {name: second pass", 1)[0] + "    - {name: ready, ansible.builtin.assert: {that: [hf_client_ready | bool]}}\n"
PIP_PLAN = "TASK [ct200.deploy.hf_client : Install | ask pip what is missing]"


def _pip_plan_verdicts(play, env):
    """ok / skipping / ... of each pass's pip plan in one run of PLAY, in order."""
    proc = subprocess.run(["ansible-playbook", str(play)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return [re.search(r"^(ok|skipping|changed|fatal):", chunk, re.M).group(1)
            for chunk in proc.stdout.split(PIP_PLAN)[1:]]


def test_the_venv_is_checked_once_per_run_and_again_for_other_settings(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text(PLAY % {"venv": tmp_path / "venv", "wheels": REPO / ".cache" / "wheelhouse"})
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_INVENTORY_UNPARSED_FAILED="false")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    # the pip plan of each pass, in order: asked, skipped (checked in this run), asked again (other arguments)
    assert _pip_plan_verdicts(play, env) == ["ok", "skipping", "ok"]
    assert (tmp_path / "venv" / "bin" / "python").exists()
    one = tmp_path / "one.yml"
    one.write_text(ONE_PASS % {"venv": tmp_path / "venv", "wheels": REPO / ".cache" / "wheelhouse"})
    stamp = tmp_path / "venv" / "ct200-hf-client.stamp"
    # the stamp holds the last pass's other arguments: asked; then it holds these: the next run asks pip nothing
    assert _pip_plan_verdicts(one, env) == ["ok"]
    assert _pip_plan_verdicts(one, env) == ["skipping"]
    stamp.write_text("something else\n")  # a stamp that does not match this run's settings is checked again
    assert _pip_plan_verdicts(one, env) == ["ok"]
    stamp.unlink()
    assert _pip_plan_verdicts(one, env) == ["ok"] and stamp.exists()
