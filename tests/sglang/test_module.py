# SPDX-License-Identifier: Apache-2.0
"""The real sglang_service module, run as its own process (as Ansible runs it).

The module only plans, renders and verifies: these tests assert what it
returns and that it writes nothing. systemd-analyze is the real one;
nvidia-smi is a fake from tests/sglang/fakebin (there is no GPU here).
Installing and starting the unit is the role's job (molecule/sglang_service).
"""
import json
import os
import shutil
import sys

import pytest

from conftest import HERE, kimi_params
from modhelper import run_module_process

FAKEBIN = os.path.join(HERE, "fakebin")
ANALYZE = shutil.which("systemd-analyze")
pytestmark = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze missing (apt-get install systemd)")
CONTRACT = {"unit_name", "unit_path", "unit_content", "env_path", "env_content", "argv", "command_line",
            "health_url", "chat_url", "served_model_name", "host", "port", "dialect", "fit", "changed",
            "secret_path", "api_key", "expected_server_info"}


@pytest.fixture
def host(tmp_path):
    env = {"PATH": FAKEBIN + os.pathsep + os.path.dirname(ANALYZE) + os.pathsep + os.environ.get("PATH", "")}

    class Host(object):
        unit_dir = str(tmp_path / "units")
        env_dir = str(tmp_path / "etc-sglang")
        cache_dir = str(tmp_path / "cache")
        environ = env

        def run(self, args, **kw):
            return run_module_process("sglang_service", args, env=env, **kw)

        def files(self):
            out = {}
            for d in (self.unit_dir, self.env_dir, self.cache_dir):
                if os.path.isdir(d):
                    for name in sorted(os.listdir(d)):
                        with open(os.path.join(d, name), encoding="utf-8") as handle:
                            out[name] = handle.read()
            return out

        def install(self, result):
            """What the role does with the result (copy)."""
            for path, key in ((result["unit_path"], "unit_content"), (result["env_path"], "env_content")):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(result[key])

    return Host()


