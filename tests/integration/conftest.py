# SPDX-License-Identifier: Apache-2.0
"""One bare sandbox host taken to a serving instance by deploy_kimi.yml, shared by the tests that
need a served host (phase tags, API key and owed restart): the first deploy on a bare host (the
runtime install and the weights) is the slowest step of the suite, and proving it once is enough."""

import subprocess

import pytest

from test_deploy_preflight import CACHE, SANDBOX, SERVED_HOST, bare_host, deploy


@pytest.fixture(scope="session")
def served_host(tmp_path_factory, local_hub):
    """(state file, output of the first deploy) of a bare host that deploy_kimi.yml took to serving."""
    workdir = tmp_path_factory.mktemp("served-host")
    state = bare_host(workdir, SERVED_HOST, CACHE / "sglang-wheelhouse-0.5.23-cpu")
    try:
        rc, out = deploy(state, local_hub, workdir)
        assert rc == 0, out[-4000:]
        yield state, out
    finally:
        subprocess.run([SANDBOX, "down", "--state", str(state)], timeout=120, check=False)
