# SPDX-License-Identifier: Apache-2.0
"""Unit tests of the download logic: disk preflight, manifest, selection, planning, engine pieces.

Real files in tmp_path; only statvfs/mount facts are injected where a test needs numbers
a real filesystem cannot be made to show (595 GB on xfs).
"""

from __future__ import annotations

import hashlib
import json
import os
import time

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import disk_preflight as dp
from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest as mf
from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer as tr
from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer_engine as eng
from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer_http as http

GB = 10**9


# ------------------------------------------------------------------ disk_preflight
def fake_fs(mapping):
    """path prefix -> (device, mountpoint, fstype, free)"""

    def lookup(path):
        for prefix, (dev, mnt, fstype, free) in mapping.items():
            if path.startswith(prefix):
                return dp.FsInfo(path, dev, mnt, fstype, free, free * 2)
        raise AssertionError(path)

    return lookup


def test_preflight_message_names_numbers_and_filesystem():
    lookup = fake_fs({"/models": ("253:1", "/models", "xfs", 593_000_000_000)})
    with pytest.raises(dp.DiskSpaceError) as err:
        dp.check_requirements([("moonshotai/Kimi-K2.6", "/models/moonshotai/Kimi-K2.6", 595_300_000_000)], 10 * GB, lookup)
    assert str(err.value).startswith("need 595.3 GB more on /models (xfs, 593.0 GB free, headroom 10 GB)")
    assert "min_free_bytes" in str(err.value)
    assert err.value.checks[0].shortfall_bytes == 595_300_000_000 + 10 * GB - 593_000_000_000


def test_preflight_sums_downloads_on_the_same_filesystem_only():
    lookup = fake_fs({
        "/models": ("253:1", "/models", "xfs", 600 * GB),
        "/scratch": ("253:2", "/scratch", "ext4", 100 * GB),
    })
    reqs = [("target", "/models/t", 590 * GB), ("drafter", "/models/d", 5 * GB), ("other", "/scratch/x", 50 * GB)]
    # each fits alone with 10 GB headroom; together target+drafter do not
    for label, path, n in reqs:
        dp.check_requirements([(label, path, n)], 4 * GB, lookup)
    with pytest.raises(dp.DiskSpaceError) as err:
        dp.check_requirements(reqs, 10 * GB, lookup)
    text = str(err.value)
    assert "need 595.0 GB more on /models (xfs, 600.0 GB free, headroom 10 GB): target 590.0 GB + drafter 5.0 GB" in text
    assert "/scratch" not in text
    checks = dp.check_requirements(reqs, 5 * GB, lookup)
    assert [c.needed_bytes for c in checks] == [595 * GB, 50 * GB]


def test_preflight_unknown_size_is_an_error_not_zero():
    lookup = fake_fs({"/": ("1:1", "/", "ext4", 10**15)})
    with pytest.raises(dp.DiskSpaceError) as err:
        dp.check_requirements([("repo", "/m", None)], 0, lookup)
    assert "unknown" in str(err.value)


def test_preflight_nothing_needed_passes_even_on_a_full_disk():
    lookup = fake_fs({"/": ("1:1", "/", "ext4", 0)})
    assert dp.check_requirements([("repo", "/m", 0)], 10 * GB, lookup)[0].ok


def test_fs_info_on_a_real_path(tmp_path):
    info = dp.fs_info(str(tmp_path / "not" / "yet" / "created"))
    vfs = os.statvfs(str(tmp_path))
    assert info.free_bytes == vfs.f_bavail * vfs.f_frsize
    assert str(tmp_path).startswith(info.mountpoint)
    with open("/proc/self/mountinfo") as handle:
        types = {m["fstype"] for m in dp.parse_mountinfo(handle.read())}
    assert info.fstype in types


