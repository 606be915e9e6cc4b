# SPDX-License-Identifier: Apache-2.0
"""Fit check with the KV cache, and the SGLang line fixes of issue 8 item 4 and issue 7 findings 3/4/8."""
import copy

import pytest

import models
from conftest import kimi_params, plan, playbook_kimi_params, qwen_ddtree_params, real_dialect, refusal
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_fit as fitmod
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_flags as flags
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_model as model
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_spec as specmod

D23 = real_dialect("0.5.23")
D11 = real_dialect("0.5.11")
PR = real_dialect("0.5.23", ["--speculative-ddtree-budget"], ["DDTREE"])
FORK = real_dialect("0.5.23", ["--speculative-dflash-enable-ddtree"])
FIELD_POOL_TOKENS = 116153  # sglang.md section 4: Kimi-K2.6 tp 8, 0.85, bf16 KV, no drafter, 97887 MiB GPUs


def one(problems):
    assert len(problems) == 1, problems
    return problems[0]


def value(argv, flag):
    return argv[argv.index(flag) + 1]


# -- arithmetic -----------------------------------------------------------------
def test_kimi_replicated_weights_and_kv_bytes_from_the_config(mdir):
    target = model.inspect_model(mdir["kimi"])
    draft = model.inspect_model(mdir["kimi_draft"], "draft")
    assert fitmod.mla_replicated_params(target) * 2 == 7168 * (1536 + 512 + 64) * 61 * 2  # ~1.85 GB
    assert round(fitmod.replicated_bytes(target) / 1e9, 2) == 3.11  # + router gates + MoonViT
    assert fitmod.kv_bytes_per_token(target, 8, 1, 2.0) == (512 + 64) * 61 * 2  # 70272, on every rank
    assert fitmod.kv_bytes_per_token(target, 8, 1, 1.0) == (512 + 64) * 61
    assert fitmod.draft_kv_bytes_per_token(draft, 8) == 1 * (128 + 128) * 5 * 2  # one KV head per rank


def test_pool_matches_the_field_figure_on_the_conservative_side(mdir):
    target = model.inspect_model(mdir["kimi"])
    fit = fitmod.compute(fitmod.FitInput(97887 / 1024.0, 0.85, 8, 1, 131072, None, target))
    assert 0.98 * FIELD_POOL_TOKENS <= fit.pool_tokens <= FIELD_POOL_TOKENS


# -- Kimi at tp 8 ------------------------------------------------------------------
@pytest.mark.parametrize("fraction, expected", [
    (0.74, "leaving no KV cache (0 tokens for a 262144-token context_length request)"),
    (0.85, "it holds 110581 tokens, fewer than one request of context_length 262144"),
])
def test_kimi_tp8_262144_is_refused(mdir, fraction, expected):
    msg = one(refusal(kimi_params(mdir, context_length=262144, mem_fraction_static=fraction), D23))
    assert expected in msg and "GB per GPU" in msg


def test_kimi_refusal_names_the_three_fixes(mdir):
    msg = one(refusal(kimi_params(mdir, context_length=131072), D23))
    assert msg.startswith("KV cache: 85.6 GB usable per GPU (96 GiB - 2.25 GiB runtime reserve, x "
                          "mem_fraction_static 0.85) leaves 8.1 GB per GPU for the KV pool after weights 77.5 GB per "
                          "GPU (74.0 GB sharded + 3.1 GB replicated on every rank + 0.4 GB drafter); at 72832 bytes "
                          "per token (target 70272 + drafter 2560, kv_cache_dtype auto (bf16)) it holds 110581 tokens")
    assert "fix with context_length <= 109568, or kv_cache_dtype fp8_e4m3 (213652 tokens), or mem_fraction_static 0.87" \
        in msg


def test_fp8_kv_holds_twice_the_tokens(mdir):
    spec, resolved, argv = plan(kimi_params(mdir, context_length=131072, kv_cache_dtype="fp8_e4m3"), D23)
    assert resolved.fit["pool_tokens"] == 213652 and resolved.fit["kv_bytes_per_token"] == 35136
    assert value(argv, "--kv-cache-dtype") == "fp8_e4m3"


def test_the_playbook_instance_passes_without_a_warning(mdir):
    spec, resolved, argv = plan(playbook_kimi_params(mdir), D23)
    assert resolved.warnings == []
    assert resolved.fit["concurrent_full_requests"] == 1.69 and resolved.fit["context_length"] == 65536


def test_fewer_full_requests_than_wanted_is_a_warning(mdir):
    spec, resolved, argv = plan(playbook_kimi_params(mdir, min_concurrent_requests=4), D23)
    assert len(resolved.warnings) == 1
    assert resolved.warnings[0].endswith(
        "it holds 110581 tokens = 1.7 concurrent full-length requests of context_length 65536, fewer than "
        "min_concurrent_requests 4; more with context_length <= 26624, or kv_cache_dtype fp8_e4m3 (213652 tokens)")


