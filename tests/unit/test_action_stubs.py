# SPDX-License-Identifier: Apache-2.0
"""The module files of the action plugins: each action and its stub read one option spec from module_utils,
and a stub run on a host parses those options, then refuses with the one message (module_utils/action_stub)."""

import importlib

import pytest

from modhelper import run_module

STUBS = {  # module -> (the module_utils holding its spec, the spec's name, arguments it needs)
    "hf_download_wait": ("hf_progress", "WAIT_ARGUMENT_SPEC", {"jobs": [{"jid": "1"}]}),
    "hf_token_promote": ("token_promotion", "ARGUMENT_SPEC", {"token": "hf_x", "path": "/tmp/vault.yml"}),
    "site_plan": ("site_plan", "ARGUMENT_SPEC", {"stage": "site"}),
}


def _load(kind, name):
    return importlib.import_module("ansible_collections.ct200.deploy.plugins.%s.%s" % (kind, name))


@pytest.mark.parametrize("name", sorted(STUBS))
def test_the_action_accepts_exactly_the_stubs_options(name):
    utils, attr, _args = STUBS[name]
    spec = getattr(_load("module_utils", utils), attr)
    assert _load("action", name).ActionModule._VALID_ARGS == frozenset(spec)


@pytest.mark.parametrize("name", sorted(STUBS))
def test_the_stub_refuses_to_run_on_a_host(name):
    utils, attr, args = STUBS[name]
    failed, result = run_module(_load("modules", name).main, args)
    assert failed and result["msg"] == ("ct200.deploy.%s is an action plugin: it runs on the controller, call it as "
                                        "a task, not as a module on a host" % name)
    spec = getattr(_load("module_utils", utils), attr)
    assert set(result["invocation"]["module_args"]) == set(spec)  # parsed with the spec, defaults filled in


def test_the_stub_still_checks_its_options():
    failed, result = run_module(_load("modules", "hf_download_wait").main, {})
    assert failed and "missing required arguments: jobs" in result["msg"]
