"""The roles run their module with no_log and failed_when: false, then re-raise the module's own
message. These runs prove a module failure still fails the role, with the cause in the output
(regression: a reset 'failed' flag once let both roles pass silently)."""

import os
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
    - name: Role under test
      ansible.builtin.include_role:
        name: %(role)s
      vars:
%(vars)s
"""


def run_role(tmp_path, role, role_vars):
    body = "\n".join("        %s: %s" % (k, v) for k, v in role_vars.items())
    play = tmp_path / "play.yml"
    play.write_text(PLAY % {"venv": tmp_path / "venv", "wheels": REPO / ".cache" / "wheelhouse", "role": role,
                            "vars": body})
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_INVENTORY_UNPARSED_FAILED="false")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    proc = subprocess.run(["ansible-playbook", str(play)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_hf_token_role_fails_on_a_refused_token_and_writes_nothing(tmp_path):
    path = tmp_path / "hf" / "token"
    rc, out = run_role(tmp_path, "ct200.deploy.hf_token", {
        "hf_token_value": '"hf_abc\\ndef"', "hf_token_path": str(path), "hf_token_validate": "false",
        "hf_token_owner": "root"})
    assert rc != 0, out[-3000:]
    assert "contains a newline" in out and "nothing was written" in out
    assert not path.exists()


def test_hf_gated_access_role_fails_when_the_hub_is_unreachable(tmp_path):
    rc, out = run_role(tmp_path, "ct200.deploy.hf_gated_access", {
        "hf_gated_access_endpoint": "http://127.0.0.1:9",
        "hf_gated_access_token": "hf_" + "x" * 34,
        "hf_gated_access_repos": "[{repo_id: moonshotai/Kimi-K2.6}]"})
    assert rc != 0, out[-3000:]
    assert "127.0.0.1:9" in out and "x" * 34 not in out