def test_context_defaults_to_the_model_maximum(mdir):
    params = kimi_params(mdir)
    del params["context_length"]
    assert "fewer than one request of context_length 262144" in one(refusal(params, D23))


# -- GPU facts ----------------------------------------------------------------------
def test_tp8_on_a_host_without_gpus_is_refused(mdir):
    msg = one(refusal(kimi_params(mdir, gpu_count=0), D23))
    assert msg.startswith("this host has no GPU (gpu_count 0 from the preflight facts) but tp 8 x pp 1 needs 8")


def test_tp8_on_a_four_gpu_host_is_refused(mdir):
    assert "tp 8 x pp 1 needs 8 GPUs but this host has 4 (gpu_count)" in one(refusal(kimi_params(mdir, gpu_count=4),
                                                                                     D23))
    plan(kimi_params(mdir, gpu_count=8), D23)


def test_numa_node_refused_when_the_gpus_span_nodes(mdir):
    numa = [0, 0, 0, 0, 1, 1, 1, 1]
    msg = one(refusal(kimi_params(mdir, numa_node=0, gpu_numa_nodes=numa), D23))
    assert msg.startswith("numa_node 0 binds the instance to one NUMA node but its GPUs [0, 1, 2, 3, 4, 5, 6, 7] sit "
                          "on nodes [0, 1]")
    assert "numa_node 1, but the instance's GPUs [0, 1, 2, 3] sit on NUMA node 0" in one(
        refusal(qwen_ddtree_params(mdir, numa_node=1, gpu_numa_nodes=numa), PR))
    plan(qwen_ddtree_params(mdir, numa_node=1, gpus=[4, 5, 6, 7], gpu_numa_nodes=numa), PR)


# -- CUDA graphs vs running requests ------------------------------------------------------
@pytest.mark.parametrize("over", [dict(max_running_requests=None), dict(cuda_graph_max_bs=None)])
def test_graph_size_and_running_requests_are_rendered_together(mdir, over):
    spec, resolved, argv = plan(kimi_params(mdir, **over), D23)
    assert value(argv, "--max-running-requests") == value(argv, "--cuda-graph-max-bs-decode") == "16"


def test_graph_size_and_running_requests_must_agree(mdir):
    msg = one(refusal(kimi_params(mdir, max_running_requests=48, cuda_graph_max_bs=16), D23))
    assert msg.startswith("max_running_requests 48 and cuda_graph_max_bs 16 disagree: batches 17-48 would run "
                          "without CUDA graphs")


# -- DDTree dialects ---------------------------------------------------------------------
def test_fork_renders_budget_plus_one_as_the_block_size(mdir):
    spec, resolved, argv = plan(qwen_ddtree_params(mdir), FORK)
    assert resolved.ddtree_budget == 15 and value(argv, "--speculative-num-draft-tokens") == "16"
    assert "--speculative-dflash-enable-ddtree" in argv and "--speculative-ddtree-budget" not in argv


@pytest.mark.parametrize("budget", [14, 16])
def test_fork_budget_must_be_block_size_minus_one(mdir, budget):
    params = qwen_ddtree_params(mdir)
    params["speculative"]["ddtree_budget"] = budget
    msg = one(refusal(params, FORK))
    assert msg.startswith("speculative.ddtree_budget %d: the fork dialect reads --speculative-num-draft-tokens as the "
                          "block size" % budget)
    assert "must equal the drafter's block size 16; use ddtree_budget 15" in msg


def test_pr29907_on_0511_cannot_exist(mdir):
    msg = one(refusal(qwen_ddtree_params(mdir), flags.static_dialect("0.5.11", "pr29907")))
    assert msg.startswith("DDTree PR sgl-project/sglang#29907 on SGLang 0.5.11 cannot exist")


def test_pr29907_renders_the_budget_separately(mdir):
    spec, resolved, argv = plan(qwen_ddtree_params(mdir), PR)
    assert value(argv, "--speculative-num-draft-tokens") == "16" and value(argv, "--speculative-ddtree-budget") == "15"


# -- grammar / logprobs ----------------------------------------------------------------------
def test_0511_dflash_warns_about_grammar_and_logprobs(mdir):
    spec, resolved, argv = plan(kimi_params(mdir), D11)
    assert any("0.5.11's DFLASH rejects logprobs and every grammar-constrained request" in w for w in resolved.warnings)
    assert not plan(kimi_params(mdir), D23)[1].warnings


def test_0511_dflash_refused_when_grammar_is_required(mdir):
    msg = one(refusal(kimi_params(mdir, require_grammar=True), D11))
    assert msg.startswith("require_grammar is true (strict tool calls, JSON schema), but SGLang 0.5.11's DFLASH")
    plan(kimi_params(mdir, require_grammar=True), D23)


