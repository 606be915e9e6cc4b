# SPDX-License-Identifier: Apache-2.0
"""Personas/tokens, generated content, Python API validation, and the CLI."""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
import urllib.request
import zlib
from pathlib import Path

import pytest
from localhub_testdata import SUPPORT_DIR

from localhub import DRAFTER_REPO, KIMI_CLAIMED_TOTAL_SIZE, PERSONAS, TARGET_REPO, LocalHub, RepoSpec, token_for
from localhub.content import parse_shards, parse_size

TOKEN_RE = re.compile(r"hf_[A-Za-z0-9]{30,}")


def test_tokens_are_derived_distinct_and_well_formed():
    tokens = {name: token_for(name) for name in PERSONAS}
    assert len(set(tokens.values())) == len(PERSONAS)
    for tok in tokens.values():
        assert re.fullmatch(r"hf_[A-Za-z0-9]{34}", tok)
    assert token_for("granted") == tokens["granted"]  # deterministic
    with pytest.raises(KeyError, match="unknown persona 'nobody'"):
        token_for("nobody")


def test_no_token_literal_in_package_sources():
    for path in (SUPPORT_DIR / "localhub").rglob("*"):
        if path.is_file() and path.suffix in (".py", ".md", ".json", ".txt"):
            assert not TOKEN_RE.search(path.read_text(errors="replace")), path


def test_cli_token_and_personas():
    run = [sys.executable, "-m", "localhub"]
    env = {**os.environ, "PYTHONPATH": str(SUPPORT_DIR)}
    out = subprocess.run(run + ["token", "pending"], capture_output=True, text=True, env=env, timeout=30, check=True)
    assert out.stdout.strip() == token_for("pending")
    bad = subprocess.run(run + ["token", "root"], capture_output=True, text=True, env=env, timeout=30, check=False)
    assert bad.returncode == 2 and "unknown persona 'root'" in bad.stderr and not bad.stdout
    listing = subprocess.run(run + ["personas", "--json"], capture_output=True, text=True, env=env, timeout=30,
                             check=True)
    data = json.loads(listing.stdout)
    assert set(data) == set(PERSONAS)
    assert not TOKEN_RE.search(listing.stdout)


def _safetensors_header(path: Path) -> tuple[int, dict]:
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        return n, json.loads(fh.read(n))


def test_target_content_shape(hub):
    repo = hub.repo(TARGET_REPO)
    config = json.loads(repo.files["config.json"].disk_path.read_text())
    assert config["model_type"] == "kimi_k25"
    assert config["architectures"] == ["KimiK25ForConditionalGeneration"]
    text = config["text_config"]
    assert {k: text[k] for k in ("model_type", "num_hidden_layers", "hidden_size", "num_attention_heads",
                                 "num_key_value_heads", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
                                 "n_routed_experts", "num_experts_per_tok")} == {
        "model_type": "kimi_k2", "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 64,
        "num_key_value_heads": 64, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
        "n_routed_experts": 384, "num_experts_per_tok": 8}
    quant = text["quantization_config"]
    assert quant["quant_method"] == "compressed-tensors"
    assert quant["config_groups"]["group_0"]["weights"]["num_bits"] == 4
    assert quant["config_groups"]["group_0"]["weights"]["type"] == "int"
    index = json.loads(repo.files["model.safetensors.index.json"].disk_path.read_text())
    assert index["metadata"]["total_size"] == KIMI_CLAIMED_TOTAL_SIZE
    shards = sorted(p for p in repo.files if p.endswith(".safetensors"))
    assert shards == [f"model-{i:05d}-of-000004.safetensors" for i in range(1, 5)]
    assert set(index["weight_map"].values()) == set(shards)
    for shard in shards:
        f = repo.files[shard]
        assert f.size == 2 * 1024 * 1024 and f.lfs
        n, header = _safetensors_header(f.disk_path)
        tensors = {k: v for k, v in header.items() if k != "__metadata__"}
        assert set(tensors) == {t for t, s in index["weight_map"].items() if s == shard}
        assert max(v["data_offsets"][1] for v in tensors.values()) == f.size - 8 - n
    # generated payload does not compress
    payload = repo.files[shards[0]].disk_path.read_bytes()[4096:4096 + (1 << 20)]
    assert len(zlib.compress(payload)) > 0.99 * len(payload)


def test_drafter_content_shape(hub):
    repo = hub.repo(DRAFTER_REPO)
    config = json.loads(repo.files["config.json"].disk_path.read_text())
    assert config["architectures"] == ["DFlashDraftModel"]
    assert config["dflash_config"]["block_size"] == 16
    assert all(0 <= i < 61 for i in config["dflash_config"]["target_layer_ids"])
    assert config["num_hidden_layers"] == len(config["dflash_config"]["target_layer_ids"])
    n, header = _safetensors_header(repo.files["model.safetensors"].disk_path)
    assert n % 8 == 0 and "fc.weight" in header
    assert repo.gated == "manual"


