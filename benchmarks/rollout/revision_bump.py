# SPDX-License-Identifier: Apache-2.0
"""Revision bump: the Hub bytes a commit that changes one small file costs a host that holds the previous commit.

On a local Hub (tests/support/localhub): commit 1 (config.json, a tokenizer file, three 8 MiB shards) is downloaded
with hf_download's engine into ``<root>/snapshots/<c1>``; commit 2 changes config.json only.  Downloading commit 2
into its own snapshot beside the first must cost config.json's bytes: every other file is hard-linked from the kept
snapshot.  Figures (ratios, never wall time):

* ``revision_bump_hub_bytes_over_changed``: file bytes the Hub sent for commit 2 / len(config.json) (goal <= 1.01).
  File bytes are the 2xx answers of /resolve and the CDN; ``revision_bump_hub_bytes_raw`` adds the small bodies of
  the Hub's redirects.
* ``baseline_fresh_dir_hub_bytes_over_changed``: the same commit 2 into an empty directory (no kept snapshot), in
  the same run: what staging a new commit would cost without reuse.
* ``revision_bump_peer_bytes_over_changed``: the same bump through the fan-out's fetcher (hf_fanout_fetch's engine)
  from a peer serving commit 2: bytes from the peer / len(config.json).
* ``old_snapshot_untouched``, ``new_snapshot_verified``.

    python benchmarks/rollout/revision_bump.py --json FILE

``measure()`` returns the dict (benchmarks/rollout/bench_rollout.py imports it).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import http.server
import json
import os
import shutil
import sys
import tempfile
import threading

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _path in (os.path.join(REPO, "tests", "support"), os.path.join(REPO, "collections")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

REPO_ID = "bench/revision-bump"
SHARD = 8 << 20


def _files(rev):
    config = json.dumps({"model_type": "bench", "revision": rev, "rope_theta": 50000.0}).encode()
    out = {"config.json": config, "tokenizer_config.json": json.dumps({"model_max_length": 65536}).encode()}
    for index in range(3):
        out["model-%05d-of-00003.safetensors" % (index + 1)] = hashlib.sha256(b"shard%d" % index).digest() * (SHARD // 32)
    return out


def _commit(hub, files, message):
    if hasattr(hub, "commit"):
        return hub.commit(REPO_ID, {"config.json": files["config.json"]}, message)
    return hub.add_repo(REPO_ID, files).commit  # older LocalHub: the repo re-added, unchanged files keep their oid


def _file_bytes(hub):
    file_bytes = raw = 0
    for r in hub.requests_log():
        if r["kind"] in ("resolve_get", "cdn_get"):
            raw += r["bytes_sent"]
            if 200 <= r["status"] < 300:
                file_bytes += r["bytes_sent"]
    return file_bytes, raw


def _download(hub, root, layout="snapshots"):
    from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer

    opts = hf_transfer.Options(repo_id=REPO_ID, local_dir=root, endpoint=hub.url, layout=layout, min_free_bytes=0,
                               progress_interval=5.0)
    return hf_transfer.run(opts)


def _ids(directory, paths):
    return dict((p, (os.lstat(os.path.join(directory, p)).st_ino, os.lstat(os.path.join(directory, p)).st_mtime_ns))
                for p in paths)


class _Counting(http.server.SimpleHTTPRequestHandler):
    sent = 0

    def copyfile(self, source, outputfile):
        data = source.read()
        type(self).sent += len(data)
        outputfile.write(data)

    def log_message(self, *args):
        pass


def _peer_bump(work, first, second, c1, c2):
    """The fan-out fetcher: commit 1 then commit 2 from a peer; bytes the peer sent for commit 2."""
    from ansible_collections.ct200.deploy.plugins.module_utils import fanout

    served = os.path.join(work, "peer", "m")
    os.makedirs(served)
    handler = type("Handler", (_Counting,), {"sent": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=os.path.dirname(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d/m" % server.server_address[1]
    root = os.path.join(work, "peer-host")
    try:
        for commit, files in ((c1, first), (c2, second)):
            for path, data in files.items():
                with open(os.path.join(served, path), "wb") as handle:
                    handle.write(data)
            listing = dict((p, {"size": len(d), "oid": hashlib.sha256(d).hexdigest(), "lfs": True}) for p, d in files.items())
            handler.sent = 0
            result = fanout.Fetcher(root, REPO_ID, commit, listing, [fanout.Source("seed", "seed", url)], peer_wait=0,
                                    layout="snapshots").run()
        return handler.sent, result
    finally:
        server.shutdown()


def measure(workdir=None):
    """Run the bump on a fresh local Hub; returns the figures (see the module docstring)."""
    from localhub import LocalHub

    from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest

    work = tempfile.mkdtemp(prefix="ct200-revision-bump-", dir=workdir)
    hub = LocalHub(os.path.join(work, "hub"), include_defaults=False)
    try:
        first = _files(1)
        hub.add_repo(REPO_ID, dict(first))
        hub.start()
        root = os.path.join(work, "models", REPO_ID)
        one = _download(hub, root)
        old = one["local_dir"]
        before = _ids(old, first)
        second = dict(first, **{"config.json": _files(2)["config.json"]})
        c2 = _commit(hub, second, "change config.json only")
        changed = len(second["config.json"])
        hub.reset_stats()
        two = _download(hub, root)
        hub_bytes, raw = _file_bytes(hub)
        hub.reset_stats()
        _download(hub, os.path.join(work, "fresh"), layout="snapshots")
        fresh_bytes, _raw = _file_bytes(hub)
        manifest = hf_manifest.Manifest.load(two["local_dir"])
        verified = manifest.complete == c2 and all(
            manifest.stat_check(p, (manifest.entry(p) or {}).get("oid"), len(d))[0] == hf_manifest.OK
            for p, d in second.items())
        peer_bytes, peer = _peer_bump(work, first, second, one["commit"], c2)
        return {
            "revision_bump_hub_bytes_over_changed": round(hub_bytes / changed, 4),
            "revision_bump_hub_bytes": hub_bytes,
            "revision_bump_hub_bytes_raw": raw,
            "revision_bump_changed_bytes": changed,
            "revision_bump_files_linked": two.get("files_linked"),
            "revision_bump_bytes_linked": two.get("bytes_linked"),
            "baseline_fresh_dir_hub_bytes_over_changed": round(fresh_bytes / changed, 1),
            "revision_bump_peer_bytes_over_changed": round(peer_bytes / changed, 4),
            "revision_bump_peer_files_linked": peer.get("files_linked"),
            "old_snapshot_untouched": _ids(old, first) == before,
            "new_snapshot_verified": bool(verified),
            "goal_revision_bump_hub_bytes_over_changed": 1.01,
        }
    finally:
        hub.stop()
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    figures = measure()
    text = json.dumps(figures, indent=2, sort_keys=True)
    print(text)
    if args.json:
        with open(args.json, "w") as handle:
            handle.write(text + "\n")
    return 0 if figures["revision_bump_hub_bytes_over_changed"] <= 1.01 else 1


if __name__ == "__main__":
    sys.exit(main())