def test_parse_mountinfo_unescapes_and_finds_the_type():
    text = (
        "36 35 98:0 /mnt1 /mnt\\040with\\040space rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"
        "37 25 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684096k\n"
    )
    mounts = dp.parse_mountinfo(text)
    assert mounts[0]["mountpoint"] == "/mnt with space" and mounts[0]["fstype"] == "ext3"
    assert mounts[0]["device"] == "98:0" and mounts[1]["fstype"] == "tmpfs"


@pytest.mark.parametrize("text, value", [
    (0, 0), (123, 123), ("10GB", 10 * GB), ("10 GiB", 10 << 30), ("1.5GB", 1_500_000_000),
    ("512", 512), ("64MiB", 64 << 20), ("20m", 20_000_000), ("1kB", 1000),
])
def test_parse_size(text, value):
    assert dp.parse_size(text) == value


@pytest.mark.parametrize("bad", ["ten", "-1", "10 XB", "GiB", True, -5])
def test_parse_size_refuses(bad):
    with pytest.raises(ValueError) as err:
        dp.parse_size(bad)
    assert "10GB" in str(err.value) or "negative" in str(err.value)


def test_format_bytes():
    assert dp.format_bytes(595_300_000_000) == "595.3 GB"
    assert dp.format_bytes(999) == "999 B"
    assert dp.format_headroom(10 * GB) == "10 GB"
    assert dp.format_headroom(1_500_000_000) == "1.5 GB"


# ------------------------------------------------------------------------ manifest
def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)


