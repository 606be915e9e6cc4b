# SPDX-License-Identifier: Apache-2.0
"""Flag dialects: built-in tables vs the real parsers, renames, DDTree detection, probing with a cache."""
import os
import subprocess

import pytest

from conftest import VERSIONS, manifest, real_dialect, require_parse_venv
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_flags as flags


def runner(calls=None):
    def run(argv):
        if calls is not None:
            calls.append(argv)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        return proc.returncode, proc.stdout, proc.stderr
    return run


@pytest.mark.parametrize("version", VERSIONS)
def test_static_table_is_a_subset_of_the_real_parser(version):
    real = real_dialect(version)
    static = flags.static_dialect(version)
    assert static.options <= real.options, sorted(static.options - real.options)
    assert static.algorithms <= real.algorithms | {"NEXTN"}
    for logical in flags.RENAMES:
        assert static.flag(logical) == real.flag(logical), logical


@pytest.mark.parametrize("logical, old, new", [
    ("cuda_graph_max_bs", "--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"),
    ("draft_window_size", "--speculative-dflash-draft-window-size", "--speculative-draft-window-size"),
    ("mamba_strategy", "--mamba-scheduler-strategy", "--mamba-radix-cache-strategy"),
])
def test_renames_between_0511_and_0523(logical, old, new):
    d11, d23 = real_dialect("0.5.11"), real_dialect("0.5.23")
    assert (d11.flag(logical), d23.flag(logical)) == (old, new)
    assert old not in d23.options  # the old spelling is rejected by 0.5.23's parser


def test_releases_have_dflash_and_no_ddtree():
    for version in VERSIONS:
        dialect = real_dialect(version)
        assert dialect.has_dflash and dialect.ddtree is None
        assert "--speculative-ddtree-budget" not in dialect.options


def test_ddtree_dialects_are_detected_from_the_parser():
    assert real_dialect("0.5.23", ["--speculative-ddtree-budget"], ["DDTREE"]).ddtree == "pr29907"
    assert real_dialect("0.5.23", ["--speculative-dflash-enable-ddtree"]).ddtree == "fork"


def test_0511_algorithm_choices_come_from_argparse():
    d11 = real_dialect("0.5.11")
    assert d11.choices["speculative_algorithm"] == ["DFLASH", "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
    assert real_dialect("0.5.23").choices["speculative_algorithm"] is None  # free string in 0.5.23


def test_static_dialect_with_ddtree_and_unknown_version():
    assert flags.static_dialect("0.5.23", "pr29907").ddtree == "pr29907"
    assert flags.static_dialect("0.5.23.post1+g93e9850e", "fork").ddtree == "fork"
    with pytest.raises(flags.DialectError) as info:
        flags.static_dialect("0.5.15")
    assert str(info.value) == ("sglang_version 0.5.15 has no built-in flag table (known: 0.5.11, 0.5.23); omit "
                               "sglang_version so the module probes the SGLang installed at the python option")


def test_unknown_options_only_with_a_full_manifest():
    args = ["--watchdog-timeout", "600", "--cuda-graph-max-bs=8", "--no-such-flag"]
    assert flags.unknown_options(real_dialect("0.5.23"), args) == ["--cuda-graph-max-bs", "--no-such-flag"]
    assert flags.unknown_options(flags.static_dialect("0.5.23"), args) == []


HELP_0511_EXCERPT = """usage: launch_server.py [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]
                        [--speculative-algorithm {DFLASH,EAGLE,EAGLE3,NEXTN,STANDALONE,NGRAM}]
                        [--speculative-dflash-draft-window-size SPECULATIVE_DFLASH_DRAFT_WINDOW_SIZE]
                        [--mamba-scheduler-strategy {auto,no_buffer,extra_buffer}]
"""


def test_help_text_fallback():
    dialect = flags.dialect_from_help("0.5.11", HELP_0511_EXCERPT)
    assert dialect.source == "help" and dialect.has_dflash
    assert dialect.flag("draft_window_size") == "--speculative-dflash-draft-window-size"
    assert dialect.flag("mamba_strategy") == "--mamba-scheduler-strategy"


def test_empty_manifest_is_an_error():
    with pytest.raises(flags.DialectError) as info:
        flags.dialect_from_manifest({"version": "9.9", "actions": [], "error": "ImportError: torch"}, "probe")
    assert "ImportError: torch" in str(info.value)


def test_version_probe_refuses_a_missing_interpreter(tmp_path):
    with pytest.raises(flags.DialectError) as info:
        flags.installed_version(runner(), str(tmp_path / "bin" / "python"))
    assert "is not an executable absolute path" in str(info.value)


def test_version_probe_without_sglang(tmp_path):
    import sys
    with pytest.raises(flags.DialectError) as info:
        flags.installed_version(runner(), sys.executable)
    assert "sglang is not installed for" in str(info.value)
    assert "ct200.deploy.sglang_runtime" in str(info.value)


@pytest.mark.parametrize("version", VERSIONS)
def test_probe_the_real_parse_venv_and_cache_it(tmp_path, version):
    python = require_parse_venv(version)
    calls = []
    first = flags.probe_dialect(runner(calls), python, str(tmp_path))
    assert first.source == "probe" and first.version == version
    assert len(calls) == 2  # version + parser manifest
    assert first.options == real_dialect(version).options  # the committed fixture is current
    cached = os.listdir(str(tmp_path))
    assert len(cached) == 1 and cached[0].startswith("sglang-flags-")
    calls.clear()
    second = flags.probe_dialect(runner(calls), python, str(tmp_path))
    assert second.source == "cache" and second.options == first.options
    assert len(calls) == 1  # only the cheap version call


def test_probe_reports_a_config_reader_that_does_not_import_and_never_caches_it(tmp_path):
    """The parse venv with PyYAML hidden (as in a wheelhouse without it): --config cannot be read."""
    real = require_parse_venv("0.5.23")
    blocker = tmp_path / "no-yaml"
    blocker.mkdir()
    (blocker / "yaml.py").write_text("raise ModuleNotFoundError(\"No module named 'yaml'\", name='yaml')\n")
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nPYTHONPATH=%s exec %s \"$@\"\n" % (blocker, real))
    python.chmod(0o755)
    cache = tmp_path / "cache"
    first = flags.probe_dialect(runner(), str(python), str(cache))
    assert first.config_reader_error == "ModuleNotFoundError: No module named 'yaml'"
    calls = []
    again = flags.probe_dialect(runner(calls), str(python), str(cache))
    assert again.source == "probe" and len(calls) == 2  # a negative answer is probed again
    assert flags.probe_dialect(runner(), real, str(cache)).config_reader_error is None


def test_cache_key_changes_with_version_and_mtime():
    base = {"version": "0.5.23", "mtime_ns": 1}
    key = flags.cache_key("/opt/v/bin/python", base)
    assert key != flags.cache_key("/opt/v/bin/python", dict(base, mtime_ns=2))
    assert key != flags.cache_key("/opt/v/bin/python", dict(base, version="0.5.24"))
    assert key != flags.cache_key("/opt/w/bin/python", base)


def test_check_mode_probe_does_not_write_the_cache(tmp_path):
    python = require_parse_venv("0.5.23")
    flags.probe_dialect(runner(), python, str(tmp_path), write_cache=False)
    assert os.listdir(str(tmp_path)) == []


def test_committed_manifests_are_real_parser_dumps():
    for version in VERSIONS:
        data = manifest(version)
        assert data["version"] == version
        assert len(data["actions"]) > 300
        assert "DFLASH" in data["algorithms"]
