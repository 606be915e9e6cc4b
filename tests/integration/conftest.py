# SPDX-License-Identifier: Apache-2.0
"""Hosts shared by the integration tests, each built once per session (tests/conftest.py keeps the
tests of one shared fixture on one worker, in collection order).

served_host: one bare sandbox host taken to a serving instance by the Molecule `deploy` scenario (the
whole deploy_kimi.yml: preflight, runtime install, token, access, weights, unit, smoke; idempotence on;
verify), then shared by the tests that need a served host (phase tags, API key and owed restart):
the first deploy on a bare host is the slowest step of the suite, and proving it once is enough.

token_fleet: three bare hosts (token-1..3, one network namespace) for the Hub-call count of a no-op
deploy (test_hub_calls.py) and then the token's life (test_rotation.py). Booting them and installing
the huggingface_hub client on each once instead of twice saves about a minute of the suite's CPU."""

import subprocess

import pytest
import sandbox_up
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


TOKEN_FLEET_HOSTS = ("token-1", "token-2", "token-3")


@pytest.fixture(scope="session")
def token_fleet(tmp_path_factory):
    """The sandbox state file of token-1..3 (wheelhouses bound in, a shared fake disk for the weights)."""
    subprocess.run([str(REPO / "scripts" / "sglang-wheelhouse.sh"), "0.5.23"], check=True, timeout=600,
                   capture_output=True)
    tmp = tmp_path_factory.mktemp("token-fleet")
    (tmp / "disk").mkdir()
    state = tmp / "fleet.json"
    cache = REPO / ".cache"
    binds = ("%s:/srv/wheelhouse:ro" % (cache / "wheelhouse"),
             "%s:/srv/sglang-wheelhouse:ro" % (cache / "sglang-wheelhouse-0.5.23-cpu"),
             "%s:/srv/ct200-disk" % (tmp / "disk"))
    with sandbox_up.hosts(TOKEN_FLEET_HOSTS, state, binds):
        yield state
