# SPDX-License-Identifier: Apache-2.0
"""One bare sandbox host taken to a serving instance by the Molecule `deploy` scenario (the whole
deploy_kimi.yml: preflight, runtime install, token, access, weights, unit, smoke; idempotence on;
verify), then shared by the tests that need a served host (phase tags, API key and owed restart):
the first deploy on a bare host is the slowest step of the suite, and proving it once is enough."""

import subprocess

import pytest
from localhub.personas import token_for
from moleculerun import run_scenario

from test_deploy_preflight import REPO

SCENARIO_STEPS = ("create", "prepare", "converge", "idempotence", "verify")


def _provide_caches():
    """The SGLang wheelhouse and the local apt repository the scenario binds into the host."""
    for script, args in (("sglang-wheelhouse.sh", ["0.5.23"]),
                         ("local-apt-repo.sh", ["ninja-build", "numactl", "python3-apt"])):
        subprocess.run([str(REPO / "scripts" / script), *args], check=True, timeout=900, capture_output=True)


@pytest.fixture(scope="session")
def served_host(tmp_path_factory, local_hub):
    """(sandbox state file, Molecule converge output) of the bare host the deploy scenario served."""
    _provide_caches()
    workdir = tmp_path_factory.mktemp("served-host")
    token = workdir / "token"
    token.write_text(token_for("granted") + "\n")
    token.chmod(0o600)
    (workdir / "disk").mkdir()
    env = {"CT200_HF_ENDPOINT": local_hub.url, "CT200_HF_TOKEN_FILE": str(token),
           "CT200_DEPLOY_DISK": str(workdir / "disk"), "MOLECULE_EPHEMERAL_DIRECTORY": str(workdir / "molecule")}
    outputs = {}
    try:
        for step in SCENARIO_STEPS:
            rc, outputs[step] = run_scenario("deploy", env, timeout=1800, command=step)
            assert rc == 0, (step, outputs[step][-5000:])
        yield workdir / "molecule" / "sandbox-state.json", outputs
    finally:
        run_scenario("deploy", env, timeout=300, command="destroy")