def warnings(result):
    """Warning texts (ansible-core 2.19 returns them as structured summaries)."""
    return [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", [])]


def args(where, mdir, **over):
    params = kimi_params(mdir, python=sys.executable, sglang_version="0.5.23", unit_dir=where.unit_dir,
                         env_dir=where.env_dir, cache_dir=where.cache_dir)
    params.update(over)
    return params


def test_present_returns_the_contract_and_writes_nothing(host, mdir):
    failed, result = host.run(args(host, mdir), diff=True)
    assert not failed, result.get("msg")
    assert CONTRACT <= set(result)
    assert result["changed"] is True and host.files() == {}
    assert result["unit_name"] == "sglang@kimi.service"
    assert result["unit_path"] == os.path.join(host.unit_dir, "sglang@kimi.service")
    assert result["env_path"] == os.path.join(host.env_dir, "kimi.env")
    assert result["argv"][:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert 'ExecStart=%s' % result["command_line"] in result["unit_content"]
    assert "PATH=\"%s:" % os.path.dirname(sys.executable) in result["env_content"]
    assert (result["health_url"], result["chat_url"]) == ("http://127.0.0.1:30000/health_generate",
                                                          "http://127.0.0.1:30000/v1/chat/completions")
    assert (result["served_model_name"], result["host"], result["port"]) == ("kimi-k2.6", "127.0.0.1", 30000)
    assert result["dialect"]["version"] == "0.5.23" and result["dialect"]["dflash"] is True
    assert result["fit"]["pool_tokens"] == 110581 and result["fit"]["kv_bytes_per_token"] == 70272
    assert result["api_key"] is False and "--config" not in result["argv"]
    assert result["expected_server_info"] == {"tp_size": 8, "speculative_algorithm": "DFLASH",
                                              "speculative_draft_model_path": mdir["kimi_draft"],
                                              "speculative_num_draft_tokens": 16}
    assert [d["after_header"] for d in result["diff"]] == [result["unit_path"], result["env_path"]]


def test_check_mode_is_exact(host, mdir):
    real = host.run(args(host, mdir))[1]
    check = host.run(args(host, mdir), check_mode=True)[1]
    for key in CONTRACT:
        assert check[key] == real[key], key


def test_changed_compares_with_the_files_on_disk(host, mdir):
    failed, first = host.run(args(host, mdir))
    host.install(first)
    failed, second = host.run(args(host, mdir), diff=True)
    assert not failed and second["changed"] is False and second["diff"] == []
    failed, third = host.run(args(host, mdir, context_length=32768), diff=True)
    assert third["changed"] is True and [d["after_header"] for d in third["diff"]] == [third["unit_path"]]


def test_a_symlink_at_the_unit_path_is_not_read(host, mdir, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("not a unit")
    os.makedirs(host.unit_dir)
    os.symlink(str(secret), os.path.join(host.unit_dir, "sglang@kimi.service"))
    failed, result = host.run(args(host, mdir), diff=True)
    assert not failed and result["changed"] is True
    assert "not a unit" not in json.dumps(result)
    assert any("is a symlink" in w for w in warnings(result))


def test_refused_spec_names_the_numbers(host, mdir):
    failed, result = host.run(args(host, mdir, tp=4, gpus=[0, 1, 2, 3]))
    assert failed and len(result["problems"]) == 1
    assert result["msg"].startswith("sglang_service refused the spec: weights 151.9 GB per GPU (148.0 GB sharded + "
                                    "3.1 GB replicated on every rank + 0.8 GB drafter) at tp 4 > 85.6 GB usable per GPU")
    assert result["msg"].endswith("use tp 8 (77.5 GB per GPU)")


@pytest.mark.parametrize("fraction, expected", [
    (0.74, "leaving no KV cache (0 tokens for a 262144-token context_length request)"),
    (0.85, "it holds 110581 tokens, fewer than one request of context_length 262144"),
])
def test_kimi_tp8_long_context_is_refused_naming_tokens(host, mdir, fraction, expected):
    failed, result = host.run(args(host, mdir, context_length=262144, mem_fraction_static=fraction))
    assert failed and expected in result["msg"], result["msg"]


def test_token_is_refused_and_never_echoed(host, mdir):
    token = "hf_" + "Tk7" * 11
    failed, result = host.run(args(host, mdir, environment={"OMP_NUM_THREADS": "8", "NOTE": token},
                                   extra_args=["--watchdog-timeout", token]))
    assert failed and "looks like a Hugging Face token" in result["msg"]
    assert token not in json.dumps(result) and token not in result["_stderr"]
    assert result["invocation"]["module_args"]["environment"]["NOTE"] == "<redacted>"


def test_missing_systemd_analyze_is_an_error(host, mdir):
    failed, result = run_module_process("sglang_service", args(host, mdir), env={"PATH": FAKEBIN})
    assert failed and result["msg"].startswith("systemd-analyze not found")


def test_missing_sglang_names_the_role_and_the_inventory_variable(host, mdir, tmp_path):
    missing = str(tmp_path / "venv" / "bin" / "python")
    failed, result = host.run(args(host, mdir, python=missing, sglang_version=None))
    assert failed
    assert result["msg"].startswith("SGLang is not installed on this host: %s does not exist" % missing)
    assert "ct200.deploy.sglang_runtime" in result["msg"] and "sglang_runtime_venv" in result["msg"]
    assert "set python" not in result["msg"]


def test_a_plan_before_sglang_is_installed_says_so(host, mdir, tmp_path):
    failed, result = host.run(args(host, mdir, python=str(tmp_path / "venv" / "bin" / "python")))
    assert not failed, result["msg"]
    assert any("SGLang is not installed" in w for w in warnings(result))


def test_zero_gpus_from_preflight_facts_is_refused(host, mdir):
    failed, result = host.run(args(host, mdir, gpu_count=0))
    assert failed and "this host has no GPU (gpu_count 0" in result["msg"] and "tp 8" in result["msg"]


def test_model_problem_is_reported_before_anything(host, mdir, tmp_path):
    failed, result = host.run(args(host, mdir, draft=str(tmp_path / "missing")))
    assert failed and result["msg"].startswith("draft: directory %s does not exist" % (tmp_path / "missing"))


def test_second_instance_with_the_same_port_is_refused(host, mdir):
    host.install(host.run(args(host, mdir))[1])
    failed, result = host.run(args(host, mdir, name="kimi2", gpus=[0, 1, 2, 3, 4, 5, 6, 7]))
    assert failed
    assert "port 30000 is already used by instance 'kimi' (%s/kimi.env)" % host.env_dir in result["msg"]
    assert "GPUs 0, 1, 2, 3, 4, 5, 6, 7 are already assigned to instance 'kimi'" in result["msg"]


def test_beyond_loopback_renders_the_api_key_file_never_the_key(host, mdir):
    failed, result = host.run(args(host, mdir, host="0.0.0.0"))
    assert not failed, result.get("msg")
    assert result["api_key"] is True
    secret = os.path.join(host.env_dir, "kimi.secret.yaml")
    assert result["secret_path"] == secret
    assert result["argv"][result["argv"].index("--config") + 1] == secret
    assert "--api-key" not in result["argv"] and "api" not in result["env_content"].lower()
    failed, result = host.run(args(host, mdir, host="0.0.0.0", api_key=False))
    assert failed and "listens beyond loopback but api_key is false" in result["msg"]


@pytest.mark.parametrize("name", ["../victim", "/etc/victim", "a/b", "..", "x\ny", ""])
def test_absent_validates_the_name_like_present(host, mdir, tmp_path, name):
    victim = tmp_path / "victim.env"
    victim.write_text("keep")
    failed, result = host.run({"name": name, "state": "absent", "unit_dir": host.unit_dir,
                               "env_dir": host.env_dir})
    assert failed and "is not a valid instance name" in result["msg"]
    assert victim.read_text() == "keep"


def test_absent_reports_what_exists_and_removes_nothing(host, mdir):
    host.install(host.run(args(host, mdir))[1])
    before = host.files()
    failed, result = host.run({"name": "kimi", "state": "absent", "unit_dir": host.unit_dir, "env_dir": host.env_dir})
    assert not failed and result["changed"] is True
    assert (result["unit_path"], result["env_path"]) == (os.path.join(host.unit_dir, "sglang@kimi.service"),
                                                         os.path.join(host.env_dir, "kimi.env"))
    assert host.files() == before
    failed, again = host.run({"name": "other", "state": "absent", "unit_dir": host.unit_dir, "env_dir": host.env_dir})
    assert not failed and again["changed"] is False


def test_gpu_memory_detected_with_nvidia_smi(host, mdir, tmp_path):
    from test_gpu import RECORDED_8X_RTX_PRO_6000
    recorded = tmp_path / "smi.txt"
    recorded.write_text(RECORDED_8X_RTX_PRO_6000)
    env = dict(host.environ, FAKE_NVIDIA_SMI_OUTPUT=str(recorded))
    params = args(host, mdir, gpu_memory_gib=None, tp=4, gpus=[0, 1, 2, 3])
    failed, result = run_module_process("sglang_service", params, env=env, check_mode=True)
    assert failed and "(95.59 GiB - 2.25 GiB runtime reserve, x mem_fraction_static 0.85)" in result["msg"]
    assert result["msg"].endswith("use tp 8 (77.5 GB per GPU)")
    failed, result = run_module_process("sglang_service", args(host, mdir, gpu_memory_gib=None), env=env,
                                        check_mode=True)
    assert not failed and round(result["gpu_memory_gib"], 2) == 95.59 and result["gpus"] == list(range(8))


def test_nvidia_smi_failure_needs_gpu_memory_gib(host, mdir):
    failed, result = host.run(args(host, mdir, gpu_memory_gib=None), check_mode=True)
    assert failed and "gpu_memory_gib is not set and nvidia-smi found no GPU" in result["msg"]
    assert result["gpu_detection"].startswith("nvidia-smi failed (rc 9): NVIDIA-SMI has failed")


def test_boot_order_follows_what_the_host_has(host, mdir, tmp_path):
    """Issue 15 item 1: a host with nvidia-modprobe and nvidia-persistenced gets the uvm loader unit (verified
    like the instance unit), the modules-load.d entry, and a unit ordered after both."""
    failed, bare = host.run(args(host, mdir))
    assert not failed and bare["boot"]["after"] == [] and bare["boot"]["uvm_loader_content"] is None
    assert "After=network-online.target\n" in bare["unit_content"]
    fakebin = tmp_path / "driver-bin"
    fakebin.mkdir()
    (fakebin / "nvidia-modprobe").write_text("#!/bin/sh\nexit 0\n")
    (fakebin / "nvidia-modprobe").chmod(0o755)
    os.makedirs(host.unit_dir)
    with open(os.path.join(host.unit_dir, "nvidia-persistenced.service"), "w", encoding="utf-8") as handle:
        handle.write("[Service]\nExecStart=/bin/true\n")
    env = dict(host.environ, PATH=str(fakebin) + os.pathsep + host.environ["PATH"])
    failed, result = run_module_process("sglang_service", args(host, mdir), env=env)
    assert not failed, result.get("msg")
    boot = result["boot"]
    assert boot["after"] == ["ct200-nvidia-uvm.service", "nvidia-persistenced.service"]
    assert boot["uvm_loader_path"] == os.path.join(host.unit_dir, "ct200-nvidia-uvm.service")
    assert 'ExecStart="%s" "-u" "-c=0"' % (fakebin / "nvidia-modprobe") in boot["uvm_loader_content"]
    assert boot["modules_load_path"] == "/etc/modules-load.d/ct200-nvidia-uvm.conf"
    assert boot["requires_mounts_for"] == [mdir["kimi"], mdir["kimi_draft"], os.path.dirname(os.path.dirname(
        sys.executable))]
    assert ("After=network-online.target ct200-nvidia-uvm.service nvidia-persistenced.service\n"
            in result["unit_content"])
    assert result["min_accept_length"] == 1.0 and "TimeoutStopSec=900\n" in result["unit_content"]


def test_min_accept_length_is_validated(host, mdir):
    failed, result = host.run(args(host, mdir, min_accept_length=0.5))
    assert failed and "min_accept_length 0.5 is outside [1, 64]" in result["msg"]
