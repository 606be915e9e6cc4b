# SPDX-License-Identifier: Apache-2.0
"""hf_download against the local Hub over real HTTP, each run its own process (as on a host).

Fault knobs of the local Hub (5xx, 429 + Retry-After, cut, stall, corrupt) and its
request counters are the evidence: a re-run is proven idle by zero file GETs counted
on the server, resume by Range headers and bytes sent, access by Authorization flags.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from dlhelpers import (
    BIG,
    GATED,
    WEIGHTS,
    assert_tree_matches,
    hub_files,
    kill,
    read_progress,
    run_download,
    sha256_of,
    start_module,
    wait_for,
)
from localhub import token_for

SHARD2 = "model-00002-of-00003.safetensors"


def all_text_under(path):
    chunks = []
    for root, _dirs, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            if os.path.getsize(full) < 1 << 20:
                with open(full, "rb") as handle:
                    chunks.append(handle.read().decode("latin-1"))
    return "\n".join(chunks)


def test_first_download_then_idempotent_rerun_with_zero_file_gets(hub, tmp_path):
    dest = tmp_path / "w"
    failed, res = run_download(hub, dest)
    assert not failed, res["msg"]
    assert res["changed"] is True
    assert res["commit"] == hub.repo(WEIGHTS).commit
    assert res["files"] == len(hub_files(hub, WEIGHTS))
    assert res["bytes_downloaded"] == res["bytes_total"] == sum(s for s, _unused in hub_files(hub, WEIGHTS).values())
    assert res["files_downloaded"] == res["files"]
    assert_tree_matches(hub, WEIGHTS, dest)
    assert not (dest / ".ct200" / "tmp").exists(), "no temp files remain"
    manifest = json.loads((dest / ".ct200" / "manifest.json").read_text())
    entry = manifest["files"][SHARD2]
    assert entry["sha256"] == hub_files(hub, WEIGHTS)[SHARD2][1]
    assert entry["commit"] == res["commit"] and entry["size"] == 24 << 20
    assert entry["mtime_ns"] == os.stat(dest / SHARD2).st_mtime_ns

    hub.reset_stats()
    failed, again = run_download(hub, dest)
    assert not failed and again["changed"] is False
    stats = hub.stats()
    assert stats["cdn_get"] == 0 and stats["resolve_get"] == 0 and stats["resolve_head"] == 0
    assert stats["api"] == 1, "a branch revision costs exactly one small API call"
    assert again["planning"] == "manifest" and again["bytes_downloaded"] == 0
    assert again["bytes_skipped"] == res["bytes_total"]

    hub.reset_stats()
    failed, pinned = run_download(hub, dest, revision=res["commit"])
    assert not failed and pinned["changed"] is False
    assert sum(v for k, v in hub.stats().items() if isinstance(v, int) and k not in ("faults_fired",)) == 0, hub.stats()
    assert pinned["network_calls"] == 0


def test_noop_rerun_does_not_import_hf_api(hub, tmp_path):
    dest = tmp_path / "w"
    failed, res = run_download(hub, dest, allow_patterns=["*.json"])
    assert not failed
    probe = (
        "import sys, json, runpy\n"
        "sys.argv = ['hf_download']\n"
        "try:\n"
        "    runpy.run_path(%r, run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write(json.dumps(sorted(m for m in sys.modules if m.startswith('huggingface_hub'))))\n"
    ) % os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "plugins", "modules", "hf_download.py")
    from dlhelpers import module_env

    for revision in ("main", res["commit"]):
        payload = json.dumps({"ANSIBLE_MODULE_ARGS": dict(
            repo_id=WEIGHTS, local_dir=str(dest), endpoint=hub.url, min_free_bytes=0,
            allow_patterns=["*.json"], revision=revision)})
        proc = subprocess.run([__import__("sys").executable, "-c", probe], input=payload, capture_output=True,
                              text=True, env=module_env(), timeout=60, check=False)
        result = json.loads(proc.stdout[proc.stdout.index("{"):])
        assert result["changed"] is False and result["planning"] == "manifest", result
        modules = json.loads(proc.stderr.strip().splitlines()[-1])
        assert "huggingface_hub.hf_api" not in modules, modules
        assert not modules, "no huggingface_hub module at all on the no-op path: %s" % modules


def test_check_mode_reports_and_writes_nothing(hub, tmp_path):
    dest = tmp_path / "nothing-here"
    failed, res = run_download(hub, dest, check_mode=True, diff=True)
    assert not failed, res.get("msg")
    assert res["changed"] is True
    assert res["files_to_download"] == len(hub_files(hub, WEIGHTS))
    assert res["bytes_to_download"] == res["bytes_total"] > 0
    assert {f["path"] for f in res["would_download"]} == set(hub_files(hub, WEIGHTS))
    assert SHARD2 in res["diff"]["after"]
    assert not dest.exists(), "check mode created %s" % dest
    assert hub.stats()["cdn_get"] == 0

    # partly present: check mode names only what is missing, and still writes nothing
    run_download(hub, dest, allow_patterns=["*.json"])
    before = sorted(os.listdir(dest / ".ct200"))
    manifest_before = (dest / ".ct200" / "manifest.json").read_bytes()
    failed, res = run_download(hub, dest, check_mode=True)
    assert not failed
    assert {f["path"] for f in res["would_download"]} == set(hub_files(hub, WEIGHTS)) - {"config.json", "tokenizer_config.json"}
    assert sorted(os.listdir(dest / ".ct200")) == before
    assert (dest / ".ct200" / "manifest.json").read_bytes() == manifest_before


def test_token_never_in_results_files_or_cdn_requests(hub, tmp_path):
    token = token_for("granted")
    dest = tmp_path / "g"
    failed, res = run_download(hub, dest, repo_id=GATED, token=token, diff=True)
    assert not failed, res.get("msg")
    assert_tree_matches(hub, GATED, dest)
    assert token not in json.dumps(res)
    assert token not in all_text_under(dest)
    log = hub.requests_log()
    cdn = [r for r in log if r["kind"] == "cdn_get"]
    resolve = [r for r in log if r["kind"] == "resolve_get"]
    assert cdn and all(not r["authorization"] for r in cdn), "Authorization must never reach the CDN origin"
    assert resolve and all(r["authorization"] for r in resolve), "the Hub origin gets the token"
    # from the environment, like huggingface_hub
    failed, res = run_download(hub, tmp_path / "g2", repo_id=GATED, env={"HF_TOKEN": token})
    assert not failed and res["token_source"] == "env:HF_TOKEN"
    assert token not in json.dumps(res)


def test_retry_of_a_small_gated_file_keeps_the_token_on_the_hubs_own_redirect(hub, tmp_path):
    """The Hub answers small files with a 307 to its own /api/resolve-cache/...; a retry
    that goes straight to that remembered URL must still carry the token (a CDN URL must not)."""
    token = token_for("granted")
    hub.set_faults([{"kind": "cut", "path_glob": "/api/resolve-cache/*", "fraction": 0.5, "count": 1}])
    failed, res = run_download(hub, tmp_path / "g", repo_id=GATED, token=token)
    assert not failed, res.get("msg")
    assert hub.stats()["faults_fired"] == 1
    assert_tree_matches(hub, GATED, tmp_path / "g")
    cached = [r for r in hub.requests_log() if r["path"].startswith("/api/resolve-cache/")]
    assert len(cached) >= 2 and all(r["authorization"] for r in cached), cached


@pytest.mark.parametrize("persona, code, words", [
    (None, "no_token", "carried no token"),
    ("never_requested", "not_requested", "request access in a browser"),
    ("invalid", "invalid_token", "create a new token"),
])
def test_gated_access_refused_before_any_byte(hub, tmp_path, persona, code, words):
    dest = tmp_path / "g"
    kw = {"token": token_for(persona)} if persona else {}
    failed, res = run_download(hub, dest, repo_id=GATED, **kw)
    assert failed and res["code"] == code, res
    assert words in res["msg"]
    assert hub.stats()["cdn_get"] == 0 and hub.stats()["resolve_get"] == 0
    assert not dest.exists() or not [p for p in os.listdir(dest) if p != ".ct200"]
    if persona:
        assert token_for(persona) not in json.dumps(res)


def test_disk_too_small_is_refused_before_any_byte(hub, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mnt)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip("cannot mount tmpfs: %s" % proc.stderr.strip())
    try:
        (mnt / "keep.txt").write_text("previous state")
        dest = mnt / "models" / "w"
        failed, res = run_download(hub, dest, min_free_bytes="1MB")
        assert failed and res["code"] == "disk_full", res
        msg = res["msg"]
        assert "need 35.7 MB more on %s (tmpfs, " % mnt in msg, msg
        assert "headroom 1 MB" in msg and "min_free_bytes" in msg
        assert hub.stats()["cdn_get"] == 0 and hub.stats()["resolve_get"] == 0
        assert os.listdir(mnt) == ["keep.txt"], "nothing written, previous state intact"
        # check mode gives the same verdict
        failed, res = run_download(hub, dest, check_mode=True)
        assert failed and res["code"] == "disk_full"
        # what fits is fetched: the selection is checked, not the repo
        failed, res = run_download(hub, dest, allow_patterns=["*.json", "model-00003*"])
        assert not failed, res["msg"]
        assert res["files_downloaded"] == 3
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_corrupt_bytes_from_the_server_are_detected_and_refetched(hub, tmp_path):
    sha = hub_files(hub, WEIGHTS)[SHARD2][1]
    hub.set_faults([{"kind": "corrupt", "path_glob": "/cdn/%s" % sha, "fraction": 0.6, "bytes": 64, "count": 1}])
    dest = tmp_path / "w"
    failed, res = run_download(hub, dest, max_workers=2)
    assert not failed, res["msg"]
    assert hub.stats()["faults_fired"] == 1
    assert res["refetched"] == [SHARD2]
    assert_tree_matches(hub, WEIGHTS, dest)


def test_corruption_on_disk_is_found_and_repaired(hub, tmp_path):
    dest = tmp_path / "w"
    assert not run_download(hub, dest)[0]
    target = dest / SHARD2
    with open(target, "r+b") as handle:  # same size, same mtime: only ctime tells (utime cannot set it)
        handle.seek(12345678)
        handle.write(b"\0" * 8)
    recorded = json.loads((dest / ".ct200" / "manifest.json").read_text())["files"][SHARD2]["mtime_ns"]
    os.utime(target, ns=(os.stat(target).st_atime_ns, recorded))
    failed, res = run_download(hub, dest)
    assert not failed and res["changed"] is True and res["downloaded"] == [SHARD2]
    assert_tree_matches(hub, WEIGHTS, dest)
    failed, res = run_download(hub, dest, verify="full")
    assert not failed and res["changed"] is False and res["files_hashed"] == res["files"]
    # truncated -> refetched by the stat check alone
    with open(target, "r+b") as handle:
        handle.truncate(1000)
    failed, res = run_download(hub, dest)
    assert not failed and res["downloaded"] == [SHARD2]
    assert_tree_matches(hub, WEIGHTS, dest)


def test_touched_files_are_rehashed_in_full_and_kept(hub, tmp_path):
    dest = tmp_path / "w"
    assert not run_download(hub, dest)[0]
    now = time.time()
    for name in os.listdir(dest):
        if name.endswith(".safetensors"):
            os.utime(dest / name, (now + 5, now + 5))
    hub.reset_stats()
    failed, res = run_download(hub, dest)
    assert not failed and res["changed"] is False
    assert res["files_hashed"] == 3 and res["files_refreshed"] == 0
    assert hub.stats()["cdn_get"] == 0
    failed, res = run_download(hub, dest)
    assert not failed and res["files_hashed"] == 0, "the re-hash was recorded: the next run is stat-only"
    # the explicit opt-in samples instead
    for name in os.listdir(dest):
        if name.endswith(".safetensors"):
            os.utime(dest / name, (now + 9, now + 9))
    failed, res = run_download(hub, dest, verify="sample-unsafe")
    assert not failed and res["files_refreshed"] == 3 and res["files_hashed"] == 0
    # touched AND changed in a sampled block -> hashed -> refetched, even in sampling mode
    with open(dest / SHARD2, "r+b") as handle:
        handle.write(b"garbage!")
    failed, res = run_download(hub, dest, verify="sample-unsafe")
    assert not failed and res["downloaded"] == [SHARD2]
    assert_tree_matches(hub, WEIGHTS, dest)


def test_5xx_is_retried(hub, tmp_path):
    hub.set_faults([{"kind": "5xx", "path_glob": "/cdn/*", "status": 503, "count": 2}])
    failed, res = run_download(hub, tmp_path / "w", max_workers=1)
    assert not failed, res["msg"]
    assert res["retries"] == 2 and res["retry_causes"] == {"http_503": 2}
    assert_tree_matches(hub, WEIGHTS, tmp_path / "w")


def test_429_retry_after_is_honoured(hub, tmp_path):
    sha = hub_files(hub, WEIGHTS)[SHARD2][1]
    hub.set_faults([{"kind": "429", "path_glob": "/cdn/%s" % sha, "retry_after": 2, "count": 1}])
    failed, res = run_download(hub, tmp_path / "w")
    assert not failed, res["msg"]
    assert res["retry_causes"] == {"http_429": 1}
    log = [r for r in hub.requests_log() if r["kind"] == "cdn_get" and sha in r["path"]]
    assert [r["status"] for r in log][:1] == [429]
    retry = next(r for r in log if r["status"] in (200, 206))
    assert retry["t"] - log[0]["t"] >= 1.9, "the retry came %.2f s after the 429" % (retry["t"] - log[0]["t"])


def test_failure_after_retries_names_the_file_and_cause(hub, tmp_path):
    sha = hub_files(hub, WEIGHTS)[SHARD2][1]
    hub.set_faults([{"kind": "5xx", "path_glob": "/cdn/%s" % sha, "status": 502, "count": -1}])
    dest = tmp_path / "w"
    failed, res = run_download(hub, dest, retries=1)
    assert failed and res["code"] == "transfer_failed"
    assert SHARD2 in res["msg"] and "HTTP 502" in res["msg"] and "giving up after 1 retries" in res["msg"]
    assert "resume" in res["msg"]
    # the other files are complete and recorded; the re-run only fetches the failed one
    hub.clear_faults()
    hub.reset_stats()
    failed, res = run_download(hub, dest)
    assert not failed and res["downloaded"] == [SHARD2]
    assert_tree_matches(hub, WEIGHTS, dest)


@pytest.mark.parametrize("fraction, direct_io", [(0.5, True), (0.3337, True), (0.3337, False)])
def test_cut_connection_resumes_by_range(hub, tmp_path, fraction, direct_io):
    sha = hub_files(hub, WEIGHTS)[SHARD2][1]
    hub.set_faults([{"kind": "cut", "path_glob": "/cdn/%s" % sha, "fraction": fraction, "count": 1}])
    failed, res = run_download(hub, tmp_path / "w", max_workers=1, direct_io=direct_io)
    assert not failed, res["msg"]
    assert res["retry_causes"] == {"cut": 1}
    gets = [r for r in hub.requests_log() if r["kind"] == "cdn_get" and sha in r["path"]]
    # resumed exactly where the bytes stopped (an odd offset too: O_DIRECT realigns by itself)
    assert len(gets) == 2 and gets[1]["range"].startswith("bytes=%d-" % int((24 << 20) * fraction)), gets
    assert res["bytes_downloaded"] == res["bytes_total"], "the first half is not fetched twice"
    assert_tree_matches(hub, WEIGHTS, tmp_path / "w")


def test_stall_is_aborted_after_stall_timeout_and_retried(hub, tmp_path):
    sha = hub_files(hub, BIG)["model-00001-of-00002.safetensors"][1]
    hub.set_faults([{"kind": "stall", "path_glob": "/cdn/%s" % sha, "fraction": 0.3, "seconds": 60, "count": 1}])
    started = time.monotonic()
    failed, res = run_download(hub, tmp_path / "b", repo_id=BIG, stall_timeout=1.5, max_workers=2)
    elapsed = time.monotonic() - started
    assert not failed, res["msg"]
    assert res["stalls"] == 1 and res["retry_causes"] == {"stall": 1}
    assert elapsed < 30, "the stalled transfer was not aborted (took %.1f s)" % elapsed
    assert_tree_matches(hub, BIG, tmp_path / "b")


def test_sigkill_mid_download_then_resume(hub, tmp_path):
    files = {p: v for p, v in hub_files(hub, BIG).items() if p.endswith(".safetensors")}
    first, second = sorted(files)
    sha2 = files[second][1]
    # the second shard stops at 50 % for a minute: the run is killed while it is in flight
    hub.set_faults([{"kind": "stall", "path_glob": "/cdn/%s" % sha2, "fraction": 0.5, "seconds": 60, "count": -1}])
    dest = tmp_path / "b"
    progress = dest / ".ct200" / "progress.json"
    proc = start_module(dict(repo_id=BIG, local_dir=str(dest), endpoint=hub.url, min_free_bytes=0,
                             max_workers=1, stall_timeout=120, allow_patterns=["*.safetensors"]))
    try:
        half = files[first][0] + files[second][0] // 2

        def far_enough():
            p = read_progress(progress)
            return p and p["bytes_fetched"] >= half - (1 << 20) and p["files_done"] >= 1

        assert wait_for(far_enough, timeout=60), read_progress(progress)
        time.sleep(2.5)  # > the 2 s state-save interval
    finally:
        kill(proc)
    assert proc.returncode == -9
    tmp = dest / ".ct200" / "tmp"
    assert len([n for n in os.listdir(tmp) if n.endswith(".part")]) == 1
    assert sha256_of(dest / first) == files[first][1], "the completed file is in place"

    hub.clear_faults()
    hub.reset_stats()
    failed, res = run_download(hub, dest, repo_id=BIG, allow_patterns=["*.safetensors"])
    assert not failed, res["msg"]
    assert res["downloaded"] == [second], "only the in-flight file is fetched"
    assert res["bytes_resumed"] >= files[second][0] // 2 - (1 << 20)
    assert res["bytes_downloaded"] == files[second][0] - res["bytes_resumed"]
    gets = [r for r in hub.requests_log() if r["kind"] == "cdn_get"]
    assert all(sha2 in r["path"] for r in gets)
    assert all(r["range"] and not r["range"].startswith("bytes=0-") for r in gets), gets
    assert hub.stats()["cdn_bytes_sent"] == res["bytes_downloaded"]
    assert not tmp.exists(), "no temp files remain"
    assert_tree_matches(hub, BIG, dest, paths=files)


def test_one_big_file_is_fetched_in_parallel_ranges(hub, tmp_path):
    failed, res = run_download(hub, tmp_path / "b", repo_id=BIG, allow_patterns=["model-00001*"], max_workers=4,
                               min_split_size="8MiB")
    assert not failed, res["msg"]
    gets = [r for r in hub.requests_log() if r["kind"] == "cdn_get"]
    assert len(gets) >= 2, "a 48 MiB file with 4 workers is split into ranges: %s" % gets
    starts = sorted(int(r["range"].split("=")[1].split("-")[0]) for r in gets)
    assert starts[0] == 0 and len(set(starts)) == len(starts) >= 2
    assert res["bytes_downloaded"] == 48 << 20, "every byte written once"
    assert_tree_matches(hub, BIG, tmp_path / "b", paths=["model-00001-of-00002.safetensors"])


def test_orphans_are_removed_and_foreign_files_adopted(hub, tmp_path):
    dest = tmp_path / "w"
    (dest / ".ct200" / "tmp").mkdir(parents=True)
    (dest / ".ct200" / "tmp" / "0123456789abcdef.deadbeef.part").write_bytes(b"x" * 100)
    hfdl = dest / ".cache" / "huggingface" / "download"
    hfdl.mkdir(parents=True)
    (hfdl / "model-00001-of-00003.safetensors.1a2b3c4d.incomplete").write_bytes(b"y" * 100)
    # a file put there by another tool: verified by hashing and kept, not fetched again
    src = tmp_path / "src"
    assert not run_download(hub, src, allow_patterns=["model-00003*"])[0]
    os.link(src / "model-00003-of-00003.safetensors", dest / "model-00003-of-00003.safetensors")
    hub.reset_stats()
    failed, res = run_download(hub, dest)
    assert not failed, res["msg"]
    assert sorted(res["removed_temp_files"]) == sorted([
        ".cache/huggingface/download/model-00001-of-00003.safetensors.1a2b3c4d.incomplete",
        ".ct200/tmp/0123456789abcdef.deadbeef.part"])
    assert res["files_adopted"] == 1 and "model-00003-of-00003.safetensors" not in res["downloaded"]
    assert not (dest / ".ct200" / "tmp").exists()
    assert_tree_matches(hub, WEIGHTS, dest)


def test_new_commit_fetches_only_changed_files(hub, tmp_path):
    repo = "ct200test/moving"
    hub.add_repo(repo, {"config.json": {"v": 1}, "a.safetensors": "2MiB", "b.safetensors": "3MiB"})
    dest = tmp_path / "m"
    failed, first = run_download(hub, dest, repo_id=repo)
    assert not failed
    hub.add_repo(repo, {"config.json": {"v": 2}, "a.safetensors": "2MiB", "b.safetensors": "4MiB"})
    hub.reset_stats()
    failed, second = run_download(hub, dest, repo_id=repo)
    assert not failed and second["commit"] != first["commit"]
    assert sorted(second["downloaded"]) == ["b.safetensors", "config.json"]
    assert_tree_matches(hub, repo, dest)
    # the old commit is still pinnable and re-verifies against its own tree
    failed, third = run_download(hub, dest, repo_id=repo, revision=first["commit"], check_mode=True)
    assert failed or third["files_to_download"] >= 1


def test_bad_input_is_refused_with_one_clear_message(hub, tmp_path):
    dest = tmp_path / "w"
    failed, res = run_download(hub, dest, min_free_bytes="ten gigs")
    assert failed and "min_free_bytes" in res["msg"] and "10GB" in res["msg"]
    failed, res = run_download(hub, dest, repo_id="not a repo")
    assert failed and "repo_id" in res["msg"]
    failed, res = run_download(hub, dest, token="  ")
    assert failed and res["code"] == "bad_token" and "whitespace-only" in res["msg"]
    failed, res = run_download(hub, dest, revision="no-such-branch")
    assert failed and res["code"] == "revision_not_found", res
    failed, res = run_download(hub, dest, allow_patterns=["*.gguf"])
    assert failed and res["code"] == "entry_not_found" and "*.gguf" in res["msg"]
    assert not dest.exists()
    assert hub.stats()["cdn_get"] == 0


def test_one_download_per_directory_at_a_time(hub, tmp_path):
    sha = hub_files(hub, BIG)["model-00001-of-00002.safetensors"][1]
    hub.set_faults([{"kind": "stall", "path_glob": "/cdn/%s" % sha, "fraction": 0.1, "seconds": 20, "count": 1}])
    dest = tmp_path / "b"
    proc = start_module(dict(repo_id=BIG, local_dir=str(dest), endpoint=hub.url, min_free_bytes=0, stall_timeout=60))
    try:
        assert wait_for(lambda: (read_progress(dest / ".ct200" / "progress.json") or {}).get("state") == "running", 30)
        failed, res = run_download(hub, dest, repo_id=BIG)
        assert failed and res["code"] == "busy" and "another hf_download" in res["msg"]
    finally:
        kill(proc)
        proc.stdout.close()
        proc.stderr.close()


def test_offline_rerun_uses_the_manifest_and_refuses_what_it_cannot_answer(hub, tmp_path):
    dest = tmp_path / "w"
    assert not run_download(hub, dest, allow_patterns=["*.json"])[0]
    hub.reset_stats()
    failed, res = run_download(hub, dest, allow_patterns=["*.json"], env={"HF_HUB_OFFLINE": "1"})
    assert not failed and res["changed"] is False and res["network_calls"] == 0
    failed, res = run_download(hub, dest, env={"HF_HUB_OFFLINE": "1"})
    assert failed and res["code"] == "offline" and "HF_HUB_OFFLINE" in res["msg"]
    assert sum(v for k, v in hub.stats().items() if isinstance(v, int) and k != "faults_fired") == 0


def test_a_server_that_ignores_range_still_yields_whole_verified_files(hub, tmp_path):
    """Some mirrors and proxies answer Range with the whole file (200). Split transfers and the
    retry after a cut body must then read from byte 0 and still end with verified files."""
    hub.honour_range = False
    sha = hub_files(hub, BIG)["model-00001-of-00002.safetensors"][1]
    hub.set_faults([{"kind": "cut", "path_glob": "/cdn/%s" % sha, "fraction": 0.5, "count": 1}])
    dest = tmp_path / "b"
    failed, res = run_download(hub, dest, repo_id=BIG, max_workers=4, min_split_size="8MiB")
    assert not failed, res["msg"]
    # bytes before each segment's start were skipped, not written: no hash mismatch, no refetch
    assert res["refetched"] == [] and res["bytes_downloaded"] == res["bytes_total"]
    assert hub.stats()["faults_fired"] == 1
    assert_tree_matches(hub, BIG, dest)
    assert "206" not in hub.stats()["status"], "the server never honoured a range"
    gets = [r for r in hub.requests_log() if r["kind"] == "cdn_get" and sha in r["path"]]
    assert len(gets) >= 2 and any(r["range"] for r in gets), gets  # split and retried, ranges ignored
    assert not (dest / ".ct200" / "tmp").exists() or not os.listdir(dest / ".ct200" / "tmp")


def test_lfs_bytes_served_straight_from_resolve_are_verified_and_keep_the_token(hub, tmp_path):
    """A Hub (or mirror) that answers LFS files on /resolve itself, without the CDN redirect."""
    hub.lfs_redirect = False
    token = token_for("granted")
    failed, res = run_download(hub, tmp_path / "g", repo_id=GATED, token=token)
    assert not failed, res.get("msg")
    assert_tree_matches(hub, GATED, tmp_path / "g")
    stats = hub.stats()
    assert stats["cdn_get"] == 0 and stats["resolve_get"] >= 2
    assert stats["authorized"]["resolve_get"] == stats["resolve_get"], "every /resolve GET carries the token"
    # same-size corruption on that path is still caught by the sha256 from the tree
    hub.reset_stats()
    hub.set_faults([{"kind": "corrupt", "path_glob": "/%s/resolve/*/model.safetensors" % GATED, "count": 1}])
    failed, res = run_download(hub, tmp_path / "g2", repo_id=GATED, token=token)
    assert not failed, res.get("msg")
    assert hub.stats()["faults_fired"] == 1 and res["refetched"] == ["model.safetensors"]
    assert_tree_matches(hub, GATED, tmp_path / "g2")