def test_manifest_roundtrip_and_stat_outcomes(tmp_path):
    d = str(tmp_path)
    data = os.urandom(3 << 20)
    write(os.path.join(d, "a.bin"), data)
    m = mf.Manifest.load(d)
    assert m.files == {} and m.warning is None
    st = os.stat(os.path.join(d, "a.bin"))
    sha = hashlib.sha256(data).hexdigest()
    m.record("a.bin", st, sha, sha, "c" * 40, sample_of(os.path.join(d, "a.bin"), len(data)))
    m.save()
    assert not [n for n in os.listdir(os.path.join(d, ".ct200")) if n.endswith(".tmp")]
    m2 = mf.Manifest.load(d)
    assert m2.entry("a.bin")["sha256"] == sha
    assert m2.stat_check("a.bin", sha, len(data))[0] == mf.OK
    assert m2.stat_check("a.bin", "other-oid", len(data))[0] == mf.UNKNOWN
    assert m2.stat_check("missing.bin", sha, 1)[0] == mf.MISSING
    os.utime(os.path.join(d, "a.bin"), ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert m2.stat_check("a.bin", sha, len(data))[0] == mf.TOUCHED
    with open(os.path.join(d, "a.bin"), "ab") as handle:
        handle.write(b"x")
    assert m2.stat_check("a.bin", sha, len(data))[0] == mf.SIZE


def test_manifest_damaged_file_is_ignored_with_a_warning(tmp_path):
    d = str(tmp_path)
    write(mf.manifest_path(d), b"{not json")
    m = mf.Manifest.load(d)
    assert m.files == {} and "unreadable manifest" in m.warning and "re-verified" in m.warning
    write(mf.manifest_path(d), json.dumps({"version": 99, "files": {}}).encode())
    assert "version" in mf.Manifest.load(d).warning


def test_manifest_for_another_repo_is_reset(tmp_path):
    m = mf.Manifest(str(tmp_path))
    m.bind_repo("a/b", "model")
    m.record("x", os.stat(str(tmp_path)), "s", "o", "c", None)
    m.bind_repo("a/b", "model")
    assert "x" in m.files
    m.bind_repo("c/d", "model")
    assert m.files == {} and m.data["repo_id"] == "c/d"


def sample_of(path, size):
    fd = os.open(path, os.O_RDONLY)
    try:
        return mf.sample_digest(fd, size)
    finally:
        os.close(fd)


def test_sample_digest_sees_sampled_changes_and_ignores_timestamps(tmp_path):
    path = str(tmp_path / "f")
    data = bytearray(os.urandom(8 << 20))
    write(path, bytes(data))
    before = sample_of(path, len(data))
    os.utime(path, (1, 1))
    assert sample_of(path, len(data)) == before
    offsets = mf.sample_offsets(len(data))
    assert offsets[0] == 0 and offsets[-1] == len(data) - mf.SAMPLE_BLOCK and len(offsets) == mf.SAMPLE_BLOCKS
    with open(path, "r+b") as handle:
        handle.seek(offsets[5] + 100)
        handle.write(b"\xff\xfe")
    assert sample_of(path, len(data)) != before
    small = str(tmp_path / "s")
    write(small, b"abc")
    a = sample_of(small, 3)
    write(small, b"abd")
    assert sample_of(small, 3) != a, "small files are hashed whole"


# ----------------------------------------------------------------------- selection
CASES = [
    (None, None),
    (["*.safetensors"], None),
    (["*.json", "extra/"], None),
    (None, ["*.bin", ".git*"]),
    (["model-0000[12]*"], ["*3*"]),
    (["sub/*.json"], None),
    ("*.md", "README*"),
]


@pytest.mark.parametrize("allow, ignore", CASES)
def test_selection_matches_huggingface_hub(allow, ignore):
    from huggingface_hub.utils import filter_repo_objects

    paths = ["config.json", "README.md", ".gitattributes", "model-00001.safetensors", "model-00002.safetensors",
             "model-00003.safetensors", "extra/a.bin", "extra/b/c.json", "sub/x.json", "sub/deep/y.json"]
    tree = {p: tr.tree_entry(1, "o", False) for p in paths}
    ours, _unused = tr.select(tree, [allow] if isinstance(allow, str) else allow, [ignore] if isinstance(ignore, str) else ignore)
    theirs = sorted(filter_repo_objects(paths, allow_patterns=allow, ignore_patterns=ignore))
    assert ours == theirs


# ------------------------------------------------------------------------ planning
def _opts(d, **kw):
    return tr.Options(repo_id="org/name", local_dir=d, endpoint="http://127.0.0.1:9", min_free_bytes=0, **kw)


def _tree(files):
    return {p: tr.tree_entry(len(b), hashlib.sha256(b).hexdigest() if lfs else _blob(b), lfs) for p, (b, lfs) in files.items()}


def _blob(b):
    return hashlib.sha1(b"blob %d\0" % len(b) + b).hexdigest()


def test_plan_categories(tmp_path):
    d = str(tmp_path)
    files = {
        "ok.safetensors": (os.urandom(2 << 20), True),
        "touched.safetensors": (os.urandom(2 << 20), True),
        "foreign.safetensors": (os.urandom(1 << 20), True),
        "corrupt.safetensors": (os.urandom(1 << 20), True),
        "short.safetensors": (os.urandom(1 << 20), True),
        "missing.safetensors": (os.urandom(1 << 20), True),
        "config.json": (b'{"a": 1}', False),
    }
    tree = _tree(files)
    m = mf.Manifest.load(d)
    for path, (data, _lfs) in files.items():
        if path == "missing.safetensors":
            continue
        if path == "short.safetensors":
            data = data[:100]
        if path == "corrupt.safetensors":
            data = b"\0" + data[1:]
        write(os.path.join(d, path), data)
    for path in ("ok.safetensors", "touched.safetensors", "config.json"):
        full = os.path.join(d, path)
        st = os.stat(full)
        m.record(path, st, tree[path]["oid"], tree[path]["oid"], "c" * 40, sample_of(full, st.st_size))
    os.utime(os.path.join(d, "touched.safetensors"), (time.time() + 10, time.time() + 10))

    plan = tr.make_plan(_opts(d), "c" * 40, tree, m)
    action = {f.path: (f.action, f.reason) for f in plan.files}
    assert action["ok.safetensors"][0] == "present"
    assert action["config.json"][0] == "present"
    assert action["touched.safetensors"] == ("present", "verified by hashing"), "a changed stat means a full hash"
    assert action["foreign.safetensors"] == ("adopt", "verified by hashing")
    assert action["corrupt.safetensors"][0] == "fetch" and "content differs" in action["corrupt.safetensors"][1]
    assert action["short.safetensors"] == ("fetch", "size 100, expected %d" % (1 << 20))
    assert action["missing.safetensors"] == ("fetch", "missing")
    assert plan.hashed == 3  # touched + foreign + corrupt; nothing the manifest vouches for
    assert plan.bytes_to_fetch == 3 << 20
    # the corrupt and the short file are replaced: their bytes count as reclaimable
    assert plan.disk_needed == (3 << 20) - (1 << 20) - 100
    touched = os.stat(os.path.join(d, "touched.safetensors"))
    assert m.entry("touched.safetensors")["mtime_ns"] == touched.st_mtime_ns
    assert m.entry("touched.safetensors")["ctime_ns"] == touched.st_ctime_ns
    assert m.entry("touched.safetensors")["ino"] == touched.st_ino
    assert "corrupt.safetensors" not in m.files

    full = tr.make_plan(_opts(d, verify="full"), "c" * 40, tree, m)
    assert full.hashed == 5
    assert {f.path for f in full.to_fetch} == {"corrupt.safetensors", "short.safetensors", "missing.safetensors"}
    size_only = tr.make_plan(_opts(d, verify="size"), "c" * 40, tree, mf.Manifest.load(d))
    assert size_only.hashed == 0
    assert {f.path for f in size_only.to_fetch} == {"short.safetensors", "missing.safetensors"}
    # only the explicit opt-in re-accepts a touched file by its sampled blocks
    os.utime(os.path.join(d, "touched.safetensors"), (time.time() + 20, time.time() + 20))
    sampled = tr.make_plan(_opts(d, verify="sample-unsafe"), "c" * 40, tree, m)
    action = {f.path: (f.action, f.reason) for f in sampled.files}
    assert action["touched.safetensors"][0] == "refresh" and "sample-unsafe" in action["touched.safetensors"][1]


def test_plan_refuses_an_unknown_size(tmp_path):
    tree = {"a.safetensors": {"size": None, "oid": "x" * 64, "lfs": True}}
    with pytest.raises(tr.DownloadError) as err:
        tr.make_plan(_opts(str(tmp_path)), "c" * 40, tree, mf.Manifest.load(str(tmp_path)))
    assert err.value.code == "bad_listing" and "a.safetensors" in err.value.message and "size" in err.value.message


def test_options_validation_names_every_problem(tmp_path):
    opts = tr.Options(repo_id="bad id", local_dir=str(tmp_path), verify="md5", max_workers=0, endpoint="ftp://x")
    with pytest.raises(tr.DownloadError) as err:
        opts.validate()
    for word in ("repo_id", "verify", "max_workers", "endpoint"):
        assert word in err.value.message
    assert err.value.code == "bad_argument"


def test_urls_quote_paths_and_revisions():
    opts = tr.Options(repo_id="org/n", local_dir="/x", endpoint="https://hub.example/", repo_type="dataset")
    assert opts.resolve_url("a" * 40, "dir/file name.bin") == "https://hub.example/datasets/org/n/resolve/%s/dir/file%%20name.bin" % ("a" * 40)
    opts.revision = "refs/pr/1"
    assert opts.revision_api_url() == "https://hub.example/api/datasets/org/n/revision/refs%2Fpr%2F1"


# -------------------------------------------------------------------------- engine
class _PF(object):
    def __init__(self, path, size, oid="0" * 64, lfs=True):
        self.path, self.size, self.oid, self.lfs, self.url = path, size, oid, lfs, "http://x/" + path


def test_hash_frontier_follows_contiguous_written_bytes(tmp_path):
    job = eng.FileJob(_PF("a", 100), str(tmp_path), True)
    job.segments = [eng.Segment(job, 0, 40), eng.Segment(job, 40, 70), eng.Segment(job, 70, 100)]
    assert job.frontier() == 0
    job.segments[1].pos = 70  # second segment complete, first not started
    assert job.frontier() == 0
    job.segments[0].pos = 25
    assert job.frontier() == 25
    job.segments[0].pos = 40
    assert job.frontier() == 70
    job.segments[2].pos = 80
    assert job.frontier() == 80
    job.hash_pos = 80
    assert job.frontier() == 80 and not job.all_written()


def test_split_takes_half_of_the_largest_remaining_segment(tmp_path):
    e = eng.Engine(str(tmp_path), [_PF("a", 512 << 20), _PF("b", 100 << 20)], {}, set(), None, "c" * 40,
                   split_min=64 << 20)
    a, b = e.jobs
    sa, sb = eng.Segment(a, 0, a.size, 10 << 20), eng.Segment(b, 0, b.size)
    a.segments, b.segments = [sa], [sb]
    e.active = {sa, sb}
    new = e._split_largest()
    assert new.file is a and sa.end == new.start and new.end == a.size
    assert new.start % eng.BUF_SIZE == 0 and abs(new.start - (10 << 20) - ((a.size - (10 << 20)) // 2)) < eng.BUF_SIZE
    sb.pos = b.size - (100 << 20) + (1 << 20)
    e.active = {sb}
    assert e._split_largest() is None, "less than 2 x split_min left: no split"
    e.max_workers = 4
    sa.pos, sa.end = 0, a.size
    e.active = {sa, sb}
    assert e._split_largest() is None, "two whole files on four connections: no split"


def test_partial_state_is_only_trusted_when_it_matches(tmp_path):
    d = str(tmp_path)
    os.makedirs(eng.tmp_dir(d))
    key = eng.part_key("a.bin", "f" * 64)
    base = os.path.join(eng.tmp_dir(d), key)
    write(base + ".part", b"x" * 300)
    state = {"path": "a.bin", "oid": "f" * 64, "size": 1000, "segments": [[0, 500, 200], [500, 1000, 500]]}
    write(base + ".state", json.dumps(state).encode())
    done, segs = eng.read_partial(d, "a.bin", "f" * 64, 1000)
    assert done == 200 and segs == [[0, 500, 200], [500, 1000, 500]]
    assert eng.read_partial(d, "a.bin", "e" * 64, 1000)[0] == 0, "other content"
    assert eng.read_partial(d, "a.bin", "f" * 64, 999)[0] == 0, "other size"
    state["segments"] = [[0, 500, 400], [500, 1000, 500]]  # claims more than the part file holds
    write(base + ".state", json.dumps(state).encode())
    assert eng.read_partial(d, "a.bin", "f" * 64, 1000)[0] == 0


def test_content_range_and_retry_after_parsing():
    assert eng._parse_content_range("bytes 100-199/1000") == (100, 1000)
    assert eng._parse_content_range("bytes 0-9/*") == (0, None)
    assert eng._parse_content_range("garbage") == (-1, None)
    assert http.parse_retry_after("7") == 7.0
    assert http.parse_retry_after(None) is None and http.parse_retry_after("soon") is None
    assert 29 <= http.parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412480.0) <= 31


def test_redirect_origin_rule_mirrors_huggingface_hub():
    from huggingface_hub.utils._http import _url_origin

    for url in ("https://huggingface.co/x", "http://127.0.0.1:8080/a", "https://cdn-lfs.hf.co:443/b", "http://LOCALHOST/c"):
        assert http.origin_of(url) == _url_origin(url)
    assert http.origin_of("https://hf.co/x") in http.HUB_ORIGINS
    assert http.origin_of("https://us.aws.cdn.hf.co/x") not in http.HUB_ORIGINS


def test_http_error_carries_what_hf_errors_classify_needs():
    from ansible_collections.ct200.deploy.plugins.module_utils.hf_errors import Context, classify

    headers = http._Headers([("X-Error-Code", "GatedRepo"), ("X-Error-Message", "awaiting a review")])
    exc = http.HttpError(403, "http://h/o/r/resolve/c/f?sig=secret", headers, "")
    assert "sig=secret" not in str(exc)
    verdict = classify(exc, Context(repo_id="o/r", token_sent=True))
    assert verdict.code == "pending"
    assert http.HttpError(503, "http://h/x", http._Headers([("Retry-After", "3")]), "").retry_after == 3.0
    assert not http.HttpError(404, "http://h/x", http._Headers([]), "").retryable


# ------------------------------------------------------------------- disk_space module
def test_disk_space_module_checks_requirements_together(tmp_path):
    from modhelper import run_module

    from ansible_collections.ct200.deploy.plugins.modules import disk_space

    free = dp.fs_info(str(tmp_path)).free_bytes
    half = free // 2 + 1
    reqs = [{"label": "target", "path": str(tmp_path / "t"), "bytes": half},
            {"label": "drafter", "path": str(tmp_path / "d"), "bytes": half}]
    failed, res = run_module(disk_space.main, {"requirements": reqs[:1], "min_free_bytes": 0})
    assert not failed and res["changed"] is False and res["needed_bytes"] == half
    failed, res = run_module(disk_space.main, {"requirements": reqs, "min_free_bytes": 0})
    assert failed, "each half fits alone, both together do not"
    assert "target %s + drafter %s" % (dp.format_bytes(half), dp.format_bytes(half)) in res["msg"]
    assert res["filesystems"][0]["shortfall_bytes"] > 0
    failed, res = run_module(disk_space.main, {"requirements": [dict(reqs[0], bytes=None)]})
    assert failed and "unknown" in res["msg"]
    failed, res = run_module(disk_space.main, {"requirements": reqs[:1], "min_free_bytes": "lots"})
    assert failed and "min_free_bytes" in res["msg"]
    assert not (tmp_path / "t").exists()


# --------------------------------------------------------------------- progress lines
def test_progress_line_formats():
    from ansible_collections.ct200.deploy.plugins.module_utils.hf_progress import format_line

    now = time.time()
    p = {"state": "running", "updated": now, "bytes_total": 595_300_000_000, "bytes_done": 123_450_000_000,
         "rate": 1.1e9, "eta_seconds": 6727, "files_done": 12, "files_total": 64, "retries": 3}
    assert format_line("target moonshotai/Kimi-K2.6", p, not_before=now - 1) == (
        "target moonshotai/Kimi-K2.6: 123.45/595.30 GB (20.7 %), 1100 MB/s, ETA 1h52m, files 12/64, retries 3")
    assert format_line("t", dict(p, rate=0, retries=0), not_before=now - 1).endswith("0 MB/s, ETA ?, files 12/64")
    assert format_line("t", p, not_before=now + 1) == "t: planning", "a progress file of an earlier run is ignored"
    assert format_line("t", None) == "t: planning"
    assert format_line("t", dict(p, state="done"), not_before=0) == "t: finishing"
    assert format_line("t", p, finished=True) == "t: finished"
    assert format_line("t", p, finished=True, failed=True) == "t: failed"


def test_shutdown_socket_ends_a_blocked_read_from_another_thread():
    """The stall watchdog (engine) and the peer probe's time box (fan-out) abort a read this one way."""
    import socket
    import threading

    class Holder(object):
        sock = None

    ours, theirs = socket.socketpair()
    try:
        holder = Holder()
        http.shutdown_socket(holder)  # no socket yet: nothing to do
        holder.sock = ours
        got = {}
        reader = threading.Thread(target=lambda: got.setdefault("data", ours.recv(1)), daemon=True)
        reader.start()
        time.sleep(0.1)
        http.shutdown_socket(holder)
        reader.join(5)
        assert not reader.is_alive() and got["data"] == b""
        ours.close()
        http.shutdown_socket(holder)  # closed already: no error
    finally:
        ours.close()
        theirs.close()
