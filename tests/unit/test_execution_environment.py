# SPDX-License-Identifier: Apache-2.0
"""An execution environment for AWX/AAP can be built from the collection: its meta/ files name
the controller's Python and system dependencies with ranges only, ansible-builder finds them in
an installed collection, and `ansible-builder create` (no image, offline) writes them into the
build context."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_collection_build import _build, _copy_tree

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GALAXY = str(BIN / "ansible-galaxy")
BUILDER = str(BIN / "ansible-builder")
META = REPO / "meta"
REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)(?P<spec>(?:[<>!=~]=?[^,;\s]+,?)+)\s*(?:#.*)?$")


def _lines(path):
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def _pyproject_dependencies():
    text = (REPO / "pyproject.toml").read_text()
    block = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    specs = {}
    for quoted in re.findall(r'"([^"]+)"', block):
        match = REQUIREMENT.match(quoted)
        specs[match.group("name").lower()] = match.group("spec")
    return specs


def test_meta_points_at_files_that_exist():
    ee = yaml.safe_load((META / "execution-environment.yml").read_text())
    assert ee["version"] == 1
    for kind in ("python", "system"):
        assert (REPO / ee["dependencies"][kind]).is_file(), kind


def test_python_requirements_are_ranges_that_match_the_tested_ones():
    tested = _pyproject_dependencies()
    lines = _lines(META / "requirements.txt")
    assert lines
    for line in lines:
        match = REQUIREMENT.match(line)
        assert match, line
        assert "==" not in line, "no pins: %s" % line
        assert "<" in match.group("spec") and ">=" in match.group("spec"), "a range with both bounds: %s" % line
        # One range per dependency: what the EE installs is what the suite ran on.
        assert tested.get(match.group("name").lower()) == match.group("spec"), line


def test_runtime_requires_the_tested_ansible_core():
    runtime = yaml.safe_load((META / "runtime.yml").read_text())
    assert runtime["requires_ansible"].replace(" ", "") == _pyproject_dependencies()["ansible-core"].replace(
        "2.19.14", "2.19.0")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The tarball an operator gets, installed the way AWX installs it (offline: no dependencies)."""
    src = _copy_tree(tmp_path_factory.mktemp("src") / "deploy")
    out = tmp_path_factory.mktemp("out")
    _build(src, out)
    (tarball,) = out.glob("ct200-deploy-*.tar.gz")
    dest = tmp_path_factory.mktemp("collections")
    # Not the checkout's ansible.cfg: its collections path already holds ct200.deploy (a symlink to
    # the checkout), and ansible-galaxy would report "already installed" and install nothing.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_COLLECTIONS_PATH"] = str(dest)
    proc = subprocess.run([GALAXY, "collection", "install", "--offline", str(tarball), "-p", str(dest)],
                          cwd=dest, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert (dest / "ansible_collections" / "ct200" / "deploy" / "meta" / "execution-environment.yml").is_file()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tarball, dest


def test_builder_introspection_finds_the_collection_dependencies(installed):
    dest = installed[1]
    proc = subprocess.run([BUILDER, "introspect", "--sanitize", str(dest)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = yaml.safe_load(proc.stdout)
    python = [entry.split("#")[0].strip() for entry in found["python"]]
    system = [entry.split("#")[0].strip() for entry in found["system"]]
    assert python == _lines(META / "requirements.txt")
    assert system == [line.split("#")[0].strip() for line in _lines(META / "bindep.txt")]
    assert all("from collection ct200.deploy" in entry for entry in found["python"] + found["system"])


def test_builder_create_writes_a_context_naming_the_dependencies(installed, tmp_path):
    tarball = installed[0]
    definition = {
        "version": 3,
        "images": {"base_image": {"name": "quay.io/fedora/python-311:latest"}},
        "dependencies": {
            "ansible_core": {"package_pip": "ansible-core" + _pyproject_dependencies()["ansible-core"]},
            "ansible_runner": {"package_pip": "ansible-runner" + _pyproject_dependencies()["ansible-runner"]},
            "python": str(META / "requirements.txt"),
            "system": str(META / "bindep.txt"),
            "galaxy": {"collections": [{"name": str(tarball), "type": "file"}]},
        },
    }
    (tmp_path / "execution-environment.yml").write_text(yaml.safe_dump(definition))
    context = tmp_path / "context"
    proc = subprocess.run([BUILDER, "create", "-f", "execution-environment.yml", "--context", str(context),
                           "--output-filename", "Containerfile"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    build = context / "_build"
    assert "huggingface_hub>=2.4.0,<2.5" in (build / "requirements.txt").read_text()
    assert "openssh-client [platform:dpkg]" in (build / "bindep.txt").read_text()
    galaxy = yaml.safe_load((build / "requirements.yml").read_text())
    assert galaxy["collections"][0]["type"] == "file"
    containerfile = (context / "Containerfile").read_text()
    assert "requirements.txt" in containerfile and "bindep.txt" in containerfile
