# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Site fan-out of verified model weights: topology, source selection and the peer fetcher.

PRIVATE to the ct200.deploy collection.

* **Topology.** The site's hosts in inventory order, the seed moved first, form a k-ary
  tree by index.  The seed has ``s`` children (hosts ``1..s``), every other host ``k``:
  host ``i > s`` has parent ``(i - s - 1) // k + 1``; with ``s = k`` that is the plain
  k-ary tree (parent ``(i - 1) // k``).  ``k = 1`` is a chain, ``k = 2`` a binary tree.
  Only the seed talks to the Hub, and its link also carries the ACKs of that download:
  measured on shaped links, a seed that sends two copies at once slowed its own Hub
  download by ~20 %, which every host waits for; ``s = 1`` keeps it to one copy and adds
  at most one level (none for 8 hosts at k = 2).
* **Trust.** The expected sha256 (LFS oid, or git blob sha1 of a small file) and size of
  every file come from the Hub listing made once on the seed (:func:`hub_listing`) and are
  handed to every host.  A peer is only a source of bytes: its bytes are kept only when they
  hash to the listed oid (the download engine checks that before renaming into place).
* **Sources per file**, in order: the parent (waited for while it makes progress), any other
  peer that has the file now, the seed (waited for too), then the Hub if this host may use it.
  A source whose bytes fail verification is dropped for that file (cost: that file once);
  a source that refuses connections is dropped for the rest of the run.
* **Pipelining.** A peer's nginx answers 404 for a file until it is verified and renamed into
  place, so a child polls ``HEAD`` and starts file ``j`` as soon as its parent has it.
  Liveness of a source that lacks a file is read from its progress document
  (``/_ct200/NAME/progress.json``): no change for ``peer_stall_timeout`` seconds = not coming.
* **Bytes** move through the same engine as a Hub download (``hf_transfer_engine.Engine``):
  resumable part files under ``.ct200/tmp``, stall watchdog, hash while writing, rename after
  verification, manifest record.  One file per engine run, so each file can have its own source;
  ``parallel_files`` runs overlap (in fetch order: files stored in git first, then LFS files, each in
  path order; ``hf_transfer_plan.fetch_order``), so per-file round trips do not add up, but
  the next file starts only when those in flight are almost done: files complete one after another
  and a child's own children can start each early (the seed's engine orders its work the same way).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import http.client
import json
import math
import os
import threading
import time
import urllib.parse

from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest
from ansible_collections.ct200.deploy.plugins.module_utils._io import atomic_write
from ansible_collections.ct200.deploy.plugins.module_utils.hf_errors import DownloadError
from ansible_collections.ct200.deploy.plugins.module_utils.hf_paths import (
    redact_url, repo_path_problem, tree_entry_problem, tree_shape_problem)
from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_http import HUB_ORIGINS, origin_of, shutdown_socket

STATUS_PREFIX = "/_ct200/"
PROGRESS_NAME = "progress.json"
USER_AGENT = "ct200-deploy/0.1.0 (hf_fanout_fetch)"
SOURCE_KINDS = ("parent", "peer", "seed", "hub")
# The next file goes to a worker once the files in flight have less than this left: files fetched side
# by side share the link and complete late together (the children below wait for all of them); the
# overlap still hides each file's round trips (measured ~80 ms a file on a loaded machine).
OVERLAP_BYTES = 1 << 20
# An earlier sibling whose progress stands still this long is not waited for any more (earlier_sibling).
SIBLING_STALL = 3.0


class FanoutError(DownloadError):
    """Operator-facing failure of the fan-out: hf_download's error type (``message``, ``code``, ``fix``,
    ``details``), the fix second and the code ``fanout_failed`` unless named."""

    def __init__(self, message, fix="", code="fanout_failed", details=None):
        super().__init__(message, code=code, fix=fix, details=details)


# ------------------------------------------------------------------- topology
def site_order(hosts, seed=None):
    """Hosts of the site with the seed first (default: the first host), order otherwise kept."""
    hosts = list(hosts)
    if not hosts:
        raise FanoutError("the site has no hosts", fix="give the play at least one host")
    if len(set(hosts)) != len(hosts):
        raise FanoutError("host names repeat in %s" % hosts, fix="list every host of the site once")
    seed = seed or hosts[0]
    if seed not in hosts:
        raise FanoutError("seed %r is not one of the site's hosts %s" % (seed, hosts),
                          fix="set the seed to a host of the group, or leave it unset for the first host")
    return [seed] + [h for h in hosts if h != seed]


def check_fanout(fanout):
    if isinstance(fanout, bool) or not isinstance(fanout, int) or fanout < 1:
        raise FanoutError("fanout must be an integer >= 1, got %r" % (fanout,),
                          fix="set the fan-out (children per host): 1 = chain (10 GbE), 2 = binary tree (25 GbE), "
                              "more on 100 GbE")
    return fanout


def parent_of(index, fanout, seed_fanout=None):
    """Parent index of host ``index``; the seed has ``seed_fanout`` children (default ``fanout``)."""
    seed_fanout = fanout if seed_fanout is None else seed_fanout
    if index == 0:
        return None
    if index <= seed_fanout:
        return 0
    return (index - seed_fanout - 1) // fanout + 1


