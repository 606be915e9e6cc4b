# SPDX-License-Identifier: Apache-2.0
"""Every validation refusal: the spec is refused before rendering, with the numbers and the fix."""
import copy

import pytest

import models
from conftest import kimi_params, plan, qwen_ddtree_params, real_dialect, refusal
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_flags as flags
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_spec as specmod

D23 = real_dialect("0.5.23")
D11 = real_dialect("0.5.11")
PR = real_dialect("0.5.23", ["--speculative-ddtree-budget"], ["DDTREE"])
FORK = real_dialect("0.5.23", ["--speculative-dflash-enable-ddtree"])
RTX = [{"index": i, "memory_mib": 97887.0, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"} for i in range(8)]


def one(problems):
    assert len(problems) == 1, problems
    return problems[0]


# -- memory ------------------------------------------------------------------
def test_kimi_tp4_on_96_gib_gpus_is_refused_with_numbers_and_fix(mdir):
    msg = one(refusal(kimi_params(mdir, tp=4, gpus=[0, 1, 2, 3]), D23))
    assert msg == ("weights 151.9 GB per GPU (148.0 GB sharded + 3.1 GB replicated on every rank + 0.8 GB drafter) "
                   "at tp 4 > 85.6 GB usable per GPU (96 GiB - 2.25 GiB runtime reserve, x mem_fraction_static 0.85), "
                   "leaving no KV cache (0 tokens for a 65536-token context_length request); use tp 8 "
                   "(77.5 GB per GPU)")


def test_kimi_tp8_fits(mdir):
    spec, resolved, argv = plan(kimi_params(mdir), D23)
    assert "--tp-size" in argv and argv[argv.index("--tp-size") + 1] == "8"
    assert resolved.gpus == list(range(8))


def test_memory_from_nvidia_smi_when_gpu_memory_gib_is_omitted(mdir):
    msg = one(refusal(kimi_params(mdir, tp=4, gpus=[0, 1, 2, 3], gpu_memory_gib=None), D23, detected=RTX))
    assert "(95.59 GiB - 2.25 GiB runtime reserve, x mem_fraction_static 0.85)" in msg and "use tp 8" in msg


def test_model_that_fits_nowhere(mdir):
    msg = one(refusal(kimi_params(mdir, gpu_memory_gib=24), D23))
    assert "> 19.9 GB usable per GPU (24 GiB - 2.25 GiB runtime reserve, x mem_fraction_static 0.85)" in msg
    assert "does not fit even on 8 GPUs" in msg


def test_without_gpu_memory_and_without_nvidia_smi(mdir):
    msg = one(refusal(kimi_params(mdir, gpu_memory_gib=None), D23))
    assert msg.startswith("gpu_memory_gib is not set and nvidia-smi found no GPU; set gpu_memory_gib")


def test_weights_summed_from_shards_when_there_is_no_index(tmp_path, mdir):
    target = models.write_model(str(tmp_path / "noindex"), copy.deepcopy(models.QWEN36_CONFIG),
                                shard_sizes=[3 * 10 ** 9, 3 * 10 ** 9])
    msg = one(refusal(dict(name="q", target=target, tp=1, gpu_memory_gib=8), D23))
    assert msg.startswith("weights 6.0 GB per GPU (5.1 GB sharded + 0.9 GB replicated on every rank) at tp 1 > 5.2 GB "
                          "usable")


# -- tp / GPUs -----------------------------------------------------------------
@pytest.mark.parametrize("over, expected", [
    (dict(tp=5, gpus=None), "tp 5 does not divide the target's 24 attention heads; use a tp from [1, 2, 3, 4, 6, 8]"),
    (dict(tp=4, gpus=[0, 1, 2, 3, 4, 5]), "tp 4 x pp 1 = 4 GPUs per replica does not divide the 6 GPUs in gpus"),
    (dict(tp=4, gpus=list(range(8))), "tp 4 x pp 1 uses only 4 of the 8 GPUs in gpus [0, 1, 2, 3, 4, 5, 6, 7]; "
                                      "list exactly 4 GPUs"),
    (dict(tp=4, gpus=[0, 1]), "tp 4 x pp 1 = 4 GPUs per replica does not divide the 2 GPUs"),
    (dict(tp=2, gpus=[1, 1]), "gpus [1, 1] lists a GPU twice"),
])
def test_gpu_and_tp_refusals(mdir, over, expected):
    params = qwen_ddtree_params(mdir, **over)
    if params["gpus"] is None:
        del params["gpus"]
    assert expected in one(refusal(params, PR))


def test_gpu_not_on_host(mdir):
    detected = RTX[:4]
    msg = one(refusal(qwen_ddtree_params(mdir, gpus=[4, 5, 6, 7]), PR, detected=detected))
    assert msg == "gpus [4, 5, 6, 7] are not on this host (nvidia-smi shows [0, 1, 2, 3]); fix the gpus list"


# -- DDTree --------------------------------------------------------------------
@pytest.mark.parametrize("budget", [32, 64])
def test_ddtree_tree_budget_on_hybrid_target_refused(mdir, budget):
    params = qwen_ddtree_params(mdir)
    params["speculative"]["ddtree_budget"] = budget
    msg = one(refusal(params, PR))
    assert msg.startswith("speculative.ddtree_budget %d > block_size-1 = 15 on hybrid target" % budget)
    assert "leaks between tree paths" in msg and "use ddtree_budget <= 15 (spine mode" in msg
    assert "allow_hybrid_tree: true" in msg and "layer_types contains linear_attention" in msg


def test_ddtree_tree_budget_on_hybrid_allowed_explicitly(mdir):
    params = qwen_ddtree_params(mdir)
    params["speculative"].update(ddtree_budget=32, allow_hybrid_tree=True)
    spec, resolved, argv = plan(params, PR)
    assert argv[argv.index("--speculative-ddtree-budget") + 1] == "32"
    assert any("accepted by allow_hybrid_tree" in w for w in resolved.warnings)


def test_ddtree_spine_budget_on_hybrid_is_fine_and_default_is_block_minus_one(mdir):
    params = qwen_ddtree_params(mdir)
    del params["speculative"]["ddtree_budget"]
    spec, resolved, argv = plan(params, PR)
    assert resolved.ddtree_budget == 15


def test_ddtree_tree_budget_on_pure_attention_target_is_allowed(mdir):
    params = kimi_params(mdir, speculative={"algorithm": "ddtree", "ddtree_budget": 32})
    spec, resolved, argv = plan(params, PR)
    assert resolved.ddtree_budget == 32


def test_ddtree_on_a_release_without_ddtree_names_the_version(mdir):
    msg = one(refusal(qwen_ddtree_params(mdir), D23))
    assert msg.startswith("SGLang 0.5.23 has no DDTree: its parser knows neither --speculative-ddtree-budget")
    assert "DDTree is in no SGLang release" in msg and "use algorithm dflash" in msg


def test_ddtree_on_0511_names_the_version(mdir):
    assert one(refusal(qwen_ddtree_params(mdir), D11)).startswith("SGLang 0.5.11 has no DDTree")


def test_ddtree_dialect_must_match_the_build(mdir):
    params = qwen_ddtree_params(mdir)
    params["speculative"]["ddtree_dialect"] = "fork"
    assert one(refusal(params, PR)) == ("speculative.ddtree_dialect fork does not match the installed build, "
                                        "whose parser speaks pr29907; set ddtree_dialect auto or pr29907")


def test_ddtree_budget_below_one(mdir):
    params = qwen_ddtree_params(mdir)
    params["speculative"]["ddtree_budget"] = 0
    assert one(refusal(params, PR)) == "speculative.ddtree_budget 0 must be >= 1 (default: block_size-1 = 15)"


def test_build_without_dflash_names_the_version(mdir):
    data = {"version": "0.5.10.post1", "algorithms": ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"],
            "actions": [{"options": [o], "dest": o[2:].replace("-", "_"), "choices": None, "takes_value": True}
                        for o in specmod.MANAGED_FLAGS]}
    old = flags.dialect_from_manifest(data, "test")
    msg = one(refusal(kimi_params(mdir, extra_args=[]), old))
    assert msg.startswith("SGLang 0.5.10.post1 has no DFLASH speculative algorithm")
    assert "first shipped in 0.5.11: upgrade SGLang" in msg


# -- drafter ---------------------------------------------------------------------
def test_draft_required(mdir):
    assert one(refusal(kimi_params(mdir, draft=None), D23)) == (
        "speculative.algorithm dflash needs draft: the local directory of the DFlash drafter")


def test_draft_that_is_not_dflash(tmp_path, mdir):
    plain = models.write_model(str(tmp_path / "Qwen3-0.6B"),
                               {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 248320})
    msg = one(refusal(qwen_ddtree_params(mdir, draft=plain), PR))
    assert msg == ("draft %s is not a DFlash drafter: its config.json has no dflash_config and its architectures "
                   "['Qwen3ForCausalLM'] are not DFlash; point draft at a DFlash checkpoint (e.g. z-lab/*-DFlash)"
                   % plain)


def test_block_size_must_match_the_drafter(mdir):
    params = kimi_params(mdir)
    params["speculative"]["block_size"] = 8
    msg = one(refusal(params, D23))
    assert msg == ("speculative.block_size 8 does not match the drafter's block size 16 (%s/config.json); a "
                   "DFlash drafter is trained for one block size: remove block_size or set 16" % mdir["kimi_draft"])


def test_drafter_of_another_model(mdir):
    problems = refusal(kimi_params(mdir, draft=mdir["qwen_draft"]), D23)
    assert any("has vocab_size 248320 but the target has 163840" in p for p in problems)
    assert any("reads target layers [1, 16, 31, 46, 61] but the target has only 61 layers" in p for p in problems)


def test_drafter_built_for_other_layer_count(tmp_path, mdir):
    draft = models.kimi_draft(tmp_path, "d2", dflash_config={"num_target_layers": 48, "target_layer_ids": [1, 2]})
    msg = one(refusal(kimi_params(mdir, draft=draft), D23))
    assert "was built for a 48-layer target but" in msg and "has 61 layers" in msg


def test_pp_with_dflash(mdir):
    msg = one(refusal(kimi_params(mdir, tp=4, pp=2), D23))
    assert msg.startswith("pp 2 with speculative dflash: SGLang's DFLASH (and DDTree, built on it) supports only "
                          "pp_size 1")


@pytest.mark.parametrize("spec_over, expected", [
    ({"algorithm": "none"}, "draft %(d)s is given but speculative.algorithm is none"),
    ({"algorithm": "dflash", "ddtree_budget": 4}, "speculative.ddtree_budget is only for algorithm ddtree"),
    ({"algorithm": "dflash", "draft_window_size": 8},
     "speculative.draft_window_size 8 is smaller than the block size 16; SGLang requires window >= block size: use >= 16"),
])
def test_speculative_option_combinations(mdir, spec_over, expected):
    msg = one(refusal(kimi_params(mdir, speculative=spec_over, extra_args=[]), D23))
    assert (expected % {"d": mdir["kimi_draft"]}) in msg


def test_block_size_without_algorithm(mdir):
    msg = one(refusal(dict(name="q", target=mdir["qwen"], speculative={"block_size": 16}, gpu_memory_gib=96), D23))
    assert msg.startswith("speculative.block_size is set but speculative.algorithm is none")


# -- instances on the same host ------------------------------------------------------
def test_port_and_gpus_disjoint_across_instances(mdir):
    peers = [{"name": "qwen-b", "port": 30000, "gpus": [3, 4], "source": "/etc/sglang/qwen-b.env"}]
    problems = refusal(qwen_ddtree_params(mdir), PR, peers=peers)
    assert problems == [
        "port 30000 is already used by instance 'qwen-b' (/etc/sglang/qwen-b.env); give each instance its own "
        "port and nccl_port",
        "GPUs 3 are already assigned to instance 'qwen-b' (/etc/sglang/qwen-b.env); give each instance a "
        "disjoint gpus list",
    ]


def test_disjoint_instances_pass(mdir):
    peers = [{"name": "qwen-b", "port": 30001, "gpus": [4, 5, 6, 7]}, {"name": "qwen-a", "port": 30000, "gpus": [0]}]
    plan(qwen_ddtree_params(mdir), PR, peers=peers)  # itself (same name) is ignored


# -- flags and parser choices --------------------------------------------------------
def test_extra_args_cannot_override_managed_flags(mdir):
    assert one(refusal(kimi_params(mdir, extra_args=["--tp-size", "4"]), D23)) == (
        "extra_args sets --tp-size, which the spec renders from option tp; set that option instead")


def test_extra_args_unknown_to_the_installed_parser(mdir):
    msg = one(refusal(kimi_params(mdir, extra_args=["--cuda-graph-bs", "8", "--watchdog-timeout=600"]), D23))
    assert msg.startswith("extra_args --cuda-graph-bs: unknown to SGLang 0.5.23's parser")


def test_extra_args_known_to_0511_but_not_0523(mdir):
    plan(kimi_params(mdir, extra_args=["--disable-cuda-graph-padding"]), D11)
    assert "--enable-dp-lm-head" in D23.options


@pytest.mark.parametrize("args, expected", [
    ([";"], "extra_args has a lone ';'"),
    (["--x\n--y"], "contains a newline, NUL or other control character"),
])
def test_extra_args_that_systemd_cannot_carry(mdir, args, expected):
    problems = refusal(kimi_params(mdir, extra_args=args), flags.static_dialect("0.5.23"))
    assert any(expected in p for p in problems), problems


def test_parser_choices_are_checked(mdir):
    msg = one(refusal(kimi_params(mdir, tool_call_parser="kimi-k2"), D23))
    assert msg.startswith("tool_call_parser 'kimi-k2' is not accepted by SGLang 0.5.23; choose one of: auto,")
    assert "kimi_k2" in msg


def test_mla_backend_that_fails_on_sm120(mdir):
    msg = one(refusal(kimi_params(mdir, attention_backend="trtllm_mla", gpu_memory_gib=None), D23, detected=RTX))
    assert msg.startswith("attention_backend trtllm_mla fails with 'Unsupported architecture' on SM120")
    assert "use attention_backend triton" in msg


def test_nvfp4_on_sm120(tmp_path, mdir):
    cfg = copy.deepcopy(models.KIMI_CONFIG)
    cfg["text_config"]["quantization_config"] = {"quant_method": "modelopt_fp4"}
    target = models.write_model(str(tmp_path / "nvfp4"), cfg, 400 * 10 ** 9)
    msg = one(refusal(kimi_params(mdir, target=target, gpu_memory_gib=None), D23, detected=RTX))
    assert "NVFP4 gives NaN there" in msg


def test_no_buffer_mamba_with_spec_on_0511(mdir):
    params = qwen_ddtree_params(mdir, speculative={"algorithm": "dflash"}, mamba_strategy="no_buffer")
    msg = one(refusal(params, D11))
    assert msg.startswith("mamba_strategy no_buffer with speculative decoding and the radix cache raises on SGLang "
                          "0.5.11")


# -- environment: no secrets ------------------------------------------------------
@pytest.mark.parametrize("env, expected", [
    ({"HF_TOKEN": "x"}, "environment HF_TOKEN looks like a secret"),
    ({"MY_API_KEY": "x"}, "environment MY_API_KEY looks like a secret"),
    ({"NOTE": "hf_" + "a1B2" * 8}, "environment NOTE holds what looks like a Hugging Face token"),
    ({"HF_HUB_OFFLINE": "0"}, "environment HF_HUB_OFFLINE is fixed to 1 by the module"),
    ({"CUDA_VISIBLE_DEVICES": "0"}, "environment CUDA_VISIBLE_DEVICES is written by the module from gpus"),
    ({"1BAD": "x"}, "environment name '1BAD' is not a valid variable name"),
    ({"OMP_NUM_THREADS": "8\nX=1"}, "environment OMP_NUM_THREADS has a newline"),
])
def test_environment_refusals(mdir, env, expected):
    problems = refusal(kimi_params(mdir, environment=env), D23)
    assert any(p.startswith(expected) for p in problems), problems
    assert not any("a1B2a1B2" in p for p in problems)  # the value is never echoed


def test_token_in_extra_args_is_refused_and_not_echoed(mdir):
    token = "hf_" + "Zz9" * 10
    problems = refusal(kimi_params(mdir, extra_args=["--api-key", token]), D23)
    assert any("looks like a Hugging Face token" in p for p in problems)
    assert not any(token in p for p in problems)


# -- plain ranges -------------------------------------------------------------------
@pytest.mark.parametrize("over, expected", [
    (dict(name="../etc"), "name '../etc' is not a valid instance name"),
    (dict(name="a b"), "name 'a b' is not a valid instance name"),
    (dict(port=70000), "port 70000 is out of range; use 1-65535"),
    (dict(nccl_port=30000), "nccl_port 30000 equals port"),
    (dict(mem_fraction_static=1.2), "mem_fraction_static 1.2 is outside (0, 1)"),
    (dict(context_length=300000), "context_length 300000 exceeds the target's max_position_embeddings 262144; "
                                  "use <= 262144"),
    (dict(limit_nofile="lots"), "limit_nofile 'lots' is not a systemd resource limit"),
    (dict(numa_node=-1), "numa_node -1 must be >= 0"),
    (dict(read_write_paths=["var/x"]), "read_write_paths entry 'var/x' must be an absolute path"),
    (dict(start_timeout=5), "start_timeout 5 s is too short"),
    (dict(health_path="health"), "health_path 'health' must be a plain absolute URL path"),
    (dict(target=None), "target is required"),
])
def test_plain_refusals(mdir, over, expected):
    problems = refusal(kimi_params(mdir, **over), D23)
    assert any(p.startswith(expected) for p in problems), problems


def test_all_problems_are_reported_at_once(mdir):
    params = kimi_params(mdir, tp=4, gpus=[0, 1, 2, 3], port=0, environment={"HF_TOKEN": "x"})
    with pytest.raises(specmod.SpecError) as info:
        plan(params, D23)
    assert len(info.value.problems) == 3
    assert info.value.message.startswith("sglang_service refused the spec (3 problems): (1) port 0 is out of range")
