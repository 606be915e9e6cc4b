# SPDX-License-Identifier: Apache-2.0
"""Boot sandbox hosts for a test (tests/support/sandbox/sandbox.sh up) and power them off after it: the one
place the tests build ``sandbox.sh up`` argv, so a new option or bind form is changed once."""
from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

SANDBOX = str(Path(__file__).resolve().parent / "sandbox" / "sandbox.sh")


def up(names, state, binds=(), extra=(), timeout=300) -> dict:
    """``sandbox.sh up --recreate`` of NAMES (a name or a list) into STATE with each ``SRC:DEST[:ro]`` bind;
    sandbox.sh's JSON (its ``hosts``). A failed boot fails the test with sandbox.sh's own message."""
    names = [names] if isinstance(names, str) else list(names)
    argv = [SANDBOX, "up", "--names", ",".join(names), "--state", str(state), "--recreate", *extra]
    argv += ["--bind=%s" % bind for bind in binds]
    booted = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    assert booted.returncode == 0, booted.stderr[-3000:]
    return json.loads(booted.stdout) if booted.stdout.strip() else {}


def down(state, timeout=180) -> None:
    subprocess.run([SANDBOX, "down", "--state", str(state)], timeout=timeout, check=False)


@contextlib.contextmanager
def hosts(names, state, binds=(), extra=(), timeout=300):
    """``up`` for the ``with`` block, then ``down`` whatever the block did; yields sandbox.sh's JSON."""
    booted = up(names, state, binds, extra, timeout)
    try:
        yield booted
    finally:
        down(state)
