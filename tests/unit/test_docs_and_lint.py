# SPDX-License-Identifier: Apache-2.0
"""Every module renders with ansible-doc, every role has argument_specs, and ansible-lint's
production profile passes on the whole collection."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py") if not p.stem.startswith("_"))
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())


def tool(*argv, timeout=300):
    # Lint's syntax checks run without an inventory; ansible.cfg makes an unparsed
    # inventory fatal (for a sandbox that is not up), which does not apply to them.
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_INVENTORY_UNPARSED_FAILED="false",
               PATH=str(BIN) + os.pathsep + os.environ["PATH"])
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_the_four_modules_exist():
    assert {"hf_token", "hf_gated_access", "hf_download", "sglang_service"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_renders_module(module):
    res = tool("ansible-doc", "--json", "ct200.deploy." + module)
    assert res.returncode == 0, res.stderr
    import json
    doc = json.loads(res.stdout)["ct200.deploy." + module]
    assert doc["doc"]["short_description"] and doc["examples"].strip() and doc["return"]
    for name, opt in doc["doc"]["options"].items():
        assert opt.get("description"), "%s: option %s has no description" % (module, name)


@pytest.mark.parametrize("role", ROLES)
def test_role_has_argument_specs_that_render(role):
    spec = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    assert spec["argument_specs"]["main"]["options"]
    res = tool("ansible-doc", "-t", "role", "ct200.deploy." + role)
    plain = re.sub(r"\x1b\[[0-9;]*m|\*", "", res.stdout)
    assert res.returncode == 0 and "ENTRY POINT: main" in plain, res.stderr
    for option in spec["argument_specs"]["main"]["options"]:
        assert option in plain, "%s: %s missing from ansible-doc" % (role, option)


def test_ansible_lint_production_profile():
    res = tool("ansible-lint", "--profile", "production", "--offline", timeout=900)
    assert res.returncode == 0, (res.stdout + res.stderr)[-5000:]


def test_ansible_test_sanity(tmp_path):
    """ansible-test sanity on the whole collection: validate-modules (DOCUMENTATION, argument_spec
    and RETURN agree, no_log where an option looks secret), import, pep8, pylint, yamllint of the
    docs, shebangs (ignores, with reasons, in tests/sanity/ignore-2.19.txt). It needs the
    collection at ansible_collections/NS/NAME in a git tree, so the tracked files are copied
    there, next to the community.docker it depends on."""
    import shutil

    import ansible_collections.community.docker as community_docker

    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.split("\n")
    root = tmp_path / "ansible_collections"
    dest = root / "ct200" / "deploy"
    for rel in filter(None, listed):
        src = REPO / rel
        if rel.startswith("collections/") or not src.is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
    (root / "community").mkdir()
    (root / "community" / "docker").symlink_to(Path(community_docker.__path__[0]))
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    # a private HOME keeps ansible-test's venv cache in the checkout and holds the pip bootstrap
    home = REPO / ".cache" / "ansible-test-home"
    cache = home / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / "tests" / "support" / "ansible_test_get_pip.py", cache / ("get_pip_%s.py" % _ansible_test_pip().replace(".", "_")))
    env = dict(os.environ, HOME=str(home), PATH=str(BIN) + os.pathsep + os.environ["PATH"])
    env.pop("ANSIBLE_CONFIG", None)
    res = subprocess.run([str(BIN / "ansible-test"), "sanity", "--python", "%d.%d" % sys.version_info[:2]],
                         cwd=dest, env=env, capture_output=True, text=True, timeout=1500, check=False)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    for test in ("validate-modules", "import", "pep8", "pylint", "yamllint"):
        assert 'Running sanity test "%s"' % test in out, out[-3000:]


def _ansible_test_pip():
    """The pip version ansible-test bootstraps its sanity venvs with (it names the cached script)."""
    import ansible_test

    source = (Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
    return re.search(r"pip='([0-9.]+)'", source).group(1)
