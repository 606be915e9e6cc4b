# SPDX-License-Identifier: Apache-2.0
"""The collection tarball holds the product only, and never an operator's vault file."""

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT_DIRS = ("plugins/", "roles/", "playbooks/", "docs/", "meta/", "changelogs/")
PRODUCT_FILES = {"README.md", "LICENSE", "MANIFEST.json", "FILES.json"}
GALAXY = str(Path(sys.executable).parent / "ansible-galaxy")


def _copy_tree(dst):
    """A copy of the git-tracked tree plus what an operator or a run leaves lying around."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = REPO / rel
        if src.is_symlink() or not src.is_file():
            continue
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    return dst


def _build(src, out):
    proc = subprocess.run([GALAXY, "collection", "build", str(src), "--output-path", str(out), "--force"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tarball,) = out.glob("ct200-deploy-*.tar.gz")
    with tarfile.open(tarball) as tar:
        return [m.name for m in tar.getmembers() if m.isfile()]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    src = _copy_tree(tmp_path_factory.mktemp("src") / "deploy")
    # What the README tells an operator to create, and what runs leave behind.
    planted = ["inventories/ct200/group_vars/ct200/vault.yml", "roles/hf_token/vars/vault.yml",
               "playbooks/vault.yml", "vault.yml", "group_vars/all/vault.yml",
               "ct200_deploy.egg-info/PKG-INFO", "tests/output/junit.xml", ".cache/x"]
    for rel in planted:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("$ANSIBLE_VAULT;1.1;AES256\n00\n")
    return _build(src, tmp_path_factory.mktemp("out"))


def test_tarball_holds_product_only(built):
    stray = [name for name in built if name not in PRODUCT_FILES and not name.startswith(PRODUCT_DIRS)]
    assert stray == []
    assert "plugins/modules/hf_download.py" in built
    assert "roles/sglang_service/meta/argument_specs.yml" in built
    assert "LICENSE" in built


def test_no_vault_file_can_be_shipped(built):
    assert [name for name in built if "vault" in os.path.basename(name)] == []


def test_no_test_infrastructure_shipped(built):
    for banned in ("tests/", "molecule/", "benchmarks/", "localhub/", "scripts/", "tools/", "inventories/", ".ci/"):
        assert not [name for name in built if name.startswith(banned)], banned


def test_gitignore_covers_vault_files():
    proc = subprocess.run(["git", "check-ignore", "-q", "inventories/ct200/group_vars/ct200/vault.yml"],
                          cwd=REPO, check=False)
    assert proc.returncode == 0


def test_no_hard_dependency_on_community_docker():
    import yaml
    meta = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert not meta.get("dependencies")
