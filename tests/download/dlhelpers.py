# SPDX-License-Identifier: Apache-2.0
"""Helpers for the hf_download tests (imported by the test files; fixtures are in conftest.py)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = os.path.join(REPO_ROOT, "plugins", "modules", "hf_download.py")

WEIGHTS = "ct200test/weights"
GATED = "ct200test/gated"
BIG = "ct200test/big"

WEIGHTS_FILES = {
    "config.json": {"model_type": "toy", "hidden_size": 64},
    "tokenizer_config.json": {"model_max_length": 4096},
    "model-00001-of-00003.safetensors": "6MiB",
    "model-00002-of-00003.safetensors": "24MiB",
    "model-00003-of-00003.safetensors": "3MiB",
    "extra/adapter.bin": "1MiB",
    "empty.txt": b"",
}


def hub_files(hub, repo_id):
    """path -> (size, sha256 of the content) as served."""
    out = {}
    for f in hub.repo(repo_id).files.values():
        out[f.path] = (f.size, f.sha256)
    return out


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def assert_tree_matches(hub, repo_id, local_dir, paths=None):
    expected = hub_files(hub, repo_id)
    for path, (size, sha) in expected.items():
        if paths is not None and path not in paths:
            continue
        full = os.path.join(local_dir, path)
        assert os.path.getsize(full) == size, path
        assert sha256_of(full) == sha, path


def module_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE"))}
    env["PYTHONPATH"] = os.path.join(REPO_ROOT, "collections")
    env["HF_HOME"] = "/nonexistent/ct200-test-hf-home"  # no token file is picked up by accident
    env.update(extra or {})
    return env


def start_module(args, check_mode=False, diff=False, env=None):
    """hf_download as its own process (arguments on stdin, as Ansible pipelining does)."""
    payload = json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)})
    proc = subprocess.Popen(
        [sys.executable, MODULE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=module_env(env),
    )
    proc.stdin.write(payload)
    proc.stdin.close()
    return proc


def finish_module(proc, timeout=120):
    try:
        out = proc.stdout.read()
        err = proc.stderr.read()
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    try:
        result = json.loads(out[out.index("{"):])
    except ValueError:
        raise AssertionError("hf_download printed no JSON (rc=%s)\nstdout:%s\nstderr:%s" % (proc.returncode, out, err))
    result["_stderr"] = err
    return bool(result.get("failed")), result


def run_download(hub, local_dir, repo_id=WEIGHTS, check_mode=False, diff=False, env=None, timeout=120, **kw):
    args = dict(repo_id=repo_id, local_dir=str(local_dir), endpoint=hub.url, min_free_bytes=0)
    args.update(kw)
    proc = start_module(args, check_mode=check_mode, diff=diff, env=env)
    return finish_module(proc, timeout=timeout)


def read_progress(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def kill(proc):
    """SIGKILL (no cleanup handler can run) and reap."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def wait_for(predicate, timeout=30.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


def cdn_gets_for(hub, sha256):
    return [r for r in hub.requests_log() if r.get("kind") == "cdn_get" and sha256 in r.get("path", "")]