def test_generation_is_deterministic_and_reused(tmp_path):
    first = LocalHub(tmp_path / "a", target_shards="3x1MiB")
    second = LocalHub(tmp_path / "b", target_shards="3x1MiB")
    for a, b in zip(first.repos(), second.repos()):
        assert a.commit == b.commit
        assert {p: f.sha256 for p, f in a.files.items()} == {p: f.sha256 for p, f in b.files.items()}
    target = first.repo(TARGET_REPO)
    assert sorted(f.size for p, f in target.files.items() if p.endswith(".safetensors")) == [1 << 20] * 3
    shard = next(f for p, f in target.files.items() if p.endswith(".safetensors"))
    mtime = shard.disk_path.stat().st_mtime_ns
    again = LocalHub(tmp_path / "a", target_shards="3x1MiB")
    assert again.repo(TARGET_REPO).commit == target.commit
    assert shard.disk_path.stat().st_mtime_ns == mtime  # not rewritten


@pytest.mark.parametrize(("bad", "needle"), [
    (lambda h: h.add_repo("t/x", {"../etc/passwd": b"x"}), "invalid file path"),
    (lambda h: h.add_repo("t/x", {"a": b"x"}, gated="yes"), "invalid gated value"),
    (lambda h: h.add_repo("bad id!", {"a": b"x"}), "invalid repo id"),
    (lambda h: h.add_repo("t/x", {"a": "12 parsecs"}), "invalid size"),
    (lambda h: h.add_repo("t/x:4y2MiB"), "invalid shard spec"),
    (lambda h: h.set_access("t/keep", "granted", "maybe"), "invalid status"),
    (lambda h: h.set_access("t/keep", "nobody", "accepted"), "unknown persona"),
])
def test_python_api_rejects_bad_input(tmp_path, bad, needle):
    hub = LocalHub(tmp_path, include_defaults=False, repos=[RepoSpec("t/keep", {"a.txt": b"a"})])
    with pytest.raises((ValueError, KeyError), match=needle):
        bad(hub)
    assert [r.repo_id for r in hub.repos()] == ["t/keep"]


def test_size_parsing():
    assert parse_size("2MiB") == 2 << 20
    assert parse_size("1GB") == 10**9
    assert parse_size(7) == 7
    assert parse_shards("4x1GiB") == (4, 1 << 30)
    with pytest.raises(ValueError, match="COUNTxSIZE"):
        parse_shards("0x1MiB")


def test_cli_serve_state_file_and_sigterm(tmp_path):
    state = tmp_path / "state" / "hub.json"
    env = {**os.environ, "PYTHONPATH": str(SUPPORT_DIR)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "localhub", "serve", "--host", "127.0.0.1", "--port", "0",
         "--data-dir", str(tmp_path / "data"), "--state-file", str(state),
         "--target-shards", "2x1MiB", "--repo", "bench/x:2x1MiB:gated=manual",
         "--log-file", str(tmp_path / "access.log")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not state.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "state file never written"
            time.sleep(0.05)
        info = json.loads(state.read_text())
        assert info["pid"] == proc.pid and info["url"].startswith("http://127.0.0.1:")
        assert Path(info["data_dir"]) == (tmp_path / "data").resolve()
        req = urllib.request.Request(info["url"] + "/api/whoami-v2",
                                     headers={"Authorization": f"Bearer {token_for('granted')}"})
        assert json.loads(urllib.request.urlopen(req, timeout=10).read())["name"] == "ct200-granted"
        repos = {r["id"]: r for r in json.loads(urllib.request.urlopen(info["url"] + "/_admin/repos", timeout=10).read())}
        assert repos["bench/x"]["gated"] == "manual"
        assert sorted(v for k, v in repos["bench/x"]["files"].items() if k.endswith(".safetensors")) == [1 << 20] * 2
        assert len([k for k in repos[TARGET_REPO]["files"] if k.endswith(".safetensors")]) == 2
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, err
    assert not state.exists()
    assert token_for("granted") not in out + err
    log = (tmp_path / "access.log").read_text()
    assert "GET /api/whoami-v2" in log and token_for("granted") not in log


def test_cli_serve_rejects_bad_arguments(tmp_path):
    state = tmp_path / "state.json"
    env = {**os.environ, "PYTHONPATH": str(SUPPORT_DIR)}
    out = subprocess.run(
        [sys.executable, "-m", "localhub", "serve", "--data-dir", str(tmp_path / "d"), "--state-file", str(state),
         "--target-shards", "lots"], env=env, capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 2
    assert "invalid shard spec 'lots'" in out.stderr
    assert not state.exists()
