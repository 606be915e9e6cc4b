# SPDX-License-Identifier: Apache-2.0
"""hf_paths: what hf_download accepts from a tree listing, an operator's repo id and endpoint.

Every name huggingface_hub 2.4 refuses (``_local_folder._validate_relative_filename``) is refused
here too, and stricter; repo ids follow huggingface_hub's ``validate_repo_id``."""

from __future__ import annotations

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import hf_paths

GOOD_PATHS = ["config.json", "a/b/c.safetensors", ".gitattributes", "dir.with.dots/x..y", "ünï/cödé.bin",
              ".cache/other", "a/.ct200/x"]
BAD_PATHS = {
    "../../x": "'..'",
    "a/../../b": "'..'",
    "..": "'..'",
    "/etc/passwd": "absolute",
    "//host/share/x": "absolute",
    "a\\..\\b": "backslash",
    "C:\\Windows\\x": "backslash",
    "C:foo": "drive",
    "a/C:/b": "drive",
    "evil\x00name": "control",
    "new\nline": "control",
    "del\x7f": "control",
    "a//b": "empty",
    "a/./b": "'.'",
    "./x": "'.'",
    "a/": "empty",
    "": "empty",
    ".ct200/manifest.json": ".ct200/",
    ".ct200": ".ct200/",
    ".cache/huggingface/download/x.metadata": ".cache/huggingface/",
    "model.safetensors.ct200tmp": ".ct200tmp",
}


@pytest.mark.parametrize("path", GOOD_PATHS)
def test_ordinary_repo_paths_pass(path):
    assert hf_paths.repo_path_problem(path) is None


@pytest.mark.parametrize("path, words", sorted(BAD_PATHS.items()))
def test_hostile_repo_paths_are_refused_with_the_reason(path, words):
    why = hf_paths.repo_path_problem(path)
    assert why is not None and words in why, why


@pytest.mark.parametrize("path", sorted(BAD_PATHS) + GOOD_PATHS)
def test_everything_huggingface_hub_refuses_is_refused(path):
    from huggingface_hub._local_folder import _validate_relative_filename

    try:
        _validate_relative_filename(path)
    except ValueError:
        assert hf_paths.repo_path_problem(path) is not None


@pytest.mark.parametrize("entry, words", [
    ({"oid": "a" * 64, "lfs": True}, "size is missing"),
    ({"size": "12", "oid": "a" * 64, "lfs": True}, "not an integer"),
    ({"size": True, "oid": "a" * 64, "lfs": True}, "not an integer"),
    ({"size": 1.5, "oid": "a" * 64, "lfs": True}, "not an integer"),
    ({"size": -1, "oid": "a" * 64, "lfs": True}, "negative"),
    ({"size": 1, "oid": "A" * 64, "lfs": True}, "lfs.oid"),
    ({"size": 1, "oid": "../x", "lfs": True}, "lfs.oid"),
    ({"size": 1, "oid": None, "lfs": True}, "lfs.oid"),
    ({"size": 1, "oid": "a" * 64, "lfs": False}, "40-hex"),
    ("not a dict", "not an object"),
])
def test_malformed_tree_entries_are_named(entry, words):
    why = hf_paths.tree_entry_problem(entry)
    assert why is not None and words in why, why


def test_well_formed_tree_entries_pass():
    assert hf_paths.tree_entry_problem({"size": 0, "oid": "0" * 40, "lfs": False}) is None
    assert hf_paths.tree_entry_problem({"size": 5 << 30, "oid": "f" * 64, "lfs": True}) is None


@pytest.mark.parametrize("repo_id", ["a/..", "../x", "org/my model", "a/b/c", "org/a--b", "org/x.git", ".x/y",
                                     "", "org/" + "n" * 97, "org/-x"])
def test_repo_ids_huggingface_hub_refuses_are_refused(repo_id):
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    with pytest.raises(HFValidationError):
        validate_repo_id(repo_id)
    assert hf_paths.repo_id_problem(repo_id)


@pytest.mark.parametrize("repo_id", ["moonshotai/Kimi-K2.6", "z-lab/Kimi-K2.6-DFlash", "gpt2", "org/a_b.c"])
def test_valid_repo_ids_pass(repo_id):
    assert hf_paths.repo_id_problem(repo_id) is None


def test_endpoints_and_redaction():
    assert hf_paths.endpoint_problem("https://huggingface.co") is None
    assert hf_paths.endpoint_problem("http://127.0.0.1:8080/mirror") is None
    assert "http" in hf_paths.endpoint_problem("ftp://127.0.0.1/")
    assert "http" in hf_paths.endpoint_problem("file:///etc")
    assert "credentials" in hf_paths.endpoint_problem("https://u:p@hub.example")
    assert hf_paths.redact_url("https://alice:pw@hub.example:8443/x?y=1") == "https://***@hub.example:8443/x?y=1"
    assert hf_paths.redact_url("https://hub.example") == "https://hub.example"
    assert set(hf_paths.url_credentials("https://alice:p%40ss@hub.example")) >= {"alice:p%40ss", "p%40ss", "p@ss"}
    assert hf_paths.url_credentials(None) == [] and hf_paths.url_credentials("https://hub.example") == []
