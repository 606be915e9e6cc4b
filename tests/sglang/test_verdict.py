# SPDX-License-Identifier: Apache-2.0
"""Verdicts on a running instance (issue 15 items 3 and 4): the smoke answer, the drafter's accept length,
nvidia-smi --query-compute-apps and which of its processes belong to a stopped unit."""
import os

import pytest

from conftest import HERE
from modhelper import run_module_process
from ansible_collections.ct200.deploy.plugins.filter.sglang import FilterModule
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_verdict as verdict


def completion(content=None, reasoning=None, finish="length"):
    return {"object": "chat.completion", "usage": {"completion_tokens": 8},
            "choices": [{"index": 0, "finish_reason": finish,
                         "message": {"role": "assistant", "content": content, "reasoning_content": reasoning}}]}


def test_the_answer_may_be_in_reasoning_content():
    """Kimi's reasoning parser puts 8 tokens of thinking in reasoning_content and leaves content empty."""
    assert verdict.smoke_answer(completion("OK")) == ("content", "OK")
    assert verdict.smoke_answer(completion("", "The user wants")) == ("reasoning_content", "The user wants")
    assert verdict.smoke_answer(completion("  \n", "x")) == ("reasoning_content", "x")


@pytest.mark.parametrize("answer, start", [
    (completion(None, None), "the smoke completion's answer is empty: choices[0].message has neither content nor"),
    (completion("", "   "), "the smoke completion's answer is empty"),
    ({"choices": []}, "the smoke completion returned no choices"),
    ({"object": "error", "message": "x"}, "the smoke completion returned no choices (keys ['message', 'object'])"),
    ("not json", "the smoke completion returned no choices (str)"),
])
def test_an_empty_answer_fails(answer, start):
    """Before issue 15 the role only checked that choices was non-empty: completion(None, None) passed."""
    with pytest.raises(verdict.VerdictError) as info:
        verdict.smoke_answer(answer)
    assert str(info.value).startswith(start), str(info.value)


@pytest.mark.parametrize("states, floor, expected", [
    ([{"avg_spec_accept_length": 3.25, "memory_usage": {}}], 1.0, 3.25),
    ([{"avg_spec_accept_length": 6}], 4.0, 6.0),
])
def test_accept_length_above_the_floor(states, floor, expected):
    assert verdict.accept_length(states, floor, 3) == expected


@pytest.mark.parametrize("states, floor, start", [
    ([{"avg_spec_accept_length": 1.0}], 1.0, "the drafter accepts 1.00 tokens per verify step on average"),
    ([{"avg_spec_accept_length": 2.5}], 3.0, "the drafter accepts 2.50 tokens"),
    ([{"last_gen_throughput": 1.0}], 1.0, "/server_info internal_states[0] has no avg_spec_accept_length after 3"),
    ([], 1.0, "/server_info internal_states[0] has no avg_spec_accept_length"),
    (None, 1.0, "/server_info internal_states[0] has no avg_spec_accept_length"),
    ([{"avg_spec_accept_length": "3.1"}], 1.0, "/server_info internal_states[0].avg_spec_accept_length is '3.1'"),
    ([{"avg_spec_accept_length": float("nan")}], 1.0, "/server_info internal_states[0].avg_spec_accept_length is"),
    ([{"avg_spec_accept_length": True}], 1.0, "/server_info internal_states[0].avg_spec_accept_length is True"),
])
def test_a_drafter_that_accepts_nothing_fails(states, floor, start):
    with pytest.raises(verdict.VerdictError) as info:
        verdict.accept_length(states, floor, 3)
    assert str(info.value).startswith(start), str(info.value)
    if "accepts" in start:
        assert "min_accept_length" in str(info.value) and "speculative_draft_model_path" in str(info.value)


def test_readiness_only_asks_speculative_instances_for_the_drafter():
    plain = verdict.readiness(completion("OK"), [{}], "none")
    assert plain["ok"] and plain["accept_length"] is None and plain["msg"] == "answered in content"
    assert not verdict.readiness(completion("OK"), [{}], "dflash")["ok"]
    ddtree = verdict.readiness(completion(None, "hm"), [{"avg_spec_accept_length": 4.0}], "DDTREE", 1.0, 3)
    assert ddtree["ok"] and ddtree["msg"] == "answered in reasoning_content, drafter accepts 4.00 tokens per step"
    empty = verdict.readiness(completion(), [{"avg_spec_accept_length": 4.0}], "dflash")
    assert not empty["ok"] and empty["msg"].startswith("the smoke completion's answer is empty")


def test_the_role_filter_is_the_verdict():
    sglang_readiness = FilterModule().filters()["sglang_readiness"]
    assert sglang_readiness(completion("OK"), [{"avg_spec_accept_length": 2.0}], "dflash", 1.0, 3)["ok"]
    assert not sglang_readiness(completion("OK"), [{"avg_spec_accept_length": 2.0}], "dflash", 2.0, 3)["ok"]


# nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits: one "pid, MiB" line per
# process (the driver's csv format, as in gpu-fixtures/query-gpu.txt: ", " separated, [N/A] when unknown).
COMPUTE_APPS = "4242, 81234\n4243, 80912\n977, [N/A]\n"


def test_parse_compute_apps():
    assert verdict.parse_compute_apps(COMPUTE_APPS) == [
        {"pid": 4242, "used_memory_mib": 81234}, {"pid": 4243, "used_memory_mib": 80912},
        {"pid": 977, "used_memory_mib": None}]
    assert verdict.parse_compute_apps("") == [] and verdict.parse_compute_apps("No running processes found\n") == []
    with pytest.raises(verdict.VerdictError) as info:
        verdict.parse_compute_apps("pid, used_gpu_memory [MiB]\n")
    assert "cannot read nvidia-smi --query-compute-apps output line 'pid, used_gpu_memory [MiB]'" in str(info.value)


def fake_proc(tmp_path, cgroups):
    for pid, text in cgroups.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    return str(tmp_path)


def test_gpu_holders_are_the_units_processes(tmp_path):
    proc = fake_proc(tmp_path, {
        4242: "0::/system.slice/system-sglang.slice/sglang@kimi.service\n",
        # hybrid hierarchy: the unified line says "/", name=systemd names the unit
        4243: "1:name=systemd:/system.slice/system-sglang.slice/sglang@kimi.service/worker\n0::/\n",
        977: "0::/system.slice/system-sglang.slice/sglang@kimi-b.service\n",
    })
    apps = verdict.parse_compute_apps(COMPUTE_APPS + "5555, 10\n")  # 5555: gone since the query
    holders = verdict.gpu_holders(apps, "sglang@kimi.service", proc)
    assert [h["pid"] for h in holders] == [4242, 4243]
    assert verdict.gpu_holders(apps, "sglang@other.service", proc) == []
    message = verdict.release_message("sglang@kimi.service", holders)
    assert message.startswith("sglang@kimi.service is stopped but 2 of its processes still hold GPU memory: "
                              "pid 4242 (81234 MiB), pid 4243 (80912 MiB).")
    assert "raise stop_timeout" in message


def fake_smi(tmp_path, answer, rc=0):
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n[ \"$1 $2\" = \"--query-compute-apps=pid,used_memory --format=csv,noheader,nounits\" ]"
                    " || exit 7\nprintf '%%s' '%s'\nexit %d\n" % (answer, rc))
    path.chmod(0o755)
    return str(path)


def test_the_module_fails_naming_a_process_of_the_unit(tmp_path):
    """The real module on this machine's /proc: this test process stands for a leftover SGLang rank."""
    mine = verdict.cgroup_of(os.getpid())
    unit_dir = [part for part in (mine or "").split("/") if part]
    if not unit_dir:
        pytest.skip("this process sits in the root cgroup: nothing names a unit")
    smi = fake_smi(tmp_path, "%d, 81234\n" % os.getpid())
    failed, result = run_module_process("sglang_gpu_release", {"unit": unit_dir[-1], "nvidia_smi": smi, "wait": 1})
    assert failed and result["holders"][0]["pid"] == os.getpid(), result
    assert "still hold GPU memory: pid %d (81234 MiB)" % os.getpid() in result["msg"]


def test_the_module_passes_when_the_unit_let_go(tmp_path):
    smi = fake_smi(tmp_path, "%d, 81234\n" % os.getpid())
    failed, result = run_module_process("sglang_gpu_release", {"unit": "sglang@gone.service", "nvidia_smi": smi})
    assert not failed and result["checked"] and result["holders"] == [], result
    assert result["apps"] == [{"pid": os.getpid(), "used_memory_mib": 81234}]
    failed, result = run_module_process("sglang_gpu_release", {"unit": "sglang@gone.service"},
                                        env={"PATH": os.path.join(HERE, "no-such-dir")})
    assert not failed and result["checked"] is False and "not checked" in result["msg"]


def test_the_module_reports_a_failing_nvidia_smi(tmp_path):
    failed, result = run_module_process("sglang_gpu_release", {"unit": "sglang@kimi.service",
                                                               "nvidia_smi": fake_smi(tmp_path, "", 9)})
    assert failed and result["msg"].startswith("nvidia-smi failed (rc 9)")


def test_ansible_doc_renders_the_filter():
    import subprocess
    import sys
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(os.path.dirname(os.path.dirname(HERE)), "ansible.cfg"))
    doc = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    proc = subprocess.run([doc, "-t", "filter", "ct200.deploy.sglang_readiness"], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 0 and "avg_spec_accept_length" in proc.stdout, proc.stderr
