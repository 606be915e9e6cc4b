# SPDX-License-Identifier: Apache-2.0
"""A hostile peer cannot make the fan-out fetcher read without limit (issue 18, item 4).

The progress document of a peer is polled every second for the whole download: a peer that advertises
a 1 GiB document, streams endless chunks or trickles one byte at a time gets its connection closed
after at most ``fanout.STATUS_BODY_MAX`` bytes, within the probe's timeout, every poll."""

from __future__ import annotations

import threading
import time

import pytest

from hostile_servers import HostilePeer
from ansible_collections.ct200.deploy.plugins.module_utils import fanout

TIMEOUT = 1.0
# what the kernel may have taken from the peer beyond what was read (socket buffers on both ends)
SLACK = 4 << 20


def _timed_progress(base):
    """(seconds, value) of one Probe.progress, given up (None seconds) after 10 s."""
    box = {}

    def run():
        started = time.monotonic()
        box["value"] = fanout.Probe(timeout=TIMEOUT).progress(base)
        box["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    return box.get("seconds"), box.get("value")


@pytest.mark.parametrize("mode", ["huge", "chunked", "trickle"])
def test_a_hostile_progress_document_is_read_within_bounds(mode):
    with HostilePeer(mode) as peer:
        seconds, value = _timed_progress(peer.base)
        sent_then = peer.sent
        time.sleep(0.5)
        sent_later = peer.sent
    assert seconds is not None, "the probe was still reading from the peer after 10 s"
    assert seconds <= TIMEOUT + 1.0, "one poll took %.1f s (time box %.1f s)" % (seconds, TIMEOUT)
    assert value is None, value
    assert sent_then <= fanout.STATUS_BODY_MAX + SLACK, "%d bytes were taken from the peer" % sent_then
    assert sent_later - sent_then <= SLACK, "the connection stayed open and kept being read"


def test_a_kept_alive_peer_stays_kept_alive_for_small_documents(tmp_path):
    """The bound does not cost the well-behaved case its keep-alive (one connection for many polls)."""
    import http.server
    import json

    connections = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def setup(self):
            super().setup()
            connections.append(self.client_address)

        def do_GET(self):
            body = json.dumps({"state": "running", "bytes_done": 5}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = "http://127.0.0.1:%d/model" % server.server_address[1]
        probe = fanout.Probe(timeout=TIMEOUT)
        values = [probe.progress(base) for _poll in range(5)]
    finally:
        server.shutdown()
        server.server_close()
    assert all(v is not None and v[0] == "running" for v in values), values
    assert len(connections) == 1, connections
