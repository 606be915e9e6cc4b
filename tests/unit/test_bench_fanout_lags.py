# SPDX-License-Identifier: Apache-2.0
"""benchmarks/fanout/bench_fanout.py's hop lag (issue 19): each take is measured from the source's rename of
the file (its ctime) to the taker's first byte, and split into the first taker of each file from each source
and the later ones. The benchmark itself needs network namespaces and runs outside the suite."""

import importlib.util
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def bench():
    path = os.path.join(REPO, "benchmarks", "fanout", "bench_fanout.py")
    spec = importlib.util.spec_from_file_location("bench_fanout", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeSite:
    def __init__(self, root):
        self.root = root

    def local_dir(self, host):
        return os.path.join(self.root, host)


def test_lags_start_at_the_sources_rename_and_split_by_turn(bench, tmp_path):
    site = FakeSite(str(tmp_path))
    for host in ("h0", "h1", "h2"):
        os.makedirs(site.local_dir(host))
    with open(os.path.join(site.local_dir("h0"), "a.safetensors"), "wb") as out:
        out.write(b"x")
    renamed = os.lstat(os.path.join(site.local_dir("h0"), "a.safetensors")).st_ctime_ns / 1e9
    results = {
        "h0": {"file_times": {}},
        "h1": {"file_times": {"a.safetensors": {"source": "h0", "first_byte": renamed + 0.05}}},
        "h2": {"file_times": {"a.safetensors": {"source": "h0", "first_byte": renamed + 0.4},
                              "b.json": {"source": "h9", "first_byte": renamed}}},  # no such source: not a hop
    }
    takes = bench.hop_takes(site, ["a.safetensors", "b.json"], results)
    assert sorted(takes) == [(pytest.approx(0.05, abs=1e-3), "h0", "a.safetensors"),
                             (pytest.approx(0.4, abs=1e-3), "h0", "a.safetensors")]
    turns = bench.lags_by_turn(takes)
    assert turns["first"] == [pytest.approx(0.05, abs=1e-3)] and turns["later"] == [pytest.approx(0.4, abs=1e-3)]


def test_the_first_turn_is_per_source_and_file(bench):
    takes = [(0.30, "h0", "a"), (0.02, "h1", "a"), (0.45, "h1", "a"), (0.04, "h0", "b")]
    turns = bench.lags_by_turn(takes)
    assert sorted(turns["first"]) == [0.02, 0.04, 0.30] and turns["later"] == [0.45]
    assert bench.lag_stats(turns["later"]) == {"n": 1, "median": 0.45, "max": 0.45, "p90": 0.45}
    assert bench.lag_stats([]) == {"n": 0, "median": None, "max": None}
