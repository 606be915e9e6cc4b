# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the sglang_service tests: model dirs, dialects, spec builder, parse venvs."""
import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
for extra in (os.path.join(REPO, "collections"), os.path.join(REPO, "tests")):
    if extra not in sys.path:
        sys.path.insert(0, extra)

import models  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_flags as flags  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_model as model  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_spec as specmod  # noqa: E402

MANIFESTS = os.path.join(HERE, "fixtures", "manifests")
VERSIONS = ("0.5.11", "0.5.23")


def parse_venv_python(version):
    """Interpreter of the CPU-only parse venv (scripts/sglang-parse-venv.sh VERSION)."""
    root = os.environ.get("CT200_SGLANG_VENV_%s" % version.replace(".", "_"),
                          os.path.join(REPO, ".cache", "sglang-venv-%s" % version))
    return os.path.join(root, "bin", "python")


def require_parse_venv(version):
    """Skip without the parse venv, except in CI (CI=true), where its absence is a failure."""
    python = parse_venv_python(version)
    if not os.access(python, os.X_OK):
        msg = "no SGLang %s parse venv at %s; build it with scripts/sglang-parse-venv.sh %s" % (
            version, python, version)
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return python


def manifest(version):
    with open(os.path.join(MANIFESTS, "sglang-%s.json" % version), encoding="utf-8") as handle:
        return json.load(handle)


def real_dialect(version, extra_options=(), extra_algorithms=()):
    """Dialect from the committed manifest of the real parser (optionally with DDTree flags added)."""
    data = manifest(version)
    for opt in extra_options:
        data["actions"].append({"options": [opt], "dest": opt.lstrip("-").replace("-", "_"), "choices": None,
                                "takes_value": not opt.endswith("enable-ddtree"), "action": "_StoreAction"})
    data["algorithms"] = list(data.get("algorithms", [])) + list(extra_algorithms)
    return flags.dialect_from_manifest(data, "test")


@pytest.fixture
def mdir(tmp_path):
    """Model directories: kimi, kimi_draft, qwen, qwen_draft (paths)."""
    root = tmp_path / "models"
    return {
        "root": str(root),
        "kimi": models.kimi(root),
        "kimi_draft": models.kimi_draft(root),
        "qwen": models.qwen36(root),
        "qwen_draft": models.qwen36_draft(root),
    }


def kimi_params(mdir, **over):
    params = dict(name="kimi", target=mdir["kimi"], draft=mdir["kimi_draft"],
                  speculative={"algorithm": "dflash", "draft_attention_backend": "triton"},
                  tp=8, gpu_memory_gib=96, served_model_name="kimi-k2.6", attention_backend="triton",
                  context_length=65536, min_concurrent_requests=1, chunked_prefill_size=16384, max_running_requests=16,
                  cuda_graph_max_bs=16, enable_metrics=True, extra_args=["--watchdog-timeout", "600"])
    params.update(over)
    return params


def playbook_kimi_params(mdir, **over):
    """The Kimi instance of playbooks/deploy_kimi.yml (what `runtime` sets there), on 96 GiB GPUs.

    context_length 65536 with the default bf16 KV cache: at tp 8 and 0.85 the pool holds ~110K tokens
    (sglang_fit), so 131072 cannot hold one request; fp8 target KV with a triton DFLASH draft is untested.
    65536 holds 1.7 full-length requests, hence min_concurrent_requests 1 (agent turns share prefixes).
    """
    params = dict(name="kimi", target=mdir["kimi"], draft=mdir["kimi_draft"],
                  speculative={"algorithm": "dflash", "draft_attention_backend": "triton"},
                  tp=8, gpu_memory_gib=96, port=30000, served_model_name="kimi-k2.6", attention_backend="triton",
                  context_length=65536, min_concurrent_requests=1, cuda_graph_max_bs=16, enable_metrics=True)
    params.update(over)
    return params


def qwen_ddtree_params(mdir, **over):
    params = dict(name="qwen-a", target=mdir["qwen"], draft=mdir["qwen_draft"],
                  speculative={"algorithm": "ddtree", "ddtree_budget": 15, "draft_attention_backend": "triton"},
                  tp=4, gpus=[0, 1, 2, 3], gpu_memory_gib=96, served_model_name="qwen3.6-27b", port=30000,
                  numa_node=0, context_length=65536)
    params.update(over)
    return params


def plan(params, dialect, detected=None, peers=None):
    """validate + render -> (spec, resolved, argv)."""
    spec = specmod.Spec.from_params(params)
    target = model.inspect_model(spec.target, "target") if spec.target else None
    draft = model.inspect_model(spec.draft, "draft") if spec.draft and spec.algorithm != "none" else None
    resolved = specmod.validate(spec, dialect, target, draft, detected, peers)
    return spec, resolved, specmod.render_argv(spec, dialect, resolved)


def refusal(params, dialect, detected=None, peers=None):
    """The SpecError problems for params (asserts that it is refused)."""
    with pytest.raises(specmod.SpecError) as info:
        plan(params, dialect, detected, peers)
    return info.value.problems
