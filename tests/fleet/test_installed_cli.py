# SPDX-License-Identifier: Apache-2.0
"""An operator's install, outside any checkout: the collection tarball installed with
ansible-galaxy into a collections path of its own, the `ct200` command pip-installed into a venv
of its own (from the product's wheel, with no index: bootstrap keeps its dependencies in
.cache/cli-wheelhouse), then `ct200 preflight` and `ct200 deploy --check` run from a directory
that is not the checkout against the 8-host SSH fleet. The wheel and the tarball hold no test code.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from localhub.personas import token_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "unit"))
from test_collection_build import _build, _copy_tree  # noqa: E402  (the tarball exactly as shipped)

BIN = Path(sys.executable).parent
WHEELHOUSE = REPO / ".cache" / "cli-wheelhouse"
TEST_CODE = ("tests/", "localhub/", "molecule/", "benchmarks/", "scripts/", "ct200_sglang_standin/", "netlab")


def _clean_env(**extra) -> dict:
    """What an operator's shell has: no checkout on any path, no ansible.cfg of ours."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "CT200_", "HF_", "HUGGING", "MOLECULE", "PYTEST", "VIRTUAL_ENV"))
           and k != "PYTHONPATH"}
    env.update(extra)
    return env


def _run(argv, cwd, env, timeout=300):
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, (argv, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


@pytest.fixture(scope="module")
def operator(tmp_path_factory):
    """(ct200 executable, collections path, a working directory outside the checkout)."""
    if not (WHEELHOUSE / ".stamp").is_file():
        pytest.fail("no .cache/cli-wheelhouse: run scripts/bootstrap.sh (it downloads the CLI's dependencies)")
    root = tmp_path_factory.mktemp("operator")
    src = _copy_tree(root / "src" / "deploy")
    _build(src, root / "dist")
    (tarball,) = (root / "dist").glob("ct200-deploy-*.tar.gz")
    collections = root / "collections"
    env = _clean_env(ANSIBLE_COLLECTIONS_PATH=str(collections))
    _run([BIN / "ansible-galaxy", "collection", "install", "--offline", tarball, "-p", collections], root, env)
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", venv], root, env)
    pip = [venv / "bin" / "pip", "--disable-pip-version-check", "-q"]
    offline = ["--no-index", "--find-links", WHEELHOUSE]  # the build backend comes from there too
    _run([*pip, "wheel", "--no-deps", *offline, "-w", root / "dist", src], root, env, timeout=600)
    (wheel,) = (root / "dist").glob("ct200_deploy-*.whl")
    _run([*pip, "install", *offline, wheel], root, env, timeout=600)
    workdir = root / "ops"
    workdir.mkdir()
    return {"ct200": venv / "bin" / "ct200", "python": venv / "bin" / "python", "collections": collections,
            "tarball": tarball, "wheel": wheel, "cwd": workdir}


def test_wheel_and_tarball_hold_no_test_code(operator):
    with zipfile.ZipFile(operator["wheel"]) as whl:
        names = whl.namelist()
    # the wheel is the command alone: every playbook it runs (status too) is the installed collection's
    assert "ct200_fleet/cli.py" in names and not [n for n in names if n.endswith(".yml")], names
    assert sorted({n.split("/")[0] for n in names if not n.startswith("ct200_deploy-")}) == ["ct200_fleet"]
    with tarfile.open(operator["tarball"]) as tar:
        shipped = [m.name for m in tar.getmembers() if m.isfile()]
    assert "playbooks/deploy_kimi.yml" in shipped and "playbooks/status.yml" in shipped
    for banned in TEST_CODE:
        assert not [n for n in names + shipped if n.startswith(banned) or "/" + banned in n], banned


def test_the_installed_command_finds_the_installed_collection(operator):
    env = _clean_env(ANSIBLE_COLLECTIONS_PATH=str(operator["collections"]))
    probe = "import ct200_fleet; print(ct200_fleet.COLLECTION.root, ct200_fleet.COLLECTION.checkout)"
    out = _run([operator["python"], "-c", probe], operator["cwd"], env).stdout.split()
    assert Path(out[0]) == operator["collections"] / "ansible_collections" / "ct200" / "deploy"
    assert out[1] == "False"
    missing = subprocess.run([operator["python"], "-c", "import localhub"], cwd=operator["cwd"], env=env,
                             capture_output=True, text=True, check=False)
    assert missing.returncode != 0, "the test Hub is not part of the product's distribution"
    lost = subprocess.run([operator["ct200"], "status", "-i", "nowhere"], cwd=operator["cwd"],
                          env=_clean_env(ANSIBLE_COLLECTIONS_PATH=str(operator["cwd"])), capture_output=True,
                          text=True, check=False)
    assert lost.returncode != 0 and "ansible-galaxy collection install" in lost.stderr


def _fleet_env(ssh_fleet, operator, token_file: Path) -> dict:
    # the fleet's own environment (its state file for the inventory script, the Hub endpoint), nothing else
    sandbox = {k: v for k, v in ssh_fleet.fleet.env(ssh_fleet.env({"CT200_HF_TOKEN_FILE": str(token_file)})).items()
               if k.startswith("CT200_")}
    return _clean_env(ANSIBLE_COLLECTIONS_PATH=str(operator["collections"]), **sandbox)


# deploy --check on a bare fleet: check mode installs no Hub client venv, so the preflight's fit check
# cannot read the model configs; it is noted as not checked in check mode, not failed (it failed the run
# from any checkout until the site plan learnt it). The token phase is what check mode can walk after it.
@pytest.mark.parametrize("argv", [["preflight"], ["deploy", "--check", "--tags", "hf_token"]],
                         ids=["preflight", "deploy-check"])
def test_fleet_commands_run_from_outside_the_checkout(ssh_fleet, operator, tmp_path, argv):
    token_file = tmp_path / "token"
    token_file.write_text(token_for("granted") + "\n")
    token_file.chmod(0o600)
    # the hosts are shared: a rotation test before this one may have left another token (deploy reports drift)
    ssh_fleet.reset_token("granted")
    summary = tmp_path / "summary.json"
    env = _fleet_env(ssh_fleet, operator, token_file)
    proc = subprocess.run([operator["ct200"], *argv, "-i", str(REPO / "inventories" / "sandbox"),
                           "--json", str(summary)], cwd=operator["cwd"], env=env, capture_output=True,
                          text=True, timeout=1200, check=False)
    assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-2000:])
    data = json.loads(summary.read_text())
    assert data["ok"] and {h["status"] for h in data["hosts"]} == {"ok"}
    assert len(data["hosts"]) == len(ssh_fleet.hosts)
    # the playbooks ran from the installed collection, not from this checkout
    assert data["playbook"].startswith(str(operator["collections"]))
    assert os.listdir(operator["cwd"]) == [], "nothing left in the operator's directory"


@pytest.mark.parametrize("name", ["deploy_kimi", "preflight", "verify_access", "rotate_hf_token", "promote_hf_token",
                                  "token_drift", "status"])
def test_playbooks_run_by_fqcn_from_the_installed_collection(operator, name):
    """`ansible-playbook ct200.deploy.<name>`: every import and role of the playbook resolves from the
    installed collection alone (--list-tasks loads them all, and runs nothing)."""
    inventory = operator["cwd"].parent / "inventory.yml"
    inventory.write_text("ct200:\n  hosts:\n    h1:\n      ansible_connection: local\n")
    env = _clean_env(ANSIBLE_COLLECTIONS_PATH=str(operator["collections"]))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "ct200.deploy.%s" % name, "-i", str(inventory),
                           "--list-tasks"], cwd=operator["cwd"], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    installed = operator["collections"] / "ansible_collections" / "ct200" / "deploy" / "playbooks"
    assert "playbook: %s/%s.yml" % (installed, name) in proc.stdout
    assert "TAGS:" in proc.stdout
