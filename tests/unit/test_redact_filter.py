# SPDX-License-Identifier: Apache-2.0
"""The ct200.deploy.redact filter on what a playbook really hands it: ansible-core 2.19 passes a registered
or extra variable's list as its lazy list type, which cannot be built by its type (the journal-tail print
of a failed start broke on it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEY = "ct200-test-key-0123456789abcdef"  # a test persona's API key, not a real one


def test_a_variables_list_is_redacted_through_ansible():
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_INVENTORY_UNPARSED_FAILED="false")
    lines = {"lines": ["server_args api_key='%s'" % KEY, "ready", {"nested": ["Bearer " + KEY]}]}
    res = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
                          "-i", "localhost,", "-m", "ansible.builtin.debug",
                          "-a", "msg={{ lines | ct200.deploy.redact(['%s']) }}" % KEY, "-e", json.dumps(lines)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    msg = json.loads(res.stdout[res.stdout.index("{"):])["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]
    assert isinstance(msg, list) and msg[1] == "ready"
    assert KEY not in json.dumps(msg)
