# SPDX-License-Identifier: Apache-2.0
"""Molecule: role model_weights on a real systemd host (systemd-nspawn) against the local Hub."""

import os
import re
import sys

import pytest

from localhub.personas import token_for

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "integration"))
from moleculerun import run_scenario  # noqa: E402

pytestmark = pytest.mark.slow


def test_model_weights_scenario(local_hub):
    local_hub.clear_faults()
    token = token_for("granted")
    rc, out = run_scenario("model_weights", env={"CT200_HF_ENDPOINT": local_hub.url, "CT200_TOKEN_GRANTED": token})
    assert rc == 0, out[-8000:]
    assert "idempotence" in out.lower()
    lines = re.findall(r"\[mol-weights-1\] (?:target|drafter) \S+: .*", out)
    assert any(" finished" in line for line in lines), "the role printed no progress line:\n%s" % out[-3000:]
    assert all(re.search(r": (planning|finishing|finished|[0-9.]+/[0-9.]+ GB \([0-9.]+ %\), \d+ MB/s, ETA \S+, files \d+/\d+)",
                         line) for line in lines), lines
    assert re.search(r'retried 1x \{\\?"stall\\?": 1\}', out), "the stalled transfer was not aborted and retried once"
    assert "re-fetched" not in out
    assert token not in out, "the token leaked into Molecule output"
