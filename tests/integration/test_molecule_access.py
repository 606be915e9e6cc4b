# SPDX-License-Identifier: Apache-2.0
"""Molecule: hf_client + hf_token + hf_gated_access on a real systemd host against the local Hub."""

import pytest

from localhub.personas import token_for
from moleculerun import run_scenario

pytestmark = pytest.mark.slow


def test_hf_access_scenario(local_hub):
    rc, out = run_scenario("hf_access", env={
        "CT200_HF_ENDPOINT": local_hub.url,
        "CT200_TOKEN_GRANTED": token_for("granted"),
        "CT200_TOKEN_NEVER_REQUESTED": token_for("never_requested"),
        "CT200_TOKEN_INVALID": token_for("invalid"),
    })
    assert rc == 0, out[-6000:]
    assert "idempotence" in out.lower()
    for persona in ("granted", "never_requested", "invalid"):
        assert token_for(persona) not in out, "token of %s leaked into Molecule output" % persona
