# SPDX-License-Identifier: Apache-2.0
"""Helpers of the hostile-input suite: modules as their own processes, and greps of what they left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

WEIGHTS = "sec/weights"
WEIGHTS_FILES = {"config.json": {"model_type": "toy"}, "model-00001-of-00002.safetensors": "3MiB",
                 "model-00002-of-00002.safetensors": "12MiB", "sub/adapter.bin": "1MiB"}
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def module_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE"))}
    env["PYTHONPATH"] = os.path.join(REPO_ROOT, "collections")
    env["HF_HOME"] = "/nonexistent/ct200-sec-hf-home"
    env["HF_HUB_DISABLE_XET"] = "1"
    env.update(extra or {})
    return env


def run_module(name, args, env=None, preexec_fn=None, timeout=120):
    """plugins/modules/NAME.py as its own process (arguments on stdin): (failed, result, raw stdout+stderr)."""
    payload = json.dumps({"ANSIBLE_MODULE_ARGS": args})
    proc = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "plugins", "modules", name + ".py")],
                          input=payload, capture_output=True, text=True, env=module_env(env), timeout=timeout,
                          preexec_fn=preexec_fn, check=False)
    out = proc.stdout
    try:
        result = json.loads(out[out.index("{"):])
    except ValueError:
        raise AssertionError("%s printed no JSON (rc=%s)\n%s\n%s" % (name, proc.returncode, out, proc.stderr))
    return bool(result.get("failed")), result, out + proc.stderr


def files_under(*roots):
    """{path: bytes} of every regular file under ``roots`` (symlinks not followed)."""
    found = {}
    for root in roots:
        for dirpath, _dirs, names in os.walk(str(root)):
            for name in names:
                full = os.path.join(dirpath, name)
                if os.path.isfile(full) and not os.path.islink(full):
                    with open(full, "rb") as handle:
                        found[full] = handle.read()
    return found


def holding(needle, files):
    """Paths of ``files`` ({path: bytes}) that contain ``needle``."""
    data = needle.encode() if isinstance(needle, str) else needle
    return sorted(path for path, body in files.items() if data in body)


def fetch(url):
    """(status, body) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
