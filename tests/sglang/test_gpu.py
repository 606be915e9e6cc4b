# SPDX-License-Identifier: Apache-2.0
"""GPU detection from recorded nvidia-smi output (there is no GPU here)."""
import pytest

from conftest import kimi_params, plan, real_dialect, refusal
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_spec as specmod

# nvidia-smi --query-gpu=index,memory.total,name --format=csv,noheader,nounits on an 8x RTX PRO 6000 host
RECORDED_8X_RTX_PRO_6000 = """0, 97887, NVIDIA RTX PRO 6000 Blackwell Server Edition
1, 97887, NVIDIA RTX PRO 6000 Blackwell Server Edition
2, 97887, NVIDIA RTX PRO 6000 Blackwell Server Edition
3, 97887, NVIDIA RTX PRO 6000 Blackwell Server Edition
4, 97887, NVIDIA RTX PRO 6000 Blackwell Server Edition
5, 97887, NVIDIA RTX PRO 6000 Blackwell Server Edition
6, 97887, NVIDIA RTX PRO 6000 Blackwell Server Edition
7, 97887, NVIDIA RTX PRO 6000 Blackwell Server Edition
"""
RECORDED_MIXED = "0, 81559, NVIDIA H100 80GB HBM3\n1, 46068, NVIDIA L40S, rev A\n"


def test_parse_recorded_output():
    gpus = specmod.parse_nvidia_smi(RECORDED_8X_RTX_PRO_6000)
    assert len(gpus) == 8
    assert gpus[0] == {"index": 0, "memory_mib": 97887.0, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"}


def test_names_with_commas_stay_whole():
    assert specmod.parse_nvidia_smi(RECORDED_MIXED)[1]["name"] == "NVIDIA L40S, rev A"


@pytest.mark.parametrize("text", ["0, N/A, NVIDIA X", "garbage", "0 97887 NVIDIA"])
def test_unexpected_output_is_an_error(text):
    with pytest.raises(ValueError):
        specmod.parse_nvidia_smi(text)


def test_detected_memory_and_gpus_feed_validation(mdir):
    detected = specmod.parse_nvidia_smi(RECORDED_8X_RTX_PRO_6000)
    spec, resolved, argv = plan(kimi_params(mdir, gpu_memory_gib=None), real_dialect("0.5.23"), detected=detected)
    assert round(resolved.gpu_memory_gib, 2) == 95.59
    assert resolved.gpus == list(range(8))


def test_smallest_selected_gpu_bounds_the_memory(mdir):
    detected = specmod.parse_nvidia_smi(RECORDED_MIXED)
    plan(dict(name="m", target=mdir["qwen"], tp=1, gpus=[0], context_length=32768), real_dialect("0.5.23"),
         detected=detected)
    problems = refusal(dict(name="m", target=mdir["qwen"], tp=1, gpus=[1], context_length=32768),
                       real_dialect("0.5.23"), detected=detected)
    assert problems == ["weights 53.8 GB per GPU (52.9 GB sharded + 0.9 GB replicated on every rank) at tp 1 > 39.0 GB "
                        "usable per GPU (44.99 GiB - 2.25 GiB runtime reserve, x mem_fraction_static 0.85), leaving "
                        "no KV cache (0 tokens for a 32768-token context_length request); use tp 2 (27.4 GB per GPU)"]


# ---------------------------------------------------------------- PCIe fabric switches rendered into the env file

def _env(params, version="0.5.23", detected=None):
    from ansible_collections.ct200.deploy.plugins.module_utils import sglang_unit as unit

    spec, resolved, _argv = plan(params, real_dialect(version), detected=detected)
    return unit.parse_env_file(unit.render_env(spec, resolved.gpus, specmod.FIXED_ENV))


def test_pcie_ipc_allreduce_renders_the_sglang_switch_for_tp8_on_sm120(mdir):
    detected = specmod.parse_nvidia_smi(RECORDED_8X_RTX_PRO_6000)
    env = _env(kimi_params(mdir, gpu_memory_gib=None, pcie_ipc_allreduce=True), detected=detected)
    assert env["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1" and "NCCL_P2P_DISABLE" not in env
    env = _env(kimi_params(mdir, pcie_ipc_allreduce=True, gpu_compute_cap="12.0"))
    assert env["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1"
    assert "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" not in _env(kimi_params(mdir, gpu_compute_cap="12.0"))  # off by default


def test_pcie_ipc_allreduce_is_refused_off_its_measured_layout(mdir):
    problems = refusal(kimi_params(mdir, pcie_ipc_allreduce=True, gpu_compute_cap="9.0"), real_dialect("0.5.23"))
    assert problems == ["pcie_ipc_allreduce is offered for sm_120 GPUs only (RTX PRO 6000 Blackwell); these are "
                        "compute capability 9.0: remove pcie_ipc_allreduce"]
    problems = refusal(kimi_params(mdir, pcie_ipc_allreduce=True, gpu_compute_cap="12.0"), real_dialect("0.5.11"))
    assert any("needs SGLang >= 0.5.23" in p and "runs 0.5.11" in p for p in problems)
    problems = refusal(kimi_params(mdir, pcie_ipc_allreduce=True, gpu_compute_cap="12.0", nccl_p2p_disable=True),
                       real_dialect("0.5.23"))
    assert any("use one of the two" in p for p in problems)
    problems = refusal(dict(name="m", target=mdir["qwen"], tp=4, gpus=[0, 1, 2, 3], gpu_memory_gib=96,
                            context_length=32768, pcie_ipc_allreduce=True, gpu_compute_cap="12.0"),
                       real_dialect("0.5.23"))
    assert any("tp 8 only" in p and "tp 4" in p for p in problems)


def test_nccl_p2p_disable_is_rendered_and_not_settable_through_environment(mdir):
    assert _env(kimi_params(mdir, nccl_p2p_disable=True))["NCCL_P2P_DISABLE"] == "1"
    problems = refusal(kimi_params(mdir, environment={"NCCL_P2P_DISABLE": "1"}), real_dialect("0.5.23"))
    assert problems == ["environment NCCL_P2P_DISABLE is written by the module from nccl_p2p_disable; set that instead"]
