# SPDX-License-Identifier: Apache-2.0
"""The service role's per-instance includes run on every host of a batch side by side.

Ansible turns one ``include_tasks`` result into one included file per distinct (file, args, loop value).
A loop over ``sglang_service_instances`` has a different value on every host (each instance has its own
port and paths), so each host got its own include and the linear strategy ran them one host after the
other: deploy_kimi.yml started 8 hosts 15-20 s apart, and a rollout batch of 2 took twice one host
(measured on the SSH fleet, 2026-12-02). The role loops over indices instead. This test runs both
shapes on four local hosts and counts how often the included task is announced: once per host for the
old shape, once for all hosts for the role's."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HOSTS = ["h1", "h2", "h3", "h4"]

INCLUDED = """
- name: "Included | {{ item_under_test.name }}"
  ansible.builtin.debug:
    msg: "{{ inventory_hostname }} port {{ item_under_test.port }}"
"""

BY_VALUE = """
- hosts: all
  gather_facts: false
  vars:
    instances: [{name: kimi, port: "{{ 30000 + port_offset | int }}"}]
  tasks:
    - ansible.builtin.include_tasks: included.yml
      loop: "{{ instances }}"
      loop_control: {loop_var: item_under_test, label: "{{ item_under_test.name }}"}
"""

BY_INDEX = """
- hosts: all
  gather_facts: false
  vars:
    instances: [{name: kimi, port: "{{ 30000 + port_offset | int }}"}]
  tasks:
    - ansible.builtin.include_tasks: included.yml
      vars:
        item_under_test: "{{ instances[index_under_test] }}"
      loop: "{{ range(instances | length) | list }}"
      loop_control: {loop_var: index_under_test, label: "instance {{ index_under_test }}"}
"""


def run(tmp_path, play: str) -> str:
    (tmp_path / "included.yml").write_text(INCLUDED)
    (tmp_path / "play.yml").write_text(play)
    inventory = {"all": {"hosts": {h: {"ansible_connection": "local", "port_offset": i + 1,
                                       "ansible_python_interpreter": sys.executable}
                                   for i, h in enumerate(HOSTS)}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=str(BIN) + os.pathsep + os.environ["PATH"])
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for i, host in enumerate(HOSTS):
        assert "%s port %d" % (host, 30001 + i) in proc.stdout, proc.stdout  # each host its own instance
    return proc.stdout


def test_a_loop_over_per_host_values_includes_once_per_host_and_one_over_indices_once(tmp_path):
    assert run(tmp_path, BY_VALUE).count("TASK [Included | kimi]") == len(HOSTS)
    assert run(tmp_path, BY_INDEX).count("TASK [Included | kimi]") == 1


def test_the_service_role_loops_over_indices():
    for name in ("run.yml", "configure.yml"):
        tasks = yaml.safe_load((REPO / "roles" / "sglang_service" / "tasks" / name).read_text())
        include = next(t for t in tasks if "ansible.builtin.include_tasks" in t)
        assert include["loop"] == "{{ range(sglang_service_instances | length) | list }}", name
        assert include["loop_control"]["loop_var"] == "sglang_service_index"
        assert "sglang_service_index" in include["loop_control"]["label"]
        assert include["vars"]["sglang_service_item"] == "{{ sglang_service_instances[sglang_service_index] }}"
