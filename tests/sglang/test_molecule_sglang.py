# SPDX-License-Identifier: Apache-2.0
"""Molecule: role sglang_service on a real systemd host (systemd-nspawn) with the SGLang test stand-in."""
import os
import sys

import pytest

from conftest import REPO, require_parse_venv

sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from moleculerun import run_scenario  # noqa: E402

pytestmark = pytest.mark.slow


def test_sglang_service_scenario():
    require_parse_venv("0.5.23")  # bind-mounted into the host; the stand-in parses with it
    rc, out = run_scenario("sglang_service")
    assert rc == 0, out[-8000:]
    for step in ("converge", "idempotence", "verify"):
        assert "[sglang_service > %s] Executed: Successful" % step in out, step
    assert "/v1/chat/completions answered in" in out and "Run | journal of wrongdialect" in out