def ancestors(index, fanout, seed_fanout=None):
    chain = []
    parent = parent_of(index, fanout, seed_fanout)
    while parent is not None:
        chain.append(parent)
        parent = parent_of(parent, fanout, seed_fanout)
    return chain


def depth_of(index, fanout, seed_fanout=None):
    return len(ancestors(index, fanout, seed_fanout))


def topology(hosts, seed=None, fanout=1, seed_fanout=None):
    """``{host: {"index", "parent", "depth", "children"}}`` of the tree."""
    check_fanout(fanout)
    seed_fanout = check_fanout(fanout if seed_fanout is None else seed_fanout)
    order = site_order(hosts, seed)
    tree = {}
    for index, host in enumerate(order):
        parent = parent_of(index, fanout, seed_fanout)
        tree[host] = {"index": index, "parent": None if parent is None else order[parent],
                      "depth": depth_of(index, fanout, seed_fanout), "children": []}
    for host, node in tree.items():
        if node["parent"] is not None:
            tree[node["parent"]]["children"].append(host)
    return tree


def source_order(hosts, host, seed=None, fanout=1, seed_fanout=None):
    """[(kind, peer host)] for ``host``: parent, other peers (ancestors first), seed.

    The Hub is appended by the fetcher when allowed.  Empty for the seed itself.
    """
    check_fanout(fanout)
    seed_fanout = check_fanout(fanout if seed_fanout is None else seed_fanout)
    order = site_order(hosts, seed)
    if host not in order:
        raise FanoutError("host %r is not one of the site's hosts %s" % (host, order),
                          fix="run the fan-out on hosts of the site group only")
    index = order.index(host)
    if index == 0:
        return []
    up = ancestors(index, fanout, seed_fanout)
    parent = up[0]
    others = [i for i in up[1:] if i != 0]
    others += [i for i in range(1, len(order)) if i not in (index, parent) and i not in others]
    sources = [("parent" if parent else "seed", order[parent])]
    sources += [("peer", order[i]) for i in others]
    if parent != 0:
        sources.append(("seed", order[0]))
    return sources


# -------------------------------------------------------------------- listing
def hub_listing(repo_id, revision, local_dir, token=None, endpoint=None, repo_type="model",
                allow_patterns=None, ignore_patterns=None):
    """(commit, {path: {"size", "oid", "lfs"}}, hidden paths) of the selected files, from the Hub (on the seed).

    The Hub's listing passes hf_download's checks (``hf_transfer.check_tree``: hf_paths rules for every
    path, size and oid) before anything is returned, so no host is ever handed a path it would refuse.
    Hidden paths (``.gitattributes``...) are left out of the fan-out: peers serve no dot path."""
    from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer

    opts = hf_transfer.Options(repo_id=repo_id, local_dir=local_dir, revision=revision, repo_type=repo_type,
                               token=token, endpoint=endpoint, allow_patterns=allow_patterns,
                               ignore_patterns=ignore_patterns)
    opts.validate()
    hub = hf_transfer.Hub(opts)
    commit = revision if hf_transfer.is_commit(revision) else hub.resolve(revision)
    tree, masked = hub.tree(commit)
    if masked:
        hub.auth_check()
        raise FanoutError("the Hub hid the sha256 of %s's files" % repo_id,
                          fix="run the listing with a token that has access to the repository")
    hf_transfer.check_tree(opts, commit, tree)
    selected, unmatched = hf_transfer.select(tree, allow_patterns, ignore_patterns)
    hidden = [path for path in selected if is_hidden(path)]
    selected = [path for path in selected if not is_hidden(path)]
    if not selected:
        raise FanoutError("no file of %s@%s is selected (unmatched allow patterns: %s)"
                          % (repo_id, commit[:12], ", ".join(unmatched) or "none"),
                          fix="check allow_patterns/ignore_patterns")
    return commit, dict((path, tree[path]) for path in selected), hidden


def is_hidden(path):
    """A path with a component starting with a dot: peers never serve it (state, temp files, git metadata)."""
    return any(part.startswith(".") for part in path.split("/"))


def validate_listing(files):
    """The listing handed to a host, checked with hf_download's own rules (hf_paths) before any byte moves:
    every path one hf_download would write, every entry an int size and a hex oid, no hidden path."""
    if not isinstance(files, dict) or not files:
        raise FanoutError("the file listing is empty or not a mapping", code="bad_listing",
                          fix="pass the 'files' returned by hf_fanout_fetch mode=list on the seed")
    fix = "pass the listing of mode=list on the seed unchanged; nothing was written"
    clean = {}
    for path in sorted(files, key=repr):
        why = repo_path_problem(path)
        if why:
            raise FanoutError("the handed listing names the file %r, which is refused because %s" % (path, why),
                              code="unsafe_path", fix=fix)
        if is_hidden(path):
            raise FanoutError("listed file %r is hidden (a component starts with a dot); peers never serve it"
                              % path, code="bad_listing",
                              fix="pass the listing of mode=list unchanged (it leaves hidden files out)")
        info = files[path]
        if isinstance(info, dict) and not isinstance(info.get("lfs", False), bool):
            why = "its lfs flag is not a boolean (%r)" % (info.get("lfs"),)
        else:
            why = tree_entry_problem(info)
        if why:
            raise FanoutError("the handed listing entry for %s is malformed: %s" % (path, why), code="bad_listing",
                              fix=fix)
        clean[path] = {"size": info["size"], "oid": info["oid"], "lfs": bool(info.get("lfs"))}
    why = tree_shape_problem(clean)
    if why:
        raise FanoutError("the handed listing cannot be written: %s" % why, code="bad_listing", fix=fix)
    return clean


