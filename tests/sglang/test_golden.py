# SPDX-License-Identifier: Apache-2.0
"""Golden command lines, units and env files for the playbook's Kimi DFlash TP8 instance and hybrid DDTree profiles.

Rendered with the built-in dialect of each version (what sglang_version renders)
and cross-checked against the dialect built from the real parser's manifest.
Model paths are rendered under a temp dir and written as /models/... .
Regenerate with CT200_UPDATE_GOLDEN=1 after an intended change, and review the diff.
"""
import json
import os

import pytest

from conftest import plan, playbook_kimi_params, qwen_ddtree_params, real_dialect
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_flags as flags
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_spec as specmod
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_unit as unit

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")


def profile(name, mdir):
    if name == "kimi-dflash-tp8":
        return playbook_kimi_params(mdir), None
    if name == "qwen36-hybrid-ddtree-pr29907":
        return qwen_ddtree_params(mdir), "pr29907"
    if name == "qwen36-hybrid-dflash":
        return qwen_ddtree_params(mdir, speculative={"algorithm": "dflash", "draft_attention_backend": "triton"}), None
    if name == "qwen36-hybrid-ddtree-fork":
        return qwen_ddtree_params(mdir, nccl_port=31000), "fork"
    raise KeyError(name)


# PR 29907 exists only on the newer DFlash worker (0.5.2x); on 0.5.11 it is refused (test_fit_and_rules).
CASES = [(p, v) for p in ("kimi-dflash-tp8", "qwen36-hybrid-dflash") for v in ("0.5.11", "0.5.23")] + [
    ("qwen36-hybrid-ddtree-pr29907", "0.5.23"), ("qwen36-hybrid-ddtree-fork", "0.5.23")]


@pytest.mark.parametrize("name, version", CASES)
def test_golden(mdir, name, version):
    params, ddtree = profile(name, mdir)
    spec, resolved, argv = plan(params, flags.static_dialect(version, ddtree))
    text = unit.render_unit(spec, argv, numactl="/usr/bin/numactl" if spec.numa_node is not None else None)
    env = unit.render_env(spec, resolved.gpus, specmod.FIXED_ENV)
    root = mdir["root"]
    rendered = {
        "argv.json": json.dumps([a.replace(root, "/models") for a in argv], indent=1) + "\n",
        "service": text.replace(root, "/models"),
        "env": env,
    }
    # The real parser's dialect renders the same line.
    real = real_dialect(version, {"pr29907": ["--speculative-ddtree-budget"],
                                  "fork": ["--speculative-dflash-enable-ddtree"]}.get(ddtree, []),
                        ["DDTREE"] if ddtree == "pr29907" else [])
    assert plan(params, real)[2] == argv
    for suffix, content in rendered.items():
        path = os.path.join(GOLDEN, "%s-%s.%s" % (name, version, suffix))
        if os.environ.get("CT200_UPDATE_GOLDEN"):
            os.makedirs(GOLDEN, exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(content)
        with open(path, encoding="utf-8") as handle:
            assert handle.read() == content, "%s differs; CT200_UPDATE_GOLDEN=1 to accept" % path


def test_dialects_differ_exactly_where_sglang_renamed(mdir):
    def load(name):
        with open(os.path.join(GOLDEN, name), encoding="utf-8") as handle:
            return json.load(handle)
    a, b = load("kimi-dflash-tp8-0.5.11.argv.json"), load("kimi-dflash-tp8-0.5.23.argv.json")
    assert [x for x in a if x not in b] == ["--cuda-graph-max-bs"]
    assert [x for x in b if x not in a] == ["--cuda-graph-max-bs-decode"]
    c, d = load("qwen36-hybrid-dflash-0.5.11.argv.json"), load("qwen36-hybrid-dflash-0.5.23.argv.json")
    assert [x for x in c if x not in d] == ["--mamba-scheduler-strategy"]
    assert [x for x in d if x not in c] == ["--mamba-radix-cache-strategy"]


def test_kimi_golden_is_the_playbook_line():
    """The playbook's instance: the field-validated flags (sglang.md section 4) with a context the KV pool holds and
    matching CUDA graph / running-request sizes."""
    with open(os.path.join(GOLDEN, "kimi-dflash-tp8-0.5.23.argv.json"), encoding="utf-8") as handle:
        argv = json.load(handle)
    line = " ".join(argv)
    for part in ("--tp-size 8", "--trust-remote-code", "--speculative-algorithm DFLASH",
                 "--speculative-draft-model-path /models/Kimi-K2.6-DFlash", "--speculative-num-draft-tokens 16",
                 "--attention-backend triton", "--speculative-draft-attention-backend triton",
                 "--tool-call-parser kimi_k2", "--reasoning-parser kimi_k2", "--mem-fraction-static 0.85",
                 "--context-length 65536", "--max-running-requests 16", "--cuda-graph-max-bs-decode 16",
                 "--enable-metrics", "--host 127.0.0.1 --port 30000"):
        assert part in line, part
    with open(os.path.join(GOLDEN, "kimi-dflash-tp8-0.5.23.env"), encoding="utf-8") as handle:
        env = handle.read()
    assert 'PATH="/opt/sglang/venv/bin:/usr/local/cuda/bin:' in env and 'CUDA_HOME="/usr/local/cuda"' in env


def test_fork_golden_renders_block_size_as_budget_plus_one():
    with open(os.path.join(GOLDEN, "qwen36-hybrid-ddtree-fork-0.5.23.argv.json"), encoding="utf-8") as handle:
        argv = json.load(handle)
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "16"
