# SPDX-License-Identifier: Apache-2.0
"""The fan-out on an 8-host site in network namespaces (Hub link 40 Mbit/s, host links 100 Mbit/s):
one Hub copy per site, every file on every host equal to the Hub's oid, and the fault cases."""

from __future__ import annotations

import os
import signal
import time

from tests.fanout.conftest import REPO_ID
from tests.fanout.netns_site import result_of, verify_all


def start_seed(site):
    return site.module("h0", "hf_download", site.seed_args(REPO_ID, site.commit), wait=False)


def start_child(site, host, fanout=2, **extra):
    args = site.fetch_args(host, REPO_ID, site.commit, site.files, fanout=fanout, **extra)
    return site.module(host, "hf_fanout_fetch", args, wait=False)


def finish(procs, timeout=300):
    results = {}
    for host, proc in procs.items():
        proc.wait(timeout)
        results[host] = result_of(proc)
        assert not results[host].get("failed"), (host, results[host].get("msg"))
    return results


def verified_files(site, host):
    root = site.local_dir(host)
    return [p for p in site.files if os.path.isfile(os.path.join(root, p))]


def wait_until(predicate, timeout=120, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.01)


def assert_one_hub_copy(site):
    """The Hub's own counters: every LFS file left the CDN exactly once, whole."""
    stats = site.hub_admin("/_admin/stats")
    lfs = [f for f in site.files.values() if f["lfs"]]
    assert stats["cdn_get"] == len(lfs)
    assert stats["cdn_bytes_sent"] == sum(f["size"] for f in lfs)


def repo_bytes(site):
    return sum(f["size"] for f in site.files.values())


def test_site_pulls_one_hub_copy_and_every_host_verifies(fresh_site):
    site = fresh_site
    procs = {"h0": start_seed(site)}
    procs.update((h, start_child(site, h)) for h in site.hosts[1:])
    results = finish(procs)
    assert verify_all(site, site.hosts, site.files) == {}
    assert_one_hub_copy(site)
    for host in site.hosts[1:]:
        assert "hub" not in results[host]["bytes_by_source"]
        assert results[host]["bytes_fetched"] == repo_bytes(site)
    assert set(results["h3"]["bytes_by_source"]) == {"h1"}  # h3's parent is h1 (the seed has one child, h1; then a binary tree)
    assert results["h3"]["bytes_by_kind"] == {"parent": repo_bytes(site), "peer": 0, "seed": 0, "hub": 0}
    assert results["h1"]["bytes_by_kind"]["seed"] == repo_bytes(site)  # the seed is h1's parent


def test_killed_interior_peer_children_fall_back_and_it_resumes(fresh_site):
    site = fresh_site
    procs = {"h0": start_seed(site)}
    procs.update((h, start_child(site, h)) for h in site.hosts[1:])
    wait_until(lambda: len(verified_files(site, "h1")) >= 2, what="h1 to hold two verified files")
    procs.pop("h1").send_signal(signal.SIGKILL)  # the interior host dies: its fetcher and its server
    site.stop_nginx("h1")
    had = len(verified_files(site, "h1"))
    assert had < len(site.files), "h1 finished before it could be killed; the test proves nothing"
    results = finish(procs)
    for child in ("h2", "h3"):  # h1's children (h1 is the seed's only child)
        assert results[child]["fallbacks"], child
        assert "h1" not in [f["source"].split()[-1] for f in results[child]["fallbacks"]]
    assert verify_all(site, [h for h in site.hosts if h != "h1"], site.files) == {}
    site.start_nginx("h1")
    again = finish({"h1": start_child(site, "h1")})["h1"]
    assert again["files_present"] >= had
    assert again["bytes_fetched"] <= repo_bytes(site) - had * min(f["size"] for f in site.files.values())
    assert verify_all(site, site.hosts, site.files) == {}
    assert_one_hub_copy(site)


def corrupt_in_place(path):
    with open(path, "r+b") as handle:
        data = bytearray(handle.read())
        data[len(data) // 2] ^= 0xFF
        handle.seek(0)
        handle.write(data)


def test_corrupt_shard_on_interior_peer_costs_at_most_that_shard(fresh_site):
    site = fresh_site
    finish({"h0": start_seed(site), "h1": start_child(site, "h1")})
    shard = sorted(p for p in site.files if p.endswith(".safetensors"))[2]
    corrupt_in_place(os.path.join(site.local_dir("h1"), shard))
    result = finish({"h3": start_child(site, "h3")})["h3"]
    assert [r["path"] for r in result["rejected"]] == [shard]
    assert result["rejected"][0]["source"] == "parent h1"
    assert result["bytes_fetched"] == repo_bytes(site) + site.files[shard]["size"]
    assert verify_all(site, ["h3"], site.files) == {}


def test_killed_downloader_resumes_on_rerun(fresh_site):
    site = fresh_site
    seed = start_seed(site)
    child = start_child(site, "h2", seed_fanout=2)  # the seed's child: it needs no other peer running
    wait_until(lambda: len(verified_files(site, "h2")) >= 2, what="h2 to hold two verified files")
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    had = len(verified_files(site, "h2"))
    assert had < len(site.files), "h2 finished before it could be killed; the test proves nothing"
    finish({"h0": seed})
    again = finish({"h2": start_child(site, "h2", seed_fanout=2)})["h2"]
    assert again["files_present"] >= had
    assert again["files_fetched"] == len(site.files) - again["files_present"]
    assert verify_all(site, ["h2"], site.files) == {}


def test_no_source_fails_with_cause_and_fix_then_hub_fallback_works(fresh_site):
    site = fresh_site
    for host in site.hosts:
        site.stop_nginx(host)
    res = site.module("h5", "hf_fanout_fetch", site.fetch_args("h5", REPO_ID, site.commit, site.files))
    assert res.get("failed") and "no source could deliver" in res["msg"] and "Fix:" in res["msg"]
    ok = finish({"h5": start_child(site, "h5", use_hub=True)})["h5"]
    assert ok["bytes_by_source"] == {"hub": repo_bytes(site)}
    assert verify_all(site, ["h5"], site.files) == {}


def test_check_mode_reports_and_writes_nothing(fresh_site):
    site = fresh_site
    args = dict(site.fetch_args("h6", REPO_ID, site.commit, site.files), _ansible_check_mode=True)
    res = site.module("h6", "hf_fanout_fetch", args)
    assert res["changed"] and len(res["would_fetch"]) == len(site.files)
    assert os.listdir(site.local_dir("h6")) == []
