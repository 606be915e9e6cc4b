# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the local Hub tests.

The Hub runs in this process (a thread); the real ``huggingface_hub`` client runs
in a subprocess per call, because the client reads ``HF_ENDPOINT``/``HF_HOME`` at
import time and other test packages may already have imported it here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from localhub import LocalHub, RepoSpec

from localhub_testdata import (
    PRELUDE,
    BIG_FILE,
    BIG_REPO,
    BIG_SIZE,
    DATASET_REPO,
    MANY_FILES,
    MANY_REPO,
    REPO_ROOT,
)


def _many_files() -> dict:
    files: dict = {f"data/{i // 100:02d}/row_{i:04d}.txt": f"row {i}\n".encode() for i in range(MANY_FILES)}
    files["weights/w.safetensors"] = 4096
    return files


@pytest.fixture(scope="session")
def hub(tmp_path_factory: pytest.TempPathFactory):
    data_dir = tmp_path_factory.mktemp("localhub-data")
    extra = [
        RepoSpec(MANY_REPO, _many_files()),
        RepoSpec(BIG_REPO, {BIG_FILE: BIG_SIZE, "config.json": {"model_type": "test"}}),
        RepoSpec(DATASET_REPO, {"data/train.parquet": 100_000, "README.md": b"# dataset\n"}, repo_type="dataset"),
    ]
    with LocalHub(data_dir, extra) as running:
        yield running


@pytest.fixture
def clean_hub(hub: LocalHub):
    """The session hub with no faults and zeroed counters (restored afterwards)."""
    hub.clear_faults()
    hub.reset_stats()
    yield hub
    hub.clear_faults()


def make_runner(hub: LocalHub, workdir: Path):
    """Return ``run(code, env=None, timeout=90) -> dict`` executing ``code`` with
    the real huggingface_hub client in a fresh process (HF_HOME under ``workdir``).

    The snippet fills ``RESULT`` (a JSON-able dict) which ``run`` returns.  Helpers
    available in the snippet: ``api``, ``token_for``, ``err``, ``attempt``,
    ``sha256_of``, ``hf_errors``.
    """

    def run(code: str, env: dict | None = None, timeout: float = 90) -> dict:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
        full_env.update(
            HF_ENDPOINT=hub.url,
            HF_HOME=str(workdir / "hf_home"),
            HF_HUB_DISABLE_XET="1",
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HUB_DISABLE_UPDATE_CHECK="1",
            HF_HUB_DISABLE_PROGRESS_BARS="1",
            PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        )
        full_env.update(env or {})
        script = PRELUDE + textwrap.dedent(code) + '\nprint("@@RESULT@@" + json.dumps(RESULT))\n'
        proc = subprocess.run(
            [sys.executable, "-c", script], env=full_env, capture_output=True, text=True, timeout=timeout,
            cwd=workdir, check=False,
        )
        marker = [line for line in proc.stdout.splitlines() if line.startswith("@@RESULT@@")]
        if proc.returncode != 0 or not marker:
            raise AssertionError(f"client snippet failed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        result = json.loads(marker[-1][len("@@RESULT@@"):])
        result["_stderr"] = proc.stderr
        return result

    return run


@pytest.fixture
def hf(hub: LocalHub, tmp_path: Path):
    """Per-test client runner (fresh HF_HOME); see :func:`make_runner`."""
    return make_runner(hub, tmp_path)


@pytest.fixture(scope="module")
def hf_module(hub: LocalHub, tmp_path_factory: pytest.TempPathFactory):
    """Module-scoped client runner, for one client process shared by many asserts."""
    return make_runner(hub, tmp_path_factory.mktemp("hf_module"))