def check_timeouts(**seconds):
    """Each of ``seconds`` ({option name: value}) a finite number >= 0; FanoutError naming the first that is not."""
    for name, value in sorted(seconds.items()):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise FanoutError("%s must be a finite number of seconds >= 0, got %r" % (name, value), code="bad_argument",
                              fix="set %s to 0 or more seconds (0: do not wait)" % name)


# ---------------------------------------------------------------- peer probes
def _split(url):
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except (ValueError, TypeError, AttributeError):
        raise FanoutError("peer URL %r is not a URL" % redact_url(url), code="bad_argument",
                          fix="use http://HOST:PORT/NAME") from None
    if "@" in parts.netloc:
        raise FanoutError("peer URL %s carries credentials (user:password@): a weight_peer server takes none, so "
                          "they would never be sent, only echoed in logs and runner artifacts" % redact_url(url),
                          code="bad_argument", fix="remove the user:password@ part: use http://HOST:PORT/NAME")
    if parts.scheme != "http" or not parts.hostname or port == 0:
        raise FanoutError("peer URL %r is not an http:// URL" % redact_url(url), code="bad_argument",
                          fix="use http://HOST:PORT/NAME")
    return parts


_KEPT = threading.local()  # one kept-alive connection per thread and peer: polls cost no handshake


STATUS_BODY_MAX = 64 << 10  # a progress document is ~1 KiB; a peer's body is never read past this