# -- values that reach the unit or the env file ------------------------------------------------
@pytest.mark.parametrize("over, expected", [
    (dict(name="a/b"), "name 'a/b' is not a valid instance name"),
    (dict(name=".hidden"), "name '.hidden' is not a valid instance name"),
    (dict(name="x" * 65), "is not a valid instance name"),
    (dict(service_user="Sglang"), "service_user 'Sglang' is not a POSIX user/group name"),
    (dict(service_user="s" * 33), "is not a POSIX user/group name; use at most 32"),
    (dict(service_group="root group"), "service_group 'root group' is not a POSIX user/group name"),
    (dict(served_model_name="kimi\nExecStartPre=/bin/x"), "served_model_name contains a control character"),
    (dict(python="/opt/v/bin/python\r"), "python contains a control character"),
    (dict(env_dir="/etc/sg lang"), "env_dir '/etc/sg lang' must be an absolute path of"),
    (dict(cuda_home="/usr/local/cuda%i"), "cuda_home '/usr/local/cuda%i' must be an absolute path of"),
    (dict(host="0.0.0.0\nUser=root"), "host contains a control character"),
    (dict(host="a b"), "host 'a b' is not an IP address or host name"),
    (dict(environment={"OMP_NUM_THREADS": "8\tX"}), "environment OMP_NUM_THREADS has a newline or other control"),
    (dict(extra_args=["--watchdog-timeout", "6\x0700"]), "extra_args item"),
    (dict(stop_timeout=0), "stop_timeout 0 must be a positive number"),
    (dict(start_limit_burst=0), "start_limit_burst 0 must be a positive number"),
    (dict(min_concurrent_requests=0), "min_concurrent_requests 0 must be a positive number"),
    (dict(restart_sec=-1), "restart_sec -1 must be >= 0"),
    (dict(gpu_count=-1), "gpu_count -1 must be >= 0"),
    (dict(extra_args=["--api-key", "x"]), "extra_args sets --api-key, which the spec renders from option api_key"),
    (dict(extra_args=["--config", "/tmp/x.yaml"]), "extra_args sets --config"),
    (dict(environment={"PATH": "/bin"}), "environment PATH is written by the module"),
])
def test_field_refusals(mdir, over, expected):
    problems = refusal(kimi_params(mdir, **over), flags.static_dialect("0.5.23"))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("name", ["kimi", "kimi-a.1", "qwen@a", "_x"])
def test_valid_instance_names(name):
    assert specmod.check_instance_name(name) is None


@pytest.mark.parametrize("name", ["../victim", "/etc/victim", "..", ".", "a\nb", "", None, "-x", "a b"])
def test_invalid_instance_names(name):
    assert "is not a valid instance name" in specmod.check_instance_name(name)


# -- API key ------------------------------------------------------------------------------------
def test_api_key_file_is_passed_as_config_never_the_key(mdir):
    spec, resolved, argv = plan(kimi_params(mdir, host="0.0.0.0"), D23)
    assert resolved.api_key and value(argv, "--config") == "/etc/sglang/kimi.secret.yaml"
    assert "--api-key" not in argv
    spec, resolved, argv = plan(kimi_params(mdir, api_key=True), D23)
    assert "--config" in argv
    spec, resolved, argv = plan(kimi_params(mdir), D23)
    assert not resolved.api_key and "--config" not in argv


def test_api_key_is_refused_when_sglang_cannot_read_its_config_file(mdir):
    """Regression: without PyYAML SGLang's --config merger does not import and the instance died at start."""
    broken = copy.copy(D23)
    broken.config_reader_error = "ModuleNotFoundError: No module named 'yaml'"
    msg = one(refusal(kimi_params(mdir, host="0.0.0.0"), broken))
    assert msg.startswith("api_key: SGLang 0.5.23 reads the key from the --config file /etc/sglang/kimi.secret.yaml")
    assert "No module named 'yaml'" in msg and "install PyYAML into that venv" in msg
    plan(kimi_params(mdir), broken)  # loopback, no key: no --config, nothing to refuse


def test_beyond_loopback_without_api_key_is_refused(mdir):
    msg = one(refusal(kimi_params(mdir, host="10.0.0.5", api_key=False), D23))
    assert msg.startswith("host 10.0.0.5 listens beyond loopback but api_key is false")


def test_hybrid_kv_counts_only_full_attention_layers(mdir):
    target = model.inspect_model(mdir["qwen"])
    assert fitmod.attention_layers(target) == 16
    cfg = copy.deepcopy(models.QWEN36_CONFIG)
    del cfg["text_config"]["layer_types"]
    assert fitmod.attention_layers(model.inspect_model(models.write_model(mdir["root"] + "/q2", cfg, 10))) == 16
