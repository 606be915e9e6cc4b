# SPDX-License-Identifier: Apache-2.0
"""Every module renders with ansible-doc, every role has argument_specs, and ansible-lint's
production profile passes on the whole collection."""

import functools
import json
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


@functools.lru_cache(maxsize=None)
def module_docs():
    """(rc, stderr, {name: doc}) of one `ansible-doc --json` for every module: one process, not one per module
    (each start costs about a CPU second; the suite is bound by its CPU)."""
    res = tool("ansible-doc", "--json", *("ct200.deploy." + module for module in MODULES))
    return res.returncode, res.stderr, (json.loads(res.stdout) if res.returncode == 0 else {})


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_renders_module(module):
    returncode, stderr, docs = module_docs()
    assert returncode == 0, stderr
    doc = docs["ct200.deploy." + module]
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
    docs, shebangs (ignores, with reasons, in tests/sanity/ignore-2.19.txt). The tree it needs and
    its venvs: tests/support/sanity_tree.py."""
    from sanity_tree import collection_tree, sanity

    res = sanity(collection_tree(tmp_path))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    for test in ("validate-modules", "import", "pep8", "pylint", "yamllint"):
        assert 'Running sanity test "%s"' % test in out, out[-3000:]


def test_architecture_table_names_every_file():
    """docs/architecture.md's one-concern table names every role, module, action, filter and module_utils file:
    a new one cannot land without its row (the table went stale once, with four 'planned' rows long merged)."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text[text.index("| kind | name | its one concern |"):]
    table = table[:table.index("\n\n")]
    named = set(re.findall(r"`([^`]+)`", table))
    wildcards = [n[:-1] for n in named if n.endswith("*")]
    plugins = REPO / "plugins"
    expected = {"role": ROLES, "module": MODULES,
                "action": sorted(p.stem for p in (plugins / "action").glob("*.py") if not p.stem.startswith("_")),
                "filter": sorted(p.stem for p in (plugins / "filter").glob("*.yml")),
                "module_utils": sorted(p.name for p in (plugins / "module_utils").glob("*.py") if p.name != "__init__.py")}
    missing = ["%s %s" % (kind, name) for kind, names in expected.items() for name in names
               if name not in named and not any(name.startswith(w) for w in wildcards)]
    assert not missing, "docs/architecture.md lacks rows for: %s" % missing