def _request(url, method, timeout):
    """(status, Content-Length, body of at most STATUS_BODY_MAX bytes) of one request to a peer, within
    ``timeout`` seconds in all: a peer that trickles headers or a body, or advertises or streams more than
    the bound, gets its connection closed (never drained); a kept-alive connection is reused otherwise."""
    parts = _split(url)
    key = (parts.hostname, parts.port or 80)
    conns = _KEPT.__dict__.setdefault("conns", {})
    for attempt in (0, 1):
        conn = conns.get(key)
        if conn is None:
            conn = conns[key] = http.client.HTTPConnection(key[0], key[1], timeout=timeout)
        deadline = threading.Timer(timeout, shutdown_socket, [conn])  # one time box for the whole exchange
        deadline.daemon = True
        deadline.start()
        try:
            conn.request(method, parts.path or "/", headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
            resp = conn.getresponse()
            body = _bounded_body(resp) if method == "GET" else resp.read()  # HEAD: http.client reads no body
            if resp.will_close or not resp.isclosed():  # the rest of a body is never read: close instead
                conns.pop(key).close()
            return resp.status, resp.getheader("Content-Length"), body
        except (OSError, http.client.HTTPException, ValueError):
            conns.pop(key, None)
            conn.close()
            if attempt or not deadline.is_alive():
                raise OSError("no complete answer from %s within %g s" % (redact_url(url), timeout)) from None
        finally:
            deadline.cancel()
    raise OSError("unreachable")  # pragma: no cover


def _bounded_body(resp):
    """At most STATUS_BODY_MAX bytes of ``resp``'s body (a longer one is cut: the caller closes the connection)."""
    length = resp.getheader("Content-Length")
    if length is not None and length.strip().isdigit() and int(length) > STATUS_BODY_MAX:
        return b""  # advertised too large: not read at all
    chunks, size = [], 0
    while size < STATUS_BODY_MAX:
        chunk = resp.read1(STATUS_BODY_MAX - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if resp.length == 0:
        resp.read()  # read1 leaves a fully read body open; this marks it complete (the connection stays usable)
    return b"".join(chunks)


def file_url(base, path):
    return "%s/%s" % (base.rstrip("/"), urllib.parse.quote(path))


def status_url(base):
    """``http://HOST:PORT/NAME`` -> ``http://HOST:PORT/_ct200/NAME/progress.json`` (see the weight_peer role)."""
    parts = _split(base)
    name = parts.path.rstrip("/").rsplit("/", 1)[-1]
    return "http://%s%s%s/%s" % (parts.netloc, STATUS_PREFIX, urllib.parse.quote(name), PROGRESS_NAME)


class Probe(object):
    """HEAD a file at a peer: "has" (200, listed size), "lacks" (404/other size) or "down"."""

    def __init__(self, timeout=5.0):
        self.timeout = timeout

    def has(self, base, path, size):
        try:
            status, length, _body = _request(file_url(base, path), "HEAD", self.timeout)
        except (OSError, http.client.HTTPException):
            return "down"
        if status == 200 and length is not None and length.isdigit() and int(length) == size:
            return "has"
        return "lacks"

    def progress(self, base):
        """A value that changes while the peer works (None when it publishes none)."""
        try:
            status, _length, body = _request(status_url(base), "GET", self.timeout)
            data = json.loads(body.decode("utf-8")) if status == 200 else None
        except (OSError, http.client.HTTPException, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        # "upstream" carries the progress of the source this peer is waiting on, so a chain that waits
        # on a working seed looks alive all the way down, and a stalled one looks stalled.
        return (data.get("state"), data.get("bytes_done"), data.get("bytes_fetched"), data.get("files_done"),
                json.dumps(data.get("upstream"), sort_keys=True))


def wait_for(probe, base, path, size, wait, stall, poll, clock=time.monotonic, sleep=time.sleep,
             progress_every=1.0, on_seen=None, in_order=False):
    """Poll until ``base`` has ``path``: "has", "down", or "gave_up" (no progress for ``stall``
    seconds, the peer finished/failed without it, or ``wait`` seconds in all).

    ``HEAD`` after ``poll`` seconds, then less often the longer the wait (up to 0.25 s): a file
    a worker waits for out of order is rarely the next to appear, and every request costs the
    peer CPU.  ``in_order`` (the host's poller, which waits for the next file in fetch order: the
    one its source completes next) keeps polling every ``poll`` seconds while the source's
    progress moves; the backed-off poll added ~0.12 s to every hop.  A source that publishes no
    progress yet (a seed still starting) or stands still is polled backed off.  The progress
    document only every ``progress_every`` seconds."""
    started = last_change = clock()
    last_seen = None
    next_progress = started
    interval = poll
    while True:
        verdict = probe.has(base, path, size)
        if verdict != "lacks" or not wait:
            return verdict if verdict != "lacks" else "gave_up"
        now = clock()
        if now >= next_progress:
            next_progress = now + progress_every
            seen = probe.progress(base)
            if seen is not None and seen[0] in ("done", "failed"):
                return "has" if probe.has(base, path, size) == "has" else "gave_up"
            if seen != last_seen:
                last_seen, last_change = seen, now
                if on_seen is not None:
                    on_seen(seen)
        if now - last_change >= stall or now - started >= wait:
            return "gave_up"
        sleep(interval)
        moving = last_seen is not None and now - last_change <= 2 * progress_every
        interval = poll if in_order and moving else min(interval * 1.5, max(poll, 0.25))


# -------------------------------------------------------------------- fetcher
class Source(object):
    """Where bytes may come from: a peer's nginx (no token) or the Hub (the token, if any)."""

    def __init__(self, kind, name, base, wait=False, headers=None, allowed_origins=frozenset()):
        if kind not in SOURCE_KINDS:
            raise FanoutError("unknown source kind %r" % kind, fix="use one of %s" % ", ".join(SOURCE_KINDS))
        self.kind = kind
        self.name = name
        self.base = base.rstrip("/")
        self.wait = wait
        self.headers = headers or {"User-Agent": USER_AGENT}
        self.allowed_origins = allowed_origins
        self.down = False

    def describe(self):
        return "%s %s" % (self.kind, self.name)


def peer_sources(peers, host, seed=None, fanout=1, seed_fanout=None):
    """Sources of ``host`` from ``peers`` (ordered [{"name", "url"}] of the whole site)."""
    urls = {}
    for peer in peers:
        if not isinstance(peer, dict) or not peer.get("name") or not peer.get("url"):
            raise FanoutError("peer entry %r needs 'name' and 'url'" % (peer,),
                              fix="list every host of the site as {name: HOST, url: http://ADDR:PORT/NAME}")
        _split(peer["url"])
        urls[peer["name"]] = peer["url"]
    order = [p["name"] for p in peers]
    return [Source(kind, name, urls[name], wait=kind in ("parent", "seed"))
            for kind, name in source_order(order, host, seed, fanout, seed_fanout)]


def earlier_sibling(peers, host, seed=None, fanout=1, seed_fanout=None):
    """The Source of the sibling that takes each file from the same parent just before ``host``
    (None for a first child, or the seed).

    Siblings that take a file from their parent at the same time share its uplink, and both
    have it only after two copies' time; one after the other, the first has it after one, and
    its own children start a copy earlier.  With the seed sending two copies, the last file of a
    site of 8 reaches every host after four copies' time instead of five."""
    order = [p["name"] for p in peers]
    tree = topology(order, seed, fanout, seed_fanout)
    parent = tree.get(host, {}).get("parent")
    if parent is None:
        return None
    siblings = tree[parent]["children"]
    index = siblings.index(host)
    if index == 0:
        return None
    url = dict((p["name"], p["url"]) for p in peers)[siblings[index - 1]]
    return Source("peer", siblings[index - 1], url)


def binomial_parent(index):
    """The host ``index`` takes the final file from: ``index`` less its highest bit (site order)."""
    return index - (1 << (index.bit_length() - 1))


def binomial_earlier(index):
    """The host that takes the final file from the same sender just before ``index`` (None: the first).

    A sender ``p`` sends to ``p + 2**k`` for every ``2**k > p``, smallest first."""
    parent = binomial_parent(index)
    half = (index - parent) // 2
    return parent + half if half > parent else None


class FinalRoute(object):
    """Where the repository's last large file comes from: a binomial broadcast over the site order.

    The tree sends each file down one edge at a time, so its last file reaches the deepest leaf
    only after one copy per edge on the way (five in a binary tree of 8 behind a seed with one
    child). Once the seed has it, nothing else is in flight: every host that has it may send it,
    and the number of hosts that have it doubles with each copy's time (three for 8, log2 N)."""

    def __init__(self, source, after=None):
        self.source = source
        self.after = after


def final_route(peers, host, seed=None):
    """The FinalRoute of ``host`` (None for the seed): peers are the site's ordered [{"name", "url"}]."""
    order = site_order([p["name"] for p in peers], seed)
    url = dict((p["name"], p["url"]) for p in peers)
    index = order.index(host)
    if index == 0:
        return None
    parent, earlier = binomial_parent(index), binomial_earlier(index)
    kind = "seed" if parent == 0 else "peer"
    after = None if earlier is None else Source("peer", order[earlier], url[order[earlier]])
    return FinalRoute(Source(kind, order[parent], url[order[parent]], wait=True), after)


def hub_source(endpoint, token=None):
    headers = {"User-Agent": USER_AGENT}
    if token:
        headers["Authorization"] = "Bearer " + token
    return Source("hub", "hub", endpoint, headers=headers, allowed_origins=set(HUB_ORIGINS) | {origin_of(endpoint)})


class SharedManifest(object):
    """The one manifest of a run, shared by concurrent engine runs: each engine records into it
    and snapshots it to save; both go under one lock here (an engine only locks itself)."""

    def __init__(self, manifest):
        self._manifest = manifest
        self._lock = threading.Lock()
        self.local_dir = manifest.local_dir

    @property
    def data(self):
        with self._lock:
            return json.loads(json.dumps(self._manifest.data))

    def record(self, *args, **kwargs):
        with self._lock:
            self._manifest.record(*args, **kwargs)


class Fetcher(object):
    """Fetch the listed files of one repository into ``local_dir`` from ``sources``, in fetch order."""

    def __init__(self, local_dir, repo_id, commit, files, sources, repo_type="model", peer_wait=3600.0,
                 peer_stall=60.0, poll=0.2, stall_timeout=60.0, max_workers=8, source_attempts=2, parallel_files=4,
                 progress_interval=1.0, lock_timeout=0.0, min_free_bytes=None, probe=None, clock=time.monotonic, sleep=time.sleep,
                 layout="flat", reuse_dirs=None, after=None, final=None):
        self.local_dir = os.path.abspath(local_dir)
        self.root_dir = None
        if layout == "snapshots":  # local_dir is the repository's root: fetch into its snapshot of this commit
            if not hf_manifest.is_commit_name(commit):
                raise FanoutError("commit %r is not a 40-hex commit" % (commit,), code="bad_argument",
                                  fix="pass the commit the seed listed (hf_fanout_fetch mode=list)")
            self.root_dir = self.local_dir
            self.local_dir = hf_manifest.snapshot_dir(self.root_dir, commit)
        self.reuse_dirs = list(reuse_dirs or [])
        self.repo_id = repo_id
        self.repo_type = repo_type
        self.commit = commit
        check_timeouts(peer_wait_timeout=peer_wait, peer_stall_timeout=peer_stall)
        self.files = validate_listing(files)
        self.sources = list(sources)
        self.after = after  # a sibling that takes each file from the same parent first (earlier_sibling)
        self.final = final  # the FinalRoute of the last large file (final_route), or None: the tree's
        self.peer_wait = peer_wait
        self.peer_stall = peer_stall
        self.poll = poll
        self.stall_timeout = stall_timeout
        self.max_workers = max_workers
        self.source_attempts = source_attempts
        self.parallel_files = max(1, int(parallel_files))
        self.lock = threading.Lock()
        self.progress_interval = progress_interval
        self.lock_timeout = lock_timeout
        self.min_free_bytes = min_free_bytes
        self.opts = None
        self.probe = probe or Probe(timeout=min(5.0, stall_timeout))
        self.clock = clock
        self.sleep = sleep
        self.by_source = {}
        self.files_by_source = {}
        self.kind_of = dict((source.name, source.kind) for source in self.sources)
        self.rejected = []
        self.fallbacks = []
        self.file_times = {}  # path -> when its first byte came and when it was verified (the benchmark's hop lag)
        self.done_bytes = 0
        self.done_files = 0
        self.running = {}  # engine -> the source it fetches from
        self.upstream = None
        self.plan = None
        self.linked = 0
        self.bytes_linked = 0
        self.warnings = []
        self.started = clock()
        self.last_progress = 0.0

    # ------------------------------------------------------------- progress
    def progress_doc(self, state, error=None):
        plan = self.plan
        with self.lock:
            current = sum(engine.stats.bytes_fetched for engine in self.running)
            fetched = sum(self.by_source.values()) + current
            fetching_from = sorted(set(source.describe() for source in self.running.values()))
            by_kind = self._by_kind(self.by_source)
            for engine, source in self.running.items():
                by_kind[source.kind] += engine.stats.bytes_fetched
        total = plan.bytes_total if plan else 0
        present = plan.bytes_present if plan else 0
        to_fetch = len(plan.by_action("fetch")) if plan else 0  # a count, written every progress tick: no sort
        elapsed = max(self.clock() - self.started, 1e-6)
        return {
            "pid": os.getpid(), "state": state, "repo_id": self.repo_id, "revision": self.commit,
            "commit": self.commit, "local_dir": self.local_dir, "bytes_total": total,
            "bytes_done": min(total, present + self.done_bytes + current),
            "bytes_to_fetch": plan.bytes_to_fetch if plan else 0, "bytes_fetched": fetched,
            "files_total": len(plan.files) if plan else 0,
            "files_done": (len(plan.files) - to_fetch + self.done_files) if plan else 0,
            "files_to_fetch": to_fetch,
            "rate": round(fetched / elapsed, 1), "eta_seconds": None, "elapsed": round(elapsed, 1),
            "retries": len(self.fallbacks), "updated": time.time(), "error": error,
            "sources": dict(self.by_source), "upstream": self.upstream,
            # what `ct200 deploy` shows per host while the fan-out runs (hf_progress.format_line)
            "bytes_by_kind": by_kind, "fetching_from": fetching_from,
            "bytes_verified": present + self.done_bytes,
        }

    def _by_kind(self, per_name):
        """{parent, peer, seed, hub: sum} of a per source name count (every kind, zeros included)."""
        by_kind = dict((kind, 0) for kind in SOURCE_KINDS)
        for name, count in per_name.items():
            by_kind[self.kind_of.get(name, "peer")] += count
        return by_kind

    def secrets(self):
        """The Hub token of a hub source: never written or printed."""
        return [value.split(" ", 1)[-1] for source in self.sources for key, value in source.headers.items()
                if key.lower() == "authorization"]

    def write_progress(self, state, error=None):
        """The progress document (0644, served to the site by weight_peer): ``error`` is a code, never words."""
        doc = self.progress_doc(state, error)
        path = os.path.join(hf_manifest.state_dir(self.local_dir), PROGRESS_NAME)
        try:
            atomic_write(path, json.dumps(doc), mode=0o644, root=self.local_dir, create_dirs=True)
        except OSError:
            pass  # progress is advisory; the run goes on
        return doc

    def _upstream_moved(self, seen):
        with self.lock:
            self.upstream = hashlib.sha256(repr(seen).encode("utf-8")).hexdigest()[:16]
        self._tick()

    def _tick(self, _engine=None):
        now = self.clock()
        with self.lock:
            due = now - self.last_progress >= self.progress_interval
            if due:
                self.last_progress = now
        if due:
            self.write_progress("running")

    # ------------------------------------------------------------------ run
    def _options(self):
        """hf_download's Options for this directory: the same local_dir checks (not /, not a symlink)."""
        from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer

        if self.root_dir is not None:
            for path in (os.path.dirname(self.local_dir), self.local_dir):
                if os.path.islink(path):
                    raise FanoutError("%s is a symlink; hf_fanout_fetch follows no symlink under the repository root %s"
                                      % (path, self.root_dir), code="unsafe_path",
                                      fix="remove the symlink (or move the real directory there) and run again")
        opts = hf_transfer.Options(repo_id=self.repo_id, local_dir=self.local_dir, revision=self.commit,
                                   repo_type=self.repo_type, stall_timeout=self.stall_timeout,
                                   lock_timeout=self.lock_timeout, min_free_bytes=self.min_free_bytes,
                                   reuse_dirs=self.reuse_dirs)
        opts.validate()
        self.opts = opts
        return opts

    def _make_plan(self, opts):
        """hf_download's plan (the caller holds the local_dir lock, or writes nothing): one stat per file
        without following symlinks, a full hash of every file the manifest does not vouch for."""
        from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer

        manifest = hf_manifest.Manifest.load(self.local_dir)
        manifest.bind_repo(self.repo_id, self.repo_type)
        manifest.set_tree(self.commit, self.files)
        self.plan = hf_transfer.make_plan(opts, self.commit, self.files, manifest,
                                          source="the listing handed to this host")
        return manifest, self.plan

    def preview(self):
        """Check mode: what a run would fetch; nothing is written and no lock is taken."""
        plan = self._locally(lambda opts: self._make_plan(opts)[1])
        res = self.result()
        res.update(changed=bool(plan.to_fetch or plan.to_link), would_fetch=[pf.as_dict() for pf in plan.to_fetch],
                   bytes_to_fetch=plan.bytes_to_fetch, sources=[s.describe() for s in self.sources],
                   would_link=[dict(pf.as_dict(), source=pf.link_from[0].path) for pf in plan.to_link][:200],
                   bytes_to_link=plan.bytes_to_link)
        return res

    def run(self):
        """Lock local_dir (``lock_timeout``), plan under the lock, fetch, save the manifest."""
        return self._locally(self._run_locked, lock=True)

    def _locally(self, work, lock=False):
        """``work(opts)`` with hf_download's verdicts for local trouble: a symlink is ``unsafe_path``,
        a full disk ``disk_full``, any other OSError ``local_error``."""
        from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer
        from ansible_collections.ct200.deploy.plugins.module_utils._io import UnsafePathError

        opts = self._options()
        try:
            if not lock:
                return work(opts)
            with hf_transfer.DirLock(self.local_dir, opts.lock_timeout):
                return work(opts)
        except UnsafePathError as exc:
            raise hf_transfer.DownloadError(
                str(exc), code="unsafe_path",
                fix="hf_fanout_fetch follows no symlink it did not create under local_dir %s; remove it and run "
                    "again" % self.local_dir) from None
        except OSError as exc:
            raise hf_transfer.local_error(opts, exc) from None

    def _run_locked(self, opts):
        from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer
        from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer_engine as engine_mod

        manifest, plan = self._make_plan(opts)
        for pf in plan.to_fetch:
            pf.partial, _segments = engine_mod.read_partial(self.local_dir, pf.path, pf.oid, pf.size)
        if plan.to_fetch:
            hf_transfer.disk_check(opts, plan, self.commit)
        hf_transfer.clean_temp(opts, set(engine_mod.part_key(pf.path, pf.oid) for pf in plan.to_fetch))
        self.bytes_linked = hf_transfer.link_reused(opts, plan, manifest, self.commit, self.warnings)
        self.linked = len(plan.to_link)  # what could not be linked went back to fetch
        manifest.save()
        self.write_progress("running")
        try:
            self._fetch_all(plan.to_fetch, SharedManifest(manifest), engine_mod)  # fetch order
        except BaseException as exc:
            manifest.save()
            code = getattr(exc, "code", None) or "internal_error"
            try:  # the words (redacted) for the owner only; the served progress file says the code
                hf_transfer.record_error(self.local_dir, code, getattr(exc, "message", None) or "%s: %s" % (
                    type(exc).__name__, exc), getattr(exc, "fix", ""), self.secrets())
            except OSError:
                pass
            self.write_progress("failed", error=code)
            raise
        manifest.save()
        hf_transfer.mark_complete(opts, manifest, self.commit, self.warnings)
        if plan.to_fetch or self.linked:
            engine_mod.remove_tmp_dir(self.local_dir)
        self.write_progress("done")
        return self.result()

    def result(self):
        plan = self.plan
        return {
            "changed": bool(plan.to_fetch) or bool(self.linked), "commit": self.commit, "local_dir": self.local_dir,
            "root_dir": self.root_dir, "files_linked": self.linked, "bytes_linked": self.bytes_linked,
            "warnings": list(self.warnings),
            "files": len(plan.files), "files_fetched": self.done_files, "files_present": len(plan.files) - len(plan.to_fetch),
            "bytes_total": plan.bytes_total, "bytes_fetched": sum(self.by_source.values()),
            "bytes_by_source": dict(self.by_source), "files_by_source": dict(self.files_by_source),
            "bytes_by_kind": self._by_kind(self.by_source), "files_by_kind": self._by_kind(self.files_by_source),
            "repo_id": self.repo_id,
            "rejected": list(self.rejected), "fallbacks": list(self.fallbacks),
            "file_times": dict(self.file_times),
            "seconds": round(self.clock() - self.started, 3),
        }

    def _fetch_all(self, files, manifest, engine_mod):
        """Files in fetch order, ``parallel_files`` at a time at most, the next one only when those in
        flight are almost done (``OVERLAP_BYTES``); the first failure stops the rest.

        One poller per host: this thread waits until the first source that is worth waiting for
        (parent, else seed) has the next file, then hands it to a worker.  Workers run the full
        source order themselves, so a parent that dies or gives up is handled per file."""
        stop = threading.Event()
        primary = next((source for source in self.sources if source.wait), None)
        final_path = self._final_path(files)

        def one(pf, confirmed, final):
            if not stop.is_set():
                try:
                    self._fetch_file(pf, manifest, engine_mod, confirmed, self._sources_for(final))
                except BaseException:
                    stop.set()
                    raise

        with concurrent.futures.ThreadPoolExecutor(max_workers=self.parallel_files) as pool:
            futures = []
            for pf in files:
                if stop.is_set():
                    break
                confirmed = None
                final = self.final if pf.path == final_path else None
                waited = final.source if final is not None else primary
                if waited is not None and not self._down(waited):
                    verdict = wait_for(self.probe, waited.base, pf.path, pf.size, self.peer_wait, self.peer_stall,
                                       self.poll, clock=self.clock, sleep=self.sleep, on_seen=self._upstream_moved,
                                       in_order=True)
                    if verdict == "has":
                        confirmed = waited  # the worker asks it for the bytes at once, without another HEAD
                        self._after_sibling(pf, final)
                    elif verdict == "down":
                        waited.down = True
                    elif verdict == "gave_up" and final is None:
                        primary = None  # the workers wait (or not) per file from here on
                if pf.size >= OVERLAP_BYTES:  # a small file (config, index) does not hold the link
                    self._wait_for_room(futures, stop)
                future = pool.submit(one, pf, confirmed, final)
                future.pf = pf
                futures.append(future)
            for future in futures:
                future.result()

    @staticmethod
    def _final_path(files):
        """The last file (in fetch order) large enough to hold a link: the one the FinalRoute carries."""
        large = [pf.path for pf in files if pf.size >= OVERLAP_BYTES]
        return large[-1] if large else None

    def _sources_for(self, final):
        """The sources a worker tries for a file: the final route's sender first for the final file."""
        if final is None:
            return self.sources
        others = [source for source in self.sources if source.name != final.source.name]
        return others if self._down(final.source) else [final.source] + others

    def _down(self, source):
        """``source`` or the tree's source of the same host was found down (the final route's own Source
        object learns it from the tree's, so the last file does not wait on a host the run gave up)."""
        return source.down or any(other.down for other in self.sources if other.name == source.name)

    def _after_sibling(self, pf, final=None):
        """Wait until the earlier sibling has ``pf`` while its progress moves (it is taking it from
        the same sender); one that is down, stands still or finished without it ends the waiting
        for the rest of the run (for the final file: for that file)."""
        route = final if final is not None else self
        sibling = route.after
        if sibling is None or sibling.down:
            return
        verdict = wait_for(self.probe, sibling.base, pf.path, pf.size, self.peer_stall, SIBLING_STALL, self.poll,
                           clock=self.clock, sleep=self.sleep, in_order=True)
        if verdict != "has":
            route.after = None

    def _left_in_flight(self, futures):
        """Bytes the files handed to workers still have to fetch (a whole file until its engine runs)."""
        with self.lock:
            fetched = dict((engine.jobs[0].path, engine.stats.bytes_fetched + engine.stats.bytes_resumed)
                           for engine in self.running if engine.jobs)
        return sum(max(0, future.pf.size - fetched.get(future.pf.path, 0)) for future in futures if not future.done())

    def _wait_for_room(self, futures, stop):
        """Until the files in flight have less than OVERLAP_BYTES left (files complete one after another)."""
        while not stop.is_set() and self._left_in_flight(futures) >= OVERLAP_BYTES:
            self.sleep(self.poll)

    def _fetch_file(self, pf, manifest, engine_mod, confirmed=None, sources=None):
        causes = []
        for source in sources or self.sources:
            if source.down:
                continue
            outcome = self._from_source(pf, source, manifest, engine_mod, has=source is confirmed)
            if outcome == "ok":
                with self.lock:
                    if causes:
                        self.fallbacks.append({"path": pf.path, "source": source.describe(), "after": causes})
                    self.done_files += 1
                    self.done_bytes += pf.size
                    self.files_by_source[source.name] = self.files_by_source.get(source.name, 0) + 1
                return
            causes.append("%s: %s" % (source.describe(), outcome))
        raise FanoutError("no source could deliver %s verified (%s)" % (pf.path, "; ".join(causes) or "no sources"),
                          fix="check that the seed finished its Hub download and its weight_peer server runs, or "
                              "allow this host the Hub (use_hub); re-running resumes what is here",
                          details={"path": pf.path})

    def _from_source(self, pf, source, manifest, engine_mod, has=False):
        """"ok", or why this source gave nothing for ``pf`` (the next one is tried); ``has``: the
        poller saw the source has it just now (no second HEAD on the way to the first byte)."""
        attempts = 0
        while attempts < self.source_attempts:
            if source.kind != "hub" and not (has and attempts == 0):
                verdict = wait_for(self.probe, source.base, pf.path, pf.size,
                                   self.peer_wait if source.wait else 0, self.peer_stall, self.poll,
                                   clock=self.clock, sleep=self.sleep, on_seen=self._upstream_moved)
                if verdict == "down":
                    source.down = True
                    return "down"
                if verdict != "has":
                    return "does not have it"
            attempts += 1
            outcome, resumed, detail = self._engine_fetch(pf, source, manifest, engine_mod)
            if outcome == "ok":
                return "ok"
            if outcome == "rejected":
                with self.lock:
                    self.rejected.append({"path": pf.path, "source": source.describe(), "resumed_bytes": resumed})
                if not resumed:
                    return "bytes failed verification"
                # the part file it resumed came from another source; it is gone now: try once more clean
                continue
            if source.kind != "hub" and self.probe.has(source.base, pf.path, pf.size) == "down":
                source.down = True
                return "down (%s)" % detail
        return "failed: %s" % detail

    def _engine_fetch(self, pf, source, manifest, engine_mod):
        """One engine run for one file from one source: ("ok"|"rejected"|"failed", resumed bytes, detail)."""
        if source.kind == "hub":
            pf.url = "%s/%s%s/resolve/%s/%s" % (
                source.base, {"model": "", "dataset": "datasets/", "space": "spaces/"}[self.repo_type],
                self.repo_id, self.commit, urllib.parse.quote(pf.path))
        else:
            pf.url = file_url(source.base, pf.path)
        engine = engine_mod.Engine(
            self.local_dir, [pf], source.headers, source.allowed_origins, manifest, self.commit,
            max_workers=self.max_workers, verify="sha256", stall_timeout=self.stall_timeout, retries=0,
            on_progress=self._tick, progress_interval=self.progress_interval,
            read_only=hf_manifest.snapshot_commit(self.local_dir) is not None)
        with self.lock:
            self.running[engine] = source
        try:
            engine.run()
            outcome, detail = "ok", ""
            first_byte, verified = engine.stats.file_times.get(pf.path, (None, None))
            with self.lock:
                self.file_times[pf.path] = {"source": source.name, "first_byte": first_byte, "verified": verified}
        except engine_mod.FetchFailed as exc:
            if _local_cause(exc):  # this disk, not the source: no other source can help
                from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer

                raise hf_transfer.fetch_error(self.opts, exc, engine.stats) from None
            outcome = "rejected" if engine.stats.refetched else "failed"
            detail = str(exc)
        finally:
            with self.lock:
                self.running.pop(engine, None)
                self.by_source[source.name] = self.by_source.get(source.name, 0) + engine.stats.bytes_fetched
        return outcome, engine.stats.bytes_resumed, detail


def _local_cause(exc):
    """A fetch that failed on the local disk (full, read-only, too large, failing, or a symlink planted under
    local_dir): no other source can help."""
    from ansible_collections.ct200.deploy.plugins.module_utils._io import UnsafePathError
    from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer import is_local_write_error

    cause = getattr(exc, "cause", None)
    return isinstance(cause, UnsafePathError) or is_local_write_error(cause)
