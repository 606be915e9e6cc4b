# SPDX-License-Identifier: Apache-2.0
"""A peer fetches in path order, one file after another (the next starts when the one before is
almost done), over real HTTP from a parent that paces its answers: its own children can then take
each file early instead of waiting for a batch of ``parallel_files`` that completes together."""

from __future__ import annotations

import hashlib
import http.server
import threading
import time

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import fanout

SIZE = 2 << 20  # more than fanout.OVERLAP_BYTES
CHUNK = 64 << 10


@pytest.fixture()
def parent():
    """A peer's file server: HEAD/GET of ``files``, CHUNK every 5 ms per response; no progress document.
    ``served`` holds (path, began, ended) of every GET."""
    server = _file_server()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture()
def other_peer():
    server = _file_server()
    yield server
    server.shutdown()
    server.server_close()


def _file_server():
    files, served = {}, []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args):
            pass

        def _head(self):
            path = self.path.split("/", 2)[-1]
            if path not in files:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            self.send_response(200)
            self.send_header("Content-Length", str(len(files[path])))
            self.end_headers()
            return path

        def do_HEAD(self):  # noqa: N802 (http.server's name)
            self._head()

        def do_GET(self):  # noqa: N802
            path = self._head()
            if path is None:
                return
            began = time.monotonic()
            data = files[path]
            for pos in range(0, len(data), CHUNK):
                self.wfile.write(data[pos:pos + CHUNK])
                time.sleep(0.005)
            served.append((path, began, time.monotonic()))

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.files, server.served = files, served
    server.spans = lambda count: _spans_once_recorded(served, count)
    server.base = "http://127.0.0.1:%d/model" % server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _spans_once_recorded(served, count, limit_s=5.0):
    """The server's spans once ``count`` GETs are recorded: a handler thread records its span after its
    last write, which the client may have read, verified and returned on before that thread runs again."""
    deadline = time.monotonic() + limit_s
    while len(served) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return sorted(served, key=lambda span: span[1])


def most_at_once(spans):
    events = sorted([(began, 1) for _p, began, _e in spans] + [(ended, -1) for _p, _b, ended in spans])
    now = best = 0
    for _when, step in events:
        now += step
        best = max(best, now)
    return best


