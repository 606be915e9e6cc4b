# SPDX-License-Identifier: Apache-2.0
"""Run a real module's main() in-process: real argument parsing, real exit_json/fail_json."""

import contextlib
import io
import json

from ansible.module_utils.testing import patch_module_args


def run_module(main, args, check_mode=False, diff=False):
    """Returns (failed, result). The module runs unmodified; only its arguments are injected."""
    full = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)
    out = io.StringIO()
    with patch_module_args(full), contextlib.redirect_stdout(out):
        try:
            main()
        except SystemExit:
            pass
    text = out.getvalue()
    result = json.loads(text[text.index("{"):])
    return bool(result.get("failed")), result


REPO_ROOT = __import__("os").path.dirname(__import__("os").path.dirname(__import__("os").path.abspath(__file__)))


def run_module_process(name, args, env=None, check_mode=False, diff=False, python=None, timeout=120):
    """Run plugins/modules/<name>.py as its own process, arguments on stdin as Ansible pipelining does.

    A fresh interpreter per run matters: huggingface_hub reads HF_ENDPOINT and
    HF_HOME once, at import, exactly as in a real module execution.
    """
    import os
    import subprocess
    import sys
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE"))}
    full_env["PYTHONPATH"] = os.path.join(REPO_ROOT, "collections")
    full_env.update(env or {})
    payload = json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)})
    proc = subprocess.run([python or sys.executable, os.path.join(REPO_ROOT, "plugins", "modules", name + ".py")],
                          input=payload, capture_output=True, text=True, env=full_env, timeout=timeout, check=False)
    text = proc.stdout
    try:
        result = json.loads(text[text.index("{"):])
    except ValueError:
        raise AssertionError("module %s printed no JSON (rc=%s)\nstdout:%s\nstderr:%s"
                             % (name, proc.returncode, proc.stdout, proc.stderr))
    result["_stderr"] = proc.stderr
    return bool(result.get("failed")), result


SHM = "/dev/shm"
SECRET_PREFIX = "ct200-secret-"  # ct200_fleet.secret.token_file_outside's temporary directories


def shm_secrets():
    """The ct200 secret directories in /dev/shm now."""
    import os
    return {name for name in os.listdir(SHM) if name.startswith(SECRET_PREFIX)}


def shm_secrets_left(before, wait=300.0):
    """The ct200 secret directories made since BEFORE that are still there once WAIT seconds have
    passed. Another run of the suite on this machine (an xdist worker, a second checkout) may hold
    one of its own for a while; a directory that was left behind stays, so waiting is exact."""
    import time
    deadline = time.monotonic() + wait
    while True:
        left = shm_secrets() - before
        if not left or time.monotonic() > deadline:
            return sorted(left)
        time.sleep(1)
