# SPDX-License-Identifier: Apache-2.0
"""Rendered command lines against SGLang's OWN parser and resolver (CPU-only parse venvs).

Needs scripts/sglang-parse-venv.sh 0.5.23 (and 0.5.11); skipped without them
outside CI, failed without them in CI. Each case starts a fresh interpreter
(~5 s import).
"""
import json
import os
import subprocess

import pytest

from conftest import REPO, kimi_params, plan, qwen_ddtree_params, real_dialect, require_parse_venv
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_flags as flags

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
VALIDATOR = os.path.join(REPO, "tests", "support", "sglang_standin", "validate_argv.py")


def validate(version, argv, *opts):
    python = require_parse_venv(version)
    proc = subprocess.run([python, VALIDATOR] + list(opts) + ["--"] + argv[3:], capture_output=True, text=True,
                          timeout=300, check=False)
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith("CT200-RESULT "):
            result = json.loads(line[len("CT200-RESULT "):])
        elif line.startswith("{"):
            result = json.loads(line)
    return proc.returncode, result, proc.stderr


def test_kimi_0523_parses_and_resolves_on_sm120(mdir):
    spec, resolved, argv = plan(kimi_params(mdir), real_dialect("0.5.23"))
    rc, result, err = validate("0.5.23", argv + ["--device", "cuda"], "--resolve", "--sm120")
    assert rc == 0, err[-2000:]
    assert result["speculative_algorithm"] == "DFLASH"
    assert result["speculative_draft_model_path"] == mdir["kimi_draft"]
    assert result["speculative_num_draft_tokens"] == 16
    assert (result["speculative_num_steps"], result["speculative_eagle_topk"]) == (1, 1)
    assert (result["attention_backend"], result["speculative_draft_attention_backend"]) == ("triton", "triton")
    assert (result["tp_size"], result["tool_call_parser"], result["reasoning_parser"]) == (8, "kimi_k2", "kimi_k2")


def test_kimi_0511_parses(mdir):
    spec, resolved, argv = plan(kimi_params(mdir), real_dialect("0.5.11"))
    rc, result, err = validate("0.5.11", argv + ["--device", "cuda"])
    assert rc == 0, err[-2000:]
    assert (result["speculative_algorithm"], result["speculative_num_draft_tokens"]) == ("DFLASH", 16)
    assert result["disable_overlap_schedule"] is True  # 0.5.11 forces overlap off for DFLASH
    assert result["tp_size"] == 8


@pytest.mark.parametrize("rendered_for, parsed_by, flag", [
    ("0.5.11", "0.5.23", "--cuda-graph-max-bs"),
    ("0.5.23", "0.5.11", "--cuda-graph-max-bs-decode"),
])
def test_a_line_for_one_version_fails_on_the_other(mdir, rendered_for, parsed_by, flag):
    spec, resolved, argv = plan(kimi_params(mdir), real_dialect(rendered_for))
    rc, result, err = validate(parsed_by, argv + ["--device", "cuda"])
    assert rc == 2 and flag in err, err[-1500:]


def test_pp_with_dflash_is_refused_by_sglang_too(mdir):
    """Our refusal mirrors SGLang's own resolve-time check (0.5.23)."""
    spec, resolved, argv = plan(kimi_params(mdir), real_dialect("0.5.23"))
    rc, result, err = validate("0.5.23", argv + ["--device", "cuda", "--pp-size", "2"], "--resolve", "--sm120")
    assert rc == 3 and "pp_size" in result["resolve_error"], (rc, result, err[-800:])


def test_ddtree_lines_are_rejected_by_released_parsers(mdir):
    """DDTree is in no release: the pr29907 line fails on the real parser (why the module refuses first).
    (A pr29907 line for 0.5.11 is not even rendered: the PR needs the newer DFlash worker.)"""
    dialect = flags.static_dialect("0.5.23", "pr29907")
    spec, resolved, argv = plan(qwen_ddtree_params(mdir), dialect)
    rc, result, err = validate("0.5.23", argv)
    assert rc == 2 and "unrecognized arguments: --speculative-ddtree-budget 15" in err, err[-1500:]


def test_hybrid_dflash_0523_parses_with_the_renamed_mamba_flag(mdir):
    spec, resolved, argv = plan(qwen_ddtree_params(mdir, speculative={"algorithm": "dflash"}), real_dialect("0.5.23"))
    assert "--mamba-radix-cache-strategy" in argv
    rc, result, err = validate("0.5.23", argv)
    assert rc == 0, err[-2000:]
    assert result["mamba_radix_cache_strategy"] == "extra_buffer"
    assert result["speculative_num_draft_tokens"] == 16


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_playbook_golden_line_parses_with_the_real_parser(mdir, version):
    """The golden Kimi line (the playbook's own instance) is accepted by SGLang's own parser of that version,
    with the CUDA graph size and running requests it was rendered with."""
    with open(os.path.join(GOLDEN, "kimi-dflash-tp8-%s.argv.json" % version), encoding="utf-8") as handle:
        argv = [a.replace("/models", mdir["root"], 1) if a.startswith("/models/") else a for a in json.load(handle)]
    opts = ("--resolve", "--sm120") if version == "0.5.23" else ()
    rc, result, err = validate(version, argv + ["--device", "cuda"], *opts)
    assert rc == 0, err[-2000:]
    assert (result["speculative_algorithm"], result["speculative_num_draft_tokens"]) == ("DFLASH", 16)
    assert result["context_length"] == 65536 and result["tp_size"] == 8


def test_api_key_config_file_is_read_by_the_real_parser(mdir, tmp_path):
    """SGLang reads --config YAML in-process: the key reaches ServerArgs.api_key, the argv holds only the path."""
    secret = tmp_path / "kimi.secret.yaml"
    secret.write_text("api-key: test-key-from-file\n")
    spec, resolved, argv = plan(kimi_params(mdir, host="0.0.0.0"), real_dialect("0.5.23"))
    argv = [str(secret) if a == spec.secret_path else a for a in argv]
    assert "test-key-from-file" not in " ".join(argv)
    rc, result, err = validate("0.5.23", argv + ["--device", "cuda"], "--key", "api_key")
    assert rc == 0, err[-2000:]
    assert result["api_key"] == "test-key-from-file"