def test_a_peer_fetches_one_file_after_another_in_path_order(tmp_path, parent):
    listing = {}
    for i in range(6):
        path = "model-%05d-of-00006.safetensors" % (i + 1)
        data = hashlib.sha256(path.encode()).digest() * (SIZE // 32)
        parent.files[path] = data
        listing[path] = {"size": len(data), "oid": hashlib.sha256(data).hexdigest(), "lfs": True}
    source = fanout.Source("parent", "h1", parent.base, wait=True)
    fetcher = fanout.Fetcher(str(tmp_path), "fo/site", "c" * 40, listing, [source], parallel_files=4, poll=0.01,
                             peer_stall=10, stall_timeout=10)
    result = fetcher.run()
    assert result["files_fetched"] == 6 and result["bytes_by_kind"]["parent"] == 6 * SIZE
    spans = parent.spans(len(listing))
    assert [p for p, _b, _e in spans] == sorted(listing), "not fetched in path order"
    assert most_at_once(spans) <= 2, "files fetched side by side complete together: %s" % spans
    verified = sorted(listing, key=lambda p: result["file_times"][p]["verified"])
    assert verified == sorted(listing)
    assert all(result["file_times"][p]["source"] == "h1" for p in listing)


class SiblingProbe(fanout.Probe):
    """The real probe for the parent; for the sibling (``SIBLING``) a file is there ``lag`` seconds
    after this host's poller first asked for it, its progress moving meanwhile; ``down`` answers
    "down" for the sibling."""

    SIBLING = "http://sibling.invalid/model"

    def __init__(self, lag, down=False):
        super().__init__(timeout=5.0)
        self.lag, self.down, self.asked, self.had = lag, down, {}, {}

    def has(self, base, path, size):
        if base != self.SIBLING:
            return super().has(base, path, size)
        if self.down:
            return "down"
        first = self.asked.setdefault(path, time.monotonic())
        if time.monotonic() - first >= self.lag:
            self.had.setdefault(path, time.monotonic())
            return "has"
        return "lacks"

    def progress(self, base):
        if base != self.SIBLING:
            return super().progress(base)
        return ("running", round(time.monotonic(), 1))


def _listing(parent, count):
    listing = {}
    for i in range(count):
        path = "model-%05d-of-%05d.safetensors" % (i + 1, count)
        data = hashlib.sha256(path.encode()).digest() * (SIZE // 32)
        parent.files[path] = data
        listing[path] = {"size": len(data), "oid": hashlib.sha256(data).hexdigest(), "lfs": True}
    return listing


def test_a_second_child_takes_each_file_after_its_earlier_sibling(tmp_path, parent):
    listing = _listing(parent, 3)
    probe = SiblingProbe(lag=0.3)
    sibling = fanout.Source("peer", "h2", SiblingProbe.SIBLING)
    fetcher = fanout.Fetcher(str(tmp_path), "fo/site", "c" * 40, listing, [fanout.Source("parent", "h1", parent.base, wait=True)],
                             poll=0.01, peer_stall=10, stall_timeout=10, probe=probe, after=sibling)
    result = fetcher.run()
    assert result["files_fetched"] == 3
    began = dict((path, start) for path, start, _end in parent.spans(len(listing)))
    for path in listing:  # the parent was asked for each file only once the sibling had it
        assert began[path] >= probe.had[path], (path, began[path], probe.had[path])
    assert fetcher.after is sibling, "a sibling that keeps up stays the one to wait for"


def test_a_sibling_that_is_down_is_not_waited_for(tmp_path, parent):
    listing = _listing(parent, 2)
    probe = SiblingProbe(lag=60, down=True)
    fetcher = fanout.Fetcher(str(tmp_path), "fo/site", "c" * 40, listing, [fanout.Source("parent", "h1", parent.base, wait=True)],
                             poll=0.01, peer_stall=10, stall_timeout=10, probe=probe,
                             after=fanout.Source("peer", "h2", SiblingProbe.SIBLING))
    started = time.monotonic()
    result = fetcher.run()
    assert result["files_fetched"] == 2 and fetcher.after is None
    assert time.monotonic() - started < 10, "waited for a sibling that is down"


def test_the_last_large_file_comes_from_the_final_route_and_the_rest_from_the_tree(tmp_path, parent, other_peer):
    listing = _listing(parent, 3)
    other_peer.files.update(parent.files)
    parent.files["z-config.json"] = other_peer.files["z-config.json"] = b"{}"
    listing["z-config.json"] = {"size": 2, "oid": fanout_blob_sha1(b"{}"), "lfs": False}
    final = fanout.FinalRoute(fanout.Source("seed", "h0", other_peer.base, wait=True))
    fetcher = fanout.Fetcher(str(tmp_path), "fo/site", "c" * 40, listing, [fanout.Source("parent", "h1", parent.base, wait=True)],
                             poll=0.01, peer_stall=10, stall_timeout=10, final=final)
    result = fetcher.run()
    assert result["files_fetched"] == 4
    sources = dict((path, seen["source"]) for path, seen in result["file_times"].items())
    last = "model-00003-of-00003.safetensors"  # the small config after it does not hold a link: the tree's
    assert sources == dict((path, "h0" if path == last else "h1") for path in listing), sources
    assert [path for path, _b, _e in other_peer.spans(1)] == [last]


def test_a_final_sender_that_is_down_leaves_the_last_file_to_the_tree(tmp_path, parent):
    listing = _listing(parent, 2)
    final = fanout.FinalRoute(fanout.Source("seed", "h0", "http://127.0.0.1:9/model", wait=True))
    fetcher = fanout.Fetcher(str(tmp_path), "fo/site", "c" * 40, listing, [fanout.Source("parent", "h1", parent.base, wait=True)],
                             poll=0.01, peer_stall=10, stall_timeout=10, final=final)
    result = fetcher.run()
    assert result["files_fetched"] == 2 and final.source.down
    assert set(seen["source"] for seen in result["file_times"].values()) == {"h1"}


def test_the_final_file_waits_for_the_earlier_receiver_of_the_same_sender(tmp_path, parent):
    listing = _listing(parent, 2)
    probe = SiblingProbe(lag=0.3)
    final = fanout.FinalRoute(fanout.Source("seed", "h0", parent.base, wait=True),
                              after=fanout.Source("peer", "h2", SiblingProbe.SIBLING))
    fetcher = fanout.Fetcher(str(tmp_path), "fo/site", "c" * 40, listing, [fanout.Source("parent", "h1", parent.base, wait=True)],
                             poll=0.01, peer_stall=10, stall_timeout=10, probe=probe, final=final)
    fetcher.run()
    last = sorted(listing)[-1]
    began = dict((path, start) for path, start, _end in parent.spans(len(listing)))
    assert set(probe.had) == {last}, "only the final file waits for the final route's earlier receiver"
    assert began[last] >= probe.had[last]


def fanout_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_the_final_file_skips_a_sender_the_tree_already_found_down(tmp_path, parent, other_peer):
    listing = _listing(parent, 2)
    other_peer.files.update(parent.files)
    seed = fanout.Source("seed", "h0", other_peer.base, wait=False)
    seed.down = True  # as after a refused connection earlier in the run
    final = fanout.FinalRoute(fanout.Source("seed", "h0", other_peer.base, wait=True))
    fetcher = fanout.Fetcher(str(tmp_path), "fo/site", "c" * 40, listing,
                             [fanout.Source("parent", "h1", parent.base, wait=True), seed],
                             poll=0.01, peer_stall=10, stall_timeout=10, final=final)
    result = fetcher.run()
    assert result["files_fetched"] == 2 and other_peer.served == []
    assert set(seen["source"] for seen in result["file_times"].values()) == {"h1"}


def test_a_peer_takes_the_files_stored_in_git_first_then_the_weights_in_path_order(tmp_path, parent):
    """The seed fetches in the same order (hf_transfer_plan.fetch_order), so the index, which sorts after the
    last shard by path, is not the file every host takes last (the benchmark's longest hop, 0.8 s)."""
    listing = _listing(parent, 3)
    for path in ("model.safetensors.index.json", "config.json"):
        parent.files[path] = b'{"n": "%s"}' % path.encode()
        listing[path] = {"size": len(parent.files[path]), "oid": fanout_blob_sha1(parent.files[path]), "lfs": False}
    source = fanout.Source("parent", "h1", parent.base, wait=True)
    fetcher = fanout.Fetcher(str(tmp_path), "fo/site", "c" * 40, listing, [source], poll=0.01, peer_stall=10,
                             stall_timeout=10)
    result = fetcher.run()
    assert result["files_fetched"] == 5
    asked = [path for path, _b, _e in parent.spans(5)]
    assert asked[:2] == ["config.json", "model.safetensors.index.json"], asked
    assert asked[2:] == ["model-%05d-of-00003.safetensors" % i for i in (1, 2, 3)], asked
