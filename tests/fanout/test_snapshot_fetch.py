# SPDX-License-Identifier: Apache-2.0
"""The fan-out's fetch into a commit's snapshot: a file whose oid did not change is hard-linked from the kept
snapshot, so a revision that changes only config.json costs config.json's bytes from the peers too."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import threading

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import fanout, hf_manifest

SHARDS = {"model-00001.safetensors": os.urandom(300_000), "model-00002.safetensors": os.urandom(200_000)}
OLD = {"config.json": b'{"rev": 1}'}
NEW = {"config.json": b'{"rev": 2, "changed": true}'}


def listing(files):
    return dict((path, {"size": len(data), "oid": hashlib.sha256(data).hexdigest(), "lfs": True})
                for path, data in files.items())


class Counting(http.server.SimpleHTTPRequestHandler):
    sent = 0

    def copyfile(self, source, outputfile):
        data = source.read()
        type(self).sent += len(data)
        outputfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def peer(tmp_path):
    served = tmp_path / "served"
    (served / "fo").mkdir(parents=True)
    handler = type("Handler", (Counting,), {"sent": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield served / "fo", "http://127.0.0.1:%d/fo" % server.server_address[1], handler
    server.shutdown()


def serve(directory, files):
    for path, data in files.items():
        (directory / path).write_bytes(data)


def fetch(root, commit, files, url):
    sources = [fanout.Source("seed", "seed", url)]
    return fanout.Fetcher(str(root), "fo/site", commit, listing(files), sources, peer_wait=0, layout="snapshots").run()


def test_a_config_only_revision_fetches_only_config_json_from_the_peers(tmp_path, peer):
    served, url, handler = peer
    root = tmp_path / "models" / "fo" / "site"
    first_files = dict(SHARDS, **OLD)
    serve(served, first_files)
    first = fetch(root, "1" * 40, first_files, url)
    old = str(root / "snapshots" / ("1" * 40))
    assert first["local_dir"] == old and first["bytes_fetched"] == sum(len(v) for v in first_files.values())
    assert hf_manifest.Manifest.load(old).complete == "1" * 40
    before = dict((p, os.lstat(os.path.join(old, p))) for p in first_files)

    second_files = dict(SHARDS, **NEW)
    serve(served, second_files)
    handler.sent = 0
    second = fetch(root, "2" * 40, second_files, url)
    new = str(root / "snapshots" / ("2" * 40))
    assert second["local_dir"] == new and second["changed"]
    assert second["bytes_fetched"] == len(NEW["config.json"]) == handler.sent
    assert second["files_linked"] == len(SHARDS) and second["bytes_linked"] == sum(len(v) for v in SHARDS.values())
    for path, st in before.items():
        now = os.lstat(os.path.join(old, path))
        assert (now.st_ino, now.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
        if path in SHARDS:
            assert os.lstat(os.path.join(new, path)).st_ino == st.st_ino
    with open(os.path.join(new, "config.json"), "rb") as handle:
        assert handle.read() == NEW["config.json"]

    # both snapshots verified by their manifests: a re-run of either moves nothing and hashes nothing
    handler.sent = 0
    again = fetch(root, "1" * 40, first_files, url)
    assert not again["changed"] and again["bytes_fetched"] == 0 and handler.sent == 0
    manifest = hf_manifest.Manifest.load(old)
    assert all(manifest.stat_check(p, manifest.entry(p)["oid"], len(d))[0] == hf_manifest.OK for p, d in first_files.items())
