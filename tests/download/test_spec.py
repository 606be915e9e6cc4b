# SPDX-License-Identifier: Apache-2.0
"""hf_download's options are defined once (plugins/module_utils/hf_download_spec.py).

The module's DOCUMENTATION (with its doc fragments), the Options defaults and validation, and the
model_weights role's meta/argument_specs.yml and defaults/main.yml must all agree with it.
"""

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.ct200.deploy.plugins.module_utils import hf_download_spec as spec
from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer as tr
from ansible_collections.ct200.deploy.plugins.module_utils.disk_preflight import parse_size
from ansible_collections.ct200.deploy.plugins.modules import hf_download

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(REPO, "roles", "model_weights")
KEYS = ("type", "choices", "default", "elements", "required")


def _load(*parts):
    with open(os.path.join(*parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _role_options():
    return _load(ROLE, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]


def _documented_options(module):
    """The module's documented options with the collection's doc fragments merged in (as ansible-doc merges them:
    the module's own keys win), so an option documented once in plugins/doc_fragments counts for each module."""
    import importlib

    doc = yaml.safe_load(module.DOCUMENTATION)
    options = {}
    for name in doc.get("extends_documentation_fragment") or []:
        if name.startswith("ct200.deploy."):
            fragment = importlib.import_module("ansible_collections.ct200.deploy.plugins.doc_fragments." + name.split(".")[2])
            options.update(yaml.safe_load(fragment.ModuleDocFragment.DOCUMENTATION)["options"])
    for name, own in doc["options"].items():
        options[name] = dict(options.get(name) or {}, **own)
    return options


def _same(want, got, key):
    if key == "required":
        return bool(want) == bool(got)
    if key == "type":
        return (want or "str") == (got or "str")
    return want == got


def test_module_uses_the_one_spec():
    import inspect

    source = inspect.getsource(hf_download.main)
    assert "argument_spec=ARGUMENT_SPEC" in source


def test_documentation_matches_the_spec():
    docs = _documented_options(hf_download)
    assert set(docs) == set(spec.ARGUMENT_SPEC)
    problems = ["%s.%s: spec %r, docs %r" % (name, key, opt.get(key), docs[name].get(key))
                for name, opt in spec.ARGUMENT_SPEC.items() for key in KEYS
                if not _same(opt.get(key), docs[name].get(key), key)]
    assert problems == []


def test_role_variables_mirror_the_module_options():
    role = _role_options()
    problems = []
    for var, option in spec.ROLE_VARS.items():
        want = dict(spec.ARGUMENT_SPEC[option])
        want["default"] = spec.ROLE_DEFAULT_OVERRIDES.get(var, want.get("default"))
        for key in ("type", "choices", "default", "elements"):
            if not _same(want.get(key), role[var].get(key), key):
                problems.append("%s.%s: module %r, role %r" % (var, key, want.get(key), role[var].get(key)))
    items = role["model_weights_repos"]["options"]
    for option in spec.ROLE_REPO_OPTIONS:
        for key in KEYS:
            want, got = spec.ARGUMENT_SPEC[option].get(key), items[option].get(key)
            if not _same(want, got, key):
                problems.append("model_weights_repos.%s.%s: module %r, role %r" % (option, key, want, got))
    assert problems == []


def test_role_defaults_match_the_role_argument_specs():
    role = _role_options()
    defaults = _load(ROLE, "defaults", "main.yml")
    assert set(defaults) == {name for name, opt in role.items() if "default" in opt}
    for name, value in defaults.items():
        assert value == role[name]["default"], name


def test_options_defaults_come_from_the_spec(tmp_path):
    opts = tr.Options(repo_id="org/name", local_dir=str(tmp_path))
    assert opts.min_free_bytes == parse_size(spec.default("min_free_bytes"))
    assert opts.split_min == parse_size(spec.default("min_split_size"))
    for name in ("revision", "repo_type", "max_workers", "verify", "stall_timeout", "retries", "fsync",
                 "direct_io", "lock_timeout"):
        assert getattr(opts, name) == spec.default(name), name
    with pytest.raises(TypeError):
        tr.Options(repo_id="org/name", local_dir=str(tmp_path), no_such_option=1)


@pytest.mark.parametrize("name", sorted(spec.LIMITS))
def test_options_validation_enforces_every_limit(tmp_path, name):
    low, high, inclusive = spec.LIMITS[name]
    for bad in ([low - 1] if inclusive else [low]) + [high + 1, "5", True]:
        opts = tr.Options(repo_id="org/name", local_dir=str(tmp_path), endpoint="http://127.0.0.1:9", **{name: bad})
        with pytest.raises(tr.DownloadError) as err:
            opts.validate()
        assert name in err.value.message and err.value.code == "bad_argument"


def test_choices_are_validated_from_the_spec(tmp_path):
    for name in ("verify", "repo_type"):
        opts = tr.Options(repo_id="org/name", local_dir=str(tmp_path), endpoint="http://127.0.0.1:9",
                          **{name: "nope"})
        with pytest.raises(tr.DownloadError) as err:
            opts.validate()
        for choice in spec.ARGUMENT_SPEC[name]["choices"]:
            assert choice in err.value.message


def test_layout_and_reuse_dirs_are_documented_once_in_the_fragment():
    from ansible_collections.ct200.deploy.plugins.modules import hf_fanout_fetch

    for module in (hf_download, hf_fanout_fetch):
        own = yaml.safe_load(module.DOCUMENTATION)
        assert "ct200.deploy.hf_layout" in own["extends_documentation_fragment"]
        assert not set(own["options"]) & {"layout", "reuse_dirs"}, module.__name__
        assert _documented_options(module)["layout"]["choices"] == spec.LAYOUTS


def test_fanout_fetch_takes_the_shared_options_from_this_spec():
    """hf_fanout_fetch declares no option of hf_download's again: same type, choices, default, no_log
    (it had max_workers 4 and stall_timeout 30 against hf_download's 8 and 60)."""
    from ansible_collections.ct200.deploy.plugins.modules import hf_fanout_fetch

    fetch = hf_fanout_fetch.ARGUMENT_SPEC
    both = sorted(set(fetch) & set(spec.ARGUMENT_SPEC))
    assert both == sorted(spec.FANOUT_SHARED)
    assert [name for name in both if fetch[name] != spec.ARGUMENT_SPEC[name]] == []
    docs = _documented_options(hf_fanout_fetch)
    assert set(docs) == set(fetch)
    problems = ["%s.%s: spec %r, docs %r" % (name, key, opt.get(key), docs[name].get(key))
                for name, opt in fetch.items() for key in KEYS if not _same(opt.get(key), docs[name].get(key), key)]
    assert problems == []
