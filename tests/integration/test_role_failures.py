# SPDX-License-Identifier: Apache-2.0
"""The roles run their module with no_log and failed_when: false, then re-raise the module's own
message. These runs prove a module failure still fails the role, with the cause in the output
(regression: a reset 'failed' flag once let both roles pass silently)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
    hf_client_venv: %(venv)s
    hf_client_pip_extra_args: "--no-index --find-links %(wheels)s"
  tasks:
    - name: Role under test
      ansible.builtin.include_role:
        name: %(role)s
      vars:
%(vars)s
"""


def run_role(tmp_path, role, role_vars, timeout=300):
    body = "\n".join("        %s: %s" % (k, v) for k, v in role_vars.items())
    play = tmp_path / "play.yml"
    play.write_text(PLAY % {"venv": tmp_path / "venv", "wheels": REPO / ".cache" / "wheelhouse", "role": role,
                            "vars": body})
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_INVENTORY_UNPARSED_FAILED="false")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    proc = subprocess.run(["ansible-playbook", str(play)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_hf_token_role_fails_on_a_refused_token_and_writes_nothing(tmp_path):
    path = tmp_path / "hf" / "token"
    rc, out = run_role(tmp_path, "ct200.deploy.hf_token", {
        "hf_token_value": '"hf_abc\\ndef"', "hf_token_path": str(path), "hf_token_validate": "false",
        "hf_token_owner": "root"})
    assert rc != 0, out[-3000:]
    assert "contains a newline" in out and "nothing was written" in out
    assert not path.exists()


def test_hf_gated_access_role_fails_when_the_hub_is_unreachable(tmp_path):
    rc, out = run_role(tmp_path, "ct200.deploy.hf_gated_access", {
        "hf_gated_access_endpoint": "http://127.0.0.1:9",
        "hf_gated_access_token": "hf_" + "x" * 34,
        "hf_gated_access_repos": "[{repo_id: moonshotai/Kimi-K2.6}]"})
    assert rc != 0, out[-3000:]
    assert "127.0.0.1:9" in out and "x" * 34 not in out


FAKE_NVIDIA_SMI = """#!/bin/sh
# TEST ONLY: a host with %(count)d GPUs and driver %(driver)s (the GPU is the one thing we mock)
case "$1" in
  --query-gpu=*) i=0; while [ $i -lt %(count)d ]; do
      echo "$i, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887, 00000000:1$i:00.0, %(driver)s"; i=$((i+1)); done ;;
  *) echo "| NVIDIA-SMI %(driver)s    Driver Version: %(driver)s    CUDA Version: %(cuda)s |" ;;
esac
"""


def fake_nvidia_smi(tmp_path, count, driver="580.95.05", cuda="13.0"):
    path = tmp_path / ("nvidia-smi-%d-%s" % (count, driver))
    path.write_text(FAKE_NVIDIA_SMI % {"count": count, "driver": driver, "cuda": cuda})
    path.chmod(0o755)
    return path


def runtime_vars(tmp_path, **over):
    role_vars = {"sglang_runtime_venv": str(tmp_path / "sglang-venv"), "sglang_runtime_apt_packages": "[]",
                 "sglang_runtime_cache_dir": str(tmp_path / "cache")}
    role_vars.update(over)
    role_vars.setdefault("sglang_runtime_nvidia_smi", str(fake_nvidia_smi(tmp_path, 8)))
    return role_vars


def test_sglang_runtime_refuses_an_unreachable_wheelhouse_before_installing(tmp_path):
    rc, out = run_role(tmp_path, "ct200.deploy.sglang_runtime", runtime_vars(
        tmp_path, sglang_runtime_wheelhouse=str(tmp_path / "no-wheelhouse"), sglang_runtime_allow_no_gpu="true"))
    assert rc != 0, out[-3000:]
    assert "[sglang_runtime] SGLang 0.5.23 is not installed" in out
    assert "no-wheelhouse" in out and "fix: make wheelhouse" in out
    assert not (tmp_path / "sglang-venv").exists()  # refused before the venv


def test_sglang_runtime_refuses_too_few_gpus_naming_the_numbers(tmp_path):
    rc, out = run_role(tmp_path, "ct200.deploy.sglang_runtime", runtime_vars(
        tmp_path, sglang_runtime_nvidia_smi=str(fake_nvidia_smi(tmp_path, 4)), sglang_runtime_gpus_needed=8,
        sglang_runtime_wheelhouse=str(REPO / ".cache" / "sglang-wheelhouse-0.5.23-cpu")))
    assert rc != 0, out[-3000:]
    assert "[gpus] 4 GPU(s) found, the instances need 8" in out
    assert not (tmp_path / "sglang-venv").exists()


def test_sglang_runtime_refuses_an_old_driver_with_the_numbers(tmp_path):
    rc, out = run_role(tmp_path, "ct200.deploy.sglang_runtime", runtime_vars(
        tmp_path, sglang_runtime_nvidia_smi=str(fake_nvidia_smi(tmp_path, 8, driver="570.133.20", cuda="12.8")),
        sglang_runtime_gpus_needed=8))
    assert rc != 0, out[-3000:]
    assert "NVIDIA driver 570.133.20 is older than 580.65.06" in out
    assert "the driver supports CUDA 12.8, SGLang 0.5.23 needs CUDA 13.0" in out


def test_sglang_runtime_refuses_a_host_without_gpus_unless_it_is_a_sandbox(tmp_path):
    rc, out = run_role(tmp_path, "ct200.deploy.sglang_runtime", runtime_vars(
        tmp_path, sglang_runtime_nvidia_smi=str(tmp_path / "absent-nvidia-smi")))
    assert rc != 0, out[-3000:]
    assert "[gpus] no NVIDIA GPU found (nvidia-smi absent)" in out
    assert "sglang_runtime_allow_no_gpu: true" in out


def venv_view(tmp_path):
    """A venv whose site-packages are the CPU SGLang 0.5.23 venv's (read, never installed into: the stamp says
    the pinned set is there, so the role's install step is skipped)."""
    real = REPO / ".cache" / "sglang-venv-0.5.23"
    if not (real / "bin" / "python").exists():
        pytest.skip("no SGLang 0.5.23 parse venv at %s" % real)
    view = tmp_path / "sglang-venv"
    (view / "bin").mkdir(parents=True)
    (view / "pyvenv.cfg").write_text((real / "pyvenv.cfg").read_text())
    (view / "bin" / "python").symlink_to(os.path.realpath(real / "bin" / "python"))
    (view / "lib").symlink_to(real / "lib")
    (view / ".ct200-sglang-runtime").write_text(
        '{"version": "0.5.23", "packages": ["sglang==0.5.23"], "requirements_sha256": null}')
    return view


def test_sglang_runtime_proof_fails_the_role_on_a_cpu_torch_and_passes_the_standin_unproven(tmp_path):
    view = venv_view(tmp_path)
    common = {"sglang_runtime_venv": str(view), "sglang_runtime_fail_on_preflight": "false",
              "sglang_runtime_cuda_home": str(tmp_path / "no-cuda")}
    # three runs of the CPU venv's own python (SGLang's parser twice, the proof once): ~60 s idle, minutes when busy
    rc, out = run_role(tmp_path, "ct200.deploy.sglang_runtime", runtime_vars(tmp_path, **common), timeout=1200)
    assert rc != 0, out[-3000:]
    assert "Install | pip install" not in out or "skipping" in out.split("Install | pip install")[1][:300]
    flat = " ".join(out.split())  # the callback wraps long messages
    assert "does not work on this host" in flat and "[torch_cuda] torch 2.13.0+cpu is a CPU build" in flat
    assert "[pip_check] pip check finds the installed set inconsistent" in flat
    assert not (view / ".ct200-sglang-runtime-proven").exists()
    rc, out = run_role(tmp_path, "ct200.deploy.sglang_runtime", runtime_vars(
        tmp_path, sglang_runtime_nvidia_smi=str(tmp_path / "absent-nvidia-smi"), sglang_runtime_allow_no_gpu="true",
        **common), timeout=1200)
    assert rc == 0, out[-3000:]
    assert "torch_cuda: NOT PROVEN (not proven: CPU stand-in" in " ".join(out.split())
    assert (view / ".ct200-sglang-runtime-proven").read_text() == (view / ".ct200-sglang-runtime").read_text()


TAGGED_PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  roles:
    - role: %(role)s
      vars:
%(vars)s
"""


def run_role_tag(tmp_path, role, role_vars, tag):
    """The role as a play's role (how a user's playbook runs it), with one sub-tag selected."""
    body = "\n".join("        %s: %s" % (k, v) for k, v in role_vars.items())
    play = tmp_path / "tagged-play.yml"
    play.write_text(TAGGED_PLAY % {"role": role, "vars": body})
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_INVENTORY_UNPARSED_FAILED="false")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    proc = subprocess.run(["ansible-playbook", str(play), "--tags", tag], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_hf_token_configure_tag_alone_never_installs_an_unvalidated_token(tmp_path, local_hub):
    """Regression: `--tags configure` skipped the validation task and installed with validate: false."""
    from localhub.personas import token_for

    path = tmp_path / "hf" / "token"
    role_vars = {"hf_token_path": str(path), "hf_token_owner": "root", "hf_token_endpoint": local_hub.url,
                 "hf_token_python": "'{{ ansible_playbook_python }}'"}
    rc, out = run_role_tag(tmp_path, "ct200.deploy.hf_token", dict(role_vars, hf_token_value=token_for("invalid")),
                           "hf_token_configure")
    assert rc != 0, out[-3000:]
    assert "token not installed on any host" in out and token_for("invalid") not in out
    assert not path.exists()
    rc, out = run_role_tag(tmp_path, "ct200.deploy.hf_token", dict(role_vars, hf_token_value=token_for("granted")),
                           "hf_token_configure")
    assert rc == 0, out[-3000:]
    assert path.read_text().strip() == token_for("granted")


def test_sglang_service_run_tag_alone_refuses_an_instance_without_its_unit(tmp_path):
    rc, out = run_role_tag(tmp_path, "ct200.deploy.sglang_service", {
        "sglang_service_unit_dir": str(tmp_path / "units"), "sglang_service_state_dir": str(tmp_path / "state"),
        "sglang_service_instances": "[{name: nounit, target: /models/none, port: 30097}]"}, "sglang_service_run")
    assert rc != 0, out[-3000:]
    assert "sglang@nounit.service is not installed" in out
    assert "--tags sglang_service_configure,sglang_service_run" in out
