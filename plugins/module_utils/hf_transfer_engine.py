# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Parallel, resumable, verifying fetch of planned files (standard library only).

PRIVATE to the ct200.deploy collection.

Model:

* every file to fetch is written to ``<local_dir>/.ct200/tmp/<key>.part`` and
  described by ``<key>.state`` (JSON: path, oid, size and the byte segments
  with how far each got).  The state is persisted every ~2 s and on exit, so a
  SIGKILLed run resumes every partial file by Range where it stopped;
* files are fetched in the order given (``hf_transfer_plan.fetch_order``, the order the site fan-out's
  children ask for them), each cut into up to ``PIECES_PER_WORKER x max_workers``
  equal byte ranges of at least ``split_min`` bytes, queued file after file: the workers share the first
  file(s), so files complete one after another from the start instead of all
  together near the end (a fan-out child can take a file only once its parent has
  verified it: whole files on every connection made the tree wait a wave of files
  per hop).  Several pieces per worker, because one straggling connection (a slow CDN
  edge, a stream starved on a shared link) holds its file until its piece is done
  while the others finish the files after it: with one piece per worker that was a
  quarter of a file or more and the files completed in bunches again; a smaller piece
  bounds the wait without splitting a request in flight (the bytes the server already
  sent for the abandoned rest would be fetched twice).  While fewer than half of ``max_workers`` files are in flight, idle
  workers split the largest remaining segment (>= 2 x ``split_min``), so the tail
  keeps the connections busy;
* bytes are read with ``readinto`` into one 1 MiB buffer per worker, written
  with ``pwrite`` and hashed in the same pass when they are the next bytes of
  the file (the hashlib call releases the GIL); bytes written ahead of the hash
  cursor by other segments are hashed right after, from the page cache;
* a segment whose bytes stop growing for ``stall_timeout`` is aborted (its
  socket is shut down by a watchdog) and retried; 408/429/5xx and network
  errors are retried with exponential backoff honouring ``Retry-After``;
* a complete file is checked against the Hub's oid (LFS sha256, or git blob
  sha1 for small files), fsynced if asked, renamed into place atomically and
  recorded in the manifest; a mismatch deletes the part file and fetches it again;
* every open, rename and removal under ``local_dir`` goes through :mod:`_io` or
  directory descriptors walked from ``local_dir`` with ``O_NOFOLLOW``: a planted
  symlink (a ``.part``, a ``.state``, a directory on the way to a file) is refused
  or replaced, never followed.
"""

from __future__ import annotations

import collections
import hashlib
import json
import mmap
import os
import socket
import stat
import threading
import time

from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest
from ansible_collections.ct200.deploy.plugins.module_utils._io import (
    UnsafePathError,
    atomic_write,
    open_nofollow,
    parent_fd,
    safe_remove,
)
from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_http import (
    Connections,
    HttpError,
    TransferError,
    open_stream,
    origin_of,
    shutdown_socket,
    token_may_follow,
)
from ansible_collections.ct200.deploy.plugins.module_utils.redact import redact

BUF_SIZE = 1 << 20
ALIGN = 4096  # O_DIRECT offset/length/address alignment (covers 512-byte devices too)
DIRECT_MIN_SIZE = 16 << 20  # smaller files go through the page cache
PIECES_PER_WORKER = 4  # a file's ranges per worker: one more request per piece, a straggler holds a quarter
MIN_PIECE = 16 * ALIGN  # smallest range a file is cut into (64 KiB); split_min below this is raised to it
TMP_DIR = "tmp"
STATE_SAVE_INTERVAL = 2.0
# Signed CDN / cas-bridge URLs expire (about an hour on the real Hub) and an edge may hand back a cached,
# already expired redirect for a while: re-resolve up to this many times in a row (with backoff) before
# giving up.  These do not use the ordinary retry budget.
RESOLVE_LIMIT = 8
# Total wait one segment accepts from the Hub's 429 RateLimit/Retry-After (the Hub's window is 300 s).
RATE_LIMIT_MAX_WAIT = 900.0


class FetchFailed(Exception):
    """The run stopped: ``str()`` names the file and the cause; ``cause`` is the last TransferError."""

    def __init__(self, message, cause=None, path=None):
        super().__init__(message)
        self.cause = cause
        self.path = path


def tmp_dir(local_dir):
    return os.path.join(hf_manifest.state_dir(local_dir), TMP_DIR)


def part_key(path, oid):
    return "%s.%s" % (hashlib.sha256(path.encode("utf-8")).hexdigest()[:16], (oid or "none")[:16])


def state_key(name):
    """The part key a file in the tmp directory belongs to (None for names we never write)."""
    for suffix in (".part", ".state"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return None


def remove_tmp_dir(local_dir):
    """rmdir .ct200/tmp if empty (relative to the state directory's descriptor: no symlink followed)."""
    try:
        dir_fd = parent_fd(tmp_dir(local_dir), root=local_dir)[0]
    except (OSError, UnsafePathError):
        return
    try:
        os.rmdir(TMP_DIR, dir_fd=dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def read_partial(local_dir, path, oid, size):
    """Bytes already present in a resumable partial file of (path, oid, size); 0 if none/unusable."""
    key = part_key(path, oid)
    base = os.path.join(tmp_dir(local_dir), key)
    state = _load_state(base + ".state", local_dir)
    if not state or state.get("path") != path or state.get("oid") != oid or state.get("size") != size:
        return 0, None
    try:
        st = hf_manifest.lstat_under(local_dir, os.path.relpath(base + ".part", local_dir))
    except (OSError, UnsafePathError):
        return 0, None
    if st is None or not stat.S_ISREG(st.st_mode):
        return 0, None
    segments = state.get("segments")
    if not isinstance(segments, list):
        return 0, None
    done = 0
    for seg in segments:
        if not (isinstance(seg, list) and len(seg) == 3 and all(isinstance(v, int) and not isinstance(v, bool) for v in seg)):
            return 0, None
        start, end, pos = seg
        if not (0 <= start <= pos <= end <= size):
            return 0, None
        done += pos - start
    if st.st_size > size or any(pos > start and pos > st.st_size for start, _e, pos in segments):
        return 0, None
    return done, segments


def _load_state(path, local_dir):
    try:
        fd = open_nofollow(path, os.O_RDONLY, root=local_dir)
    except (OSError, UnsafePathError):
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            data = json.loads(handle.read(1 << 20).decode("utf-8"))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


class Segment(object):
    __slots__ = ("file", "start", "end", "pos")

    def __init__(self, file, start, end, pos=None):
        self.file = file
        self.start = start
        self.end = end
        self.pos = start if pos is None else pos

    @property
    def remaining(self):
        return self.end - self.pos


class FileJob(object):
    """One file to fetch (a :class:`~hf_transfer.PlanFile` plus transfer state)."""

    def __init__(self, plan_file, local_dir, hashing):
        self.pf = plan_file
        self.local_dir = local_dir
        self.path = plan_file.path
        self.size = plan_file.size
        self.oid = plan_file.oid
        self.lfs = plan_file.lfs
        self.url = plan_file.url
        self.dest = os.path.join(local_dir, plan_file.path)
        key = part_key(plan_file.path, plan_file.oid)
        base = os.path.join(tmp_dir(local_dir), key)
        self.part = base + ".part"
        self.state_path = base + ".state"
        self.hashing = hashing
        self.segments = []
        self.fd = None
        self.dfd = None  # O_DIRECT descriptor of the same part file, when the filesystem accepts it
        self.direct_ok = False
        self.location = None  # cached CDN URL (redirect target)
        self.auth_on_location = True
        self.no_range = False
        self.hash_pos = 0
        self.hash_busy = False
        self.sha256 = None
        self.sha1 = None
        self.done = False
        self.finalizing = False
        self.verify_failures = 0
        self.state_dirty = True
        self.started = False
        self.first_byte_at = None  # wall clock (time.time()) when a response for it began: the fan-out's hop lag
        self.done_at = None  # wall clock when it was renamed into place (verified)

    def reset_hashers(self):
        self.hash_pos = 0
        self.sha256 = hashlib.sha256()
        if not self.lfs:
            self.sha1 = hashlib.sha1(b"blob %d\0" % self.size)
        else:
            self.sha1 = None

    def frontier(self):
        """End of the contiguous written region starting at the hash cursor."""
        f = self.hash_pos
        for seg in self.segments:
            if seg.end <= f:
                continue
            if seg.start > f:
                break
            if seg.pos > f:
                f = seg.pos
            if seg.pos < seg.end:
                break
        return f

    def all_written(self):
        return all(seg.pos >= seg.end for seg in self.segments)

    def state(self):
        return {
            "path": self.path,
            "oid": self.oid,
            "size": self.size,
            "segments": [[s.start, s.end, s.pos] for s in self.segments],
        }


class Transfer(object):
    """What the watchdog knows about one worker's current request."""

    __slots__ = ("sock", "last_progress", "stalled", "segment")

    def __init__(self, segment):
        self.sock = None
        self.last_progress = time.monotonic()
        self.stalled = False
        self.segment = segment


class Stats(object):
    def __init__(self):
        self.bytes_fetched = 0
        self.bytes_resumed = 0
        self.files_done = 0
        self.bytes_files_done = 0
        self.retries = 0
        self.stalls = 0
        self.rate_limit_wait = 0.0  # seconds slept because the Hub said so (429 RateLimit / Retry-After)
        self.reresolves = 0  # signed URLs found expired and resolved again
        self.refetched = []  # paths re-fetched after a hash mismatch
        self.retry_causes = collections.Counter()
        self.downloaded = []
        self.file_times = {}  # path -> (first byte, renamed into place), wall-clock seconds


class Engine(object):
    """Fetch ``files`` (list of PlanFile with ``url``) into ``local_dir``."""

    def __init__(
        self,
        local_dir,
        files,
        headers,
        allowed_origins,
        manifest,
        commit,
        max_workers=8,
        verify="sha256",
        stall_timeout=60.0,
        retries=5,
        split_min=64 << 20,
        backoff_base=1.0,
        backoff_max=30.0,
        fsync=False,
        direct_io=True,
        on_progress=None,
        progress_interval=1.0,
        manifest_save_interval=1.0,
        sleep=time.sleep,
        resolve_limit=RESOLVE_LIMIT,
        rate_limit_max_wait=RATE_LIMIT_MAX_WAIT,
        read_only=False,
    ):
        self.local_dir = local_dir
        self.headers = headers
        self.allowed_origins = allowed_origins
        self.manifest = manifest
        self.commit = commit
        self.max_workers = max(1, int(max_workers))
        self.verify = verify
        self.stall_timeout = float(stall_timeout)
        self.retries = int(retries)
        self.split_min = max(MIN_PIECE, int(split_min))
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.fsync = fsync
        self.direct_io = direct_io and hasattr(os, "O_DIRECT")
        self.on_progress = on_progress
        self.progress_interval = progress_interval
        self.manifest_save_interval = manifest_save_interval
        self.sleep = sleep
        self.resolve_limit = int(resolve_limit)
        self.rate_limit_max_wait = float(rate_limit_max_wait)
        self.read_only = read_only  # a snapshot's files are 0444 once verified (before the stat is recorded)
        self.warnings = []

        self.lock = threading.Condition()
        self.pending = collections.deque()
        self.active = set()
        self.transfers = {}
        self.jobs = []
        self.error = None
        self.stats = Stats()
        self.finished = False
        self._last_manifest_save = 0.0
        self._open_jobs = 0
        for pf in files:
            hashing = verify != "size" or not pf.lfs
            job = FileJob(pf, local_dir, hashing)
            self.jobs.append(job)

    # ------------------------------------------------------------ preparation
    def _prepare(self):
        for job in self.jobs:
            done, segments = read_partial(self.local_dir, job.path, job.oid, job.size)
            if segments:
                job.segments = [Segment(job, s, e, p) for s, e, p in segments]
                job.segments.sort(key=lambda seg: seg.start)
                self.stats.bytes_resumed += done
            else:
                for stale in (job.part, job.state_path):
                    safe_remove(stale, root=self.local_dir)
                job.segments = self._pieces(job)
            job.reset_hashers()
            for seg in job.segments:
                if seg.pos < seg.end:
                    self.pending.append(seg)
            self._open_jobs += 1

    # ------------------------------------------------------------- scheduling
    def _pieces(self, job):
        """``[0, size)`` as up to ``PIECES_PER_WORKER x max_workers`` equal ranges of at least
        ``split_min`` bytes (page-aligned).

        They are queued file after file, so idle workers take the next ranges of the first
        unfinished file before they open another one: about two files are in flight and they
        complete in order."""
        if not job.size:
            return []
        count = max(1, min(self.max_workers * PIECES_PER_WORKER, job.size // self.split_min))
        step = -(-job.size // count)
        step += -step % ALIGN
        return [Segment(job, start, min(start + step, job.size)) for start in range(0, job.size, step)]

    def _next_segment(self):
        with self.lock:
            while True:
                if self.error is not None:
                    return None
                while self.pending:
                    seg = self.pending.popleft()
                    if seg.pos < seg.end:
                        self.active.add(seg)
                        return seg
                seg = self._split_largest()
                if seg is not None:
                    self.active.add(seg)
                    return seg
                if self._open_jobs == 0:
                    return None
                # files still hashing/finalising elsewhere may need a re-fetch: wait for news
                self.lock.wait(0.5)

    def _split_largest(self):
        # Whole files on at least half the connections keep the pipe full; splitting more only adds
        # connections and makes the hash cursor re-read bytes other workers wrote.  Below that (one
        # big file, the tail of a repository) idle workers take over halves of the biggest remainders.
        if len(set(id(seg.file) for seg in self.active)) * 2 >= self.max_workers:
            return None
        best = None
        for seg in self.active:
            if seg.file.no_range:
                continue
            if best is None or seg.remaining > best.remaining:
                best = seg
        if best is None or best.remaining < 2 * self.split_min:
            return None
        mid = best.pos + best.remaining // 2
        mid -= mid % BUF_SIZE
        if mid <= best.pos + BUF_SIZE:
            return None
        job = best.file
        new = Segment(job, mid, best.end)
        best.end = mid
        job.segments.append(new)
        job.segments.sort(key=lambda s: s.start)
        job.state_dirty = True
        return new

    # ----------------------------------------------------------------- worker
    def _worker(self):
        conns = Connections(timeout=self.stall_timeout)
        buf = mmap.mmap(-1, BUF_SIZE)  # page-aligned: usable for O_DIRECT writes
        rbuf = bytearray(BUF_SIZE)
        try:
            while True:
                seg = self._next_segment()
                if seg is None:
                    return
                try:
                    self._run_segment(seg, conns, buf, rbuf)
                except FetchFailed as exc:
                    self._fail(exc)
                except Exception as exc:  # a bug or an OS error (disk full, permissions): stop, name it
                    self._fail(FetchFailed("%s: %s: %s" % (seg.file.path, type(exc).__name__, exc), cause=exc,
                                           path=seg.file.path))
                finally:
                    with self.lock:
                        self.active.discard(seg)
                        self.lock.notify_all()
        finally:
            conns.close()

    def _fail(self, exc):
        with self.lock:
            if self.error is None:
                self.error = exc
            self.lock.notify_all()
        for transfer in list(self.transfers.values()):
            shutdown_socket(transfer)

    def _open_job(self, job):
        with self.lock:
            if job.fd is not None:
                return
            if not job.started:
                job.started = True
                # the file this replaces is known to be wrong (missing, other size, other content, a
                # symlink): unlinked, never followed; a directory in its place is refused
                safe_remove(job.dest, root=self.local_dir)
            job.fd = self._open_part(job)
            job.dfd = self._open_direct(job)
            job.direct_ok = job.dfd is not None
            job.state_dirty = True

    def _open_part(self, job):
        return open_nofollow(job.part, os.O_RDWR | os.O_CREAT, 0o644, root=self.local_dir, create_dirs=True)

    def _open_direct(self, job):
        """O_DIRECT descriptor for big files: the bytes go to the disk without being copied into the
        page cache (about a third of the CPU a byte costs here) and a 600 GB download does not evict
        everything else from memory.  None when unsupported; the page cache is used then."""
        if not self.direct_io or job.size < DIRECT_MIN_SIZE:
            return None
        try:
            # the very file job.fd holds (not whatever the name points to by now)
            return os.open("/proc/self/fd/%d" % job.fd, os.O_RDWR | os.O_DIRECT | os.O_CLOEXEC)
        except OSError:
            self.direct_io = False  # this filesystem refuses it: do not try again
            return None

    def _write(self, job, chunk, pos):
        """pwrite ``chunk`` at ``pos``: page-aligned whole pages directly, the rest through the page cache."""
        n = len(chunk)
        done = 0
        if job.direct_ok and pos % ALIGN == 0 and n >= ALIGN:
            body = n - n % ALIGN
            try:
                while done < body:
                    done += os.pwrite(job.dfd, chunk[done:body], pos + done)
            except OSError:
                job.direct_ok = False  # refused at write time (this device's rules): page cache from now on
        while done < n:
            done += os.pwrite(job.fd, chunk[done:], pos + done)

    def _close_fds(self, job):
        job.direct_ok = False
        for name in ("dfd", "fd"):
            fd = getattr(job, name)
            if fd is not None:
                setattr(job, name, None)
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _backoff(self, attempt, retry_after):
        if retry_after is not None:
            return min(max(retry_after, 0.0), max(self.backoff_max, 300.0))
        return min(self.backoff_base * (2 ** (attempt - 1)), self.backoff_max)

    def _run_segment(self, seg, conns, buf, rbuf):
        job = seg.file
        self._open_job(job)
        attempts = 0
        waits = {"expired": 0, "rate_limited": 0.0}  # outside the ordinary retry budget
        mv = memoryview(buf)
        while True:
            with self.lock:
                if self.error is not None:
                    return
                start, end = seg.pos, seg.end
            if start >= end:
                break
            transfer = Transfer(seg)
            key = threading.get_ident()
            self.transfers[key] = transfer
            progressed = False
            try:
                progressed = self._fetch_range(job, seg, start, end, conns, mv, rbuf, transfer)
            except TransferError as exc:
                if transfer.stalled:
                    exc = TransferError("no data received for %.0f s (stalled)" % self.stall_timeout)
                    self.stats.stalls += 1
                    conns.close()
                with self.lock:
                    if self.error is not None:
                        return
                if seg.pos > start:
                    waits["expired"] = 0  # bytes came since the last fresh URL: it was not a stale redirect
                if self._wait_out(job, exc, waits):
                    continue
                attempts = 0 if progressed else attempts + 1
                if not exc.retryable:
                    raise FetchFailed("%s: %s" % (job.path, exc), cause=exc, path=job.path)
                if attempts > self.retries:
                    raise FetchFailed(
                        "%s: giving up after %d retries: %s" % (job.path, self.retries, exc), cause=exc, path=job.path
                    )
                self.stats.retries += 1
                self.stats.retry_causes[_cause_key(exc)] += 1
                self._interruptible_sleep(self._backoff(max(attempts, 1), getattr(exc, "retry_after", None)))
            finally:
                self.transfers.pop(key, None)
        self._maybe_finish(job)

    def _wait_out(self, job, exc, waits):
        """Handle what the ordinary retry budget must not pay for: an expired signed URL (resolve it
        again, with backoff, up to resolve_limit times in a row) and the Hub's rate limit (sleep as long
        as its RateLimit or Retry-After header says, up to rate_limit_max_wait in all).  True: try again."""
        if self._url_expired(job, exc):
            job.location = None
            waits["expired"] += 1
            if waits["expired"] > self.resolve_limit:
                # no cause: the 403 is the CDN's verdict on a stale URL, not the Hub's on the token
                raise FetchFailed("%s: the signed download URL was still expired after %d fresh resolves: %s"
                                  % (job.path, self.resolve_limit, exc), path=job.path)
            self._count_retry("expired_url", reresolve=True)
            # the first re-resolve at once; a stale URL again means a cached redirect: back off
            if waits["expired"] > 1:
                self._interruptible_sleep(self._backoff(waits["expired"] - 1, None))
            return True
        if isinstance(exc, HttpError) and exc.status == 429 and exc.retry_after is not None:
            delay = min(max(exc.retry_after, 0.0), self.rate_limit_max_wait)
            if waits["rate_limited"] + delay > self.rate_limit_max_wait:
                raise FetchFailed("%s: the Hub kept rate-limiting it for more than %.0f s: %s"
                                  % (job.path, self.rate_limit_max_wait, exc), cause=exc, path=job.path)
            waits["rate_limited"] += delay
            self._count_retry(_cause_key(exc), wait=delay)
            self._warn_once(_rate_limit_note(exc))
            self._interruptible_sleep(delay)
            return True
        return False

    def _url_expired(self, job, exc):
        """A 403/404/410 from where the Hub redirected us (a cached URL, or another origin: the CDN or
        the Xet bridge) means a signed URL that expired; from the Hub itself it is a real refusal."""
        if not isinstance(exc, HttpError) or exc.status not in (403, 404, 410):
            return False
        return job.location is not None or origin_of(exc.url) != origin_of(job.url)

    def _count_retry(self, cause, wait=0.0, reresolve=False):
        with self.lock:
            self.stats.retries += 1
            self.stats.retry_causes[cause] += 1
            self.stats.rate_limit_wait += wait
            self.stats.reresolves += 1 if reresolve else 0

    def _interruptible_sleep(self, delay):
        deadline = time.monotonic() + delay
        while True:
            with self.lock:
                if self.error is not None:
                    return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.sleep(min(left, 0.2))

    def _fetch_range(self, job, seg, start, end, conns, mv, rbuf, transfer):
        """Stream [start, end) of ``job`` into its part file; True if any byte was written."""
        url = job.location or job.url
        headers = self.headers if (job.location is None or job.auth_on_location) else _without_auth(self.headers)

        def on_socket(sock):
            transfer.sock = sock

        full_request = start == 0 and end == job.size
        resp, final_url, status = open_stream(
            conns,
            url,
            headers,
            byte_range=None if (job.no_range and full_request) else (start, end - 1),
            allowed_origins=self.allowed_origins,
            on_socket=on_socket,
        )
        if job.first_byte_at is None:
            job.first_byte_at = time.time()  # the response began: its first byte is here
        if job.location is None and final_url != job.url:
            job.location = final_url
            job.auth_on_location = token_may_follow(job.url, final_url, self.allowed_origins)
        transfer.last_progress = time.monotonic()
        _refuse_encoded(resp, conns, final_url)
        skip = 0
        if status == 206:
            crange = resp.getheader("Content-Range") or ""
            got_start, got_total = _parse_content_range(crange)
            if got_start != start:
                conns.drop(final_url)
                raise TransferError("server sent range %r for bytes %d-%d" % (crange, start, end - 1))
            if got_total is not None and got_total != job.size:
                conns.drop(final_url)
                raise TransferError(
                    "server says the file has %d bytes, the Hub tree says %d (Content-Range %r)" % (got_total, job.size, crange),
                    retryable=False,
                )
        else:
            length = resp.getheader("Content-Length")
            if length is not None and length.isdigit() and int(length) != job.size:
                conns.drop(final_url)
                raise TransferError(
                    "server says the file has %s bytes, the Hub tree says %d" % (length, job.size), retryable=False
                )
            if not full_request:
                job.no_range = True  # the server ignores Range: read the file from its start
            skip = start
        progressed = False
        pos = start
        try:
            while skip > 0:
                n = resp.readinto(mv[: min(BUF_SIZE, skip)])
                if not n:
                    raise TransferError("connection closed while skipping to byte %d" % start)
                skip -= n
                transfer.last_progress = time.monotonic()
            while True:
                with self.lock:
                    limit = seg.end
                    if self.error is not None:
                        break
                if pos >= limit:
                    break
                want = min(BUF_SIZE, limit - pos)
                if job.direct_ok and pos % ALIGN:
                    want = min(want, ALIGN - pos % ALIGN)  # realign after a resume at an odd offset
                try:
                    n = resp.readinto(mv[:want])
                except socket.timeout:
                    transfer.stalled = True
                    raise TransferError("no data received for %.0f s (stalled)" % self.stall_timeout)
                except OSError as exc:
                    raise TransferError("connection error after %d of %d bytes: %s" % (pos, job.size, exc))
                except Exception as exc:  # http.client.IncompleteRead and friends
                    raise TransferError("connection error after %d of %d bytes: %s" % (pos, job.size, exc))
                if not n:
                    raise TransferError("connection closed after %d of %d bytes" % (pos, job.size))
                chunk = mv[:n]
                self._write(job, chunk, pos)
                transfer.last_progress = time.monotonic()
                progressed = True
                with self.lock:
                    seg.pos = pos + n
                    self.stats.bytes_fetched += n
                    job.state_dirty = True
                self._advance_hash(job, chunk, pos, rbuf)
                pos += n
        finally:
            if resp.length is not None and resp.length > 0 or not resp.isclosed():
                # body not fully consumed (split segment, error): the connection cannot be reused
                conns.drop(final_url)
        return progressed

    # ---------------------------------------------------------------- hashing
    def _advance_hash(self, job, chunk, chunk_pos, rbuf):
        if not job.hashing:
            return
        with self.lock:
            if job.hash_busy:
                return
            frontier = job.frontier()
            if frontier <= job.hash_pos:
                return
            job.hash_busy = True
            use_chunk = chunk is not None and job.hash_pos == chunk_pos and frontier >= chunk_pos + len(chunk)
            hash_pos = job.hash_pos
        rmv = memoryview(rbuf)
        try:
            while True:
                if use_chunk:
                    _update(job, chunk)
                    hash_pos = chunk_pos + len(chunk)
                    use_chunk = False
                else:
                    while hash_pos < frontier:
                        want = min(BUF_SIZE, frontier - hash_pos)
                        n = os.preadv(job.fd, [rmv[:want]], hash_pos)
                        if n <= 0:
                            raise OSError("short read of %s at %d" % (job.part, hash_pos))
                        _update(job, rmv[:n])
                        hash_pos += n
                with self.lock:
                    job.hash_pos = hash_pos
                    frontier = job.frontier()
                    if frontier <= hash_pos:
                        job.hash_busy = False
                        return
        except BaseException:
            with self.lock:
                job.hash_busy = False
            raise

    def _maybe_finish(self, job):
        rbuf = None
        with self.lock:
            if job.finalizing or job.done or not job.all_written():
                return
            if job.hashing and job.hash_pos < job.size:
                if job.hash_busy:
                    return  # the thread hashing it will call us again
                rbuf = bytearray(BUF_SIZE)
        if rbuf is not None:
            self._advance_hash(job, None, -1, rbuf)
        with self.lock:
            if job.finalizing or job.done:
                return
            if job.hashing and job.hash_pos < job.size:
                return
            job.finalizing = True
        self._finalize(job)

    def _finalize(self, job):
        if job.fd is None:  # empty file
            self._open_job(job)
        sha256 = None
        if job.hashing:
            sha256 = job.sha256.hexdigest()
            expected = job.oid
            got = sha256 if job.lfs else job.sha1.hexdigest()
            if got != expected:
                self._refetch(job, "%s mismatch: expected %s, got %s" % ("sha256" if job.lfs else "git blob sha1", expected, got))
                return
        st = os.fstat(job.fd)
        if st.st_size != job.size:
            self._refetch(job, "size mismatch: expected %d bytes, got %d" % (job.size, st.st_size))
            return
        if self.fsync:
            os.fsync(job.fd)
        sample = hf_manifest.sample_digest(job.fd, job.size)
        if self.read_only:
            os.fchmod(job.fd, 0o444)
        self._close_fds(job)
        st = self._rename_into_place(job)
        with self.lock:
            self.manifest.record(job.path, st, sha256, job.oid, self.commit, sample, hashed=job.hashing)
            job.done = True
            self._open_jobs -= 1
            self.stats.files_done += 1
            self.stats.bytes_files_done += job.size
            self.stats.downloaded.append(job.path)
            job.done_at = time.time()
            self.stats.file_times[job.path] = (job.first_byte_at or job.done_at, job.done_at)
            save = time.monotonic() - self._last_manifest_save >= self.manifest_save_interval
            self.lock.notify_all()
        if save:
            self._save_manifest()

    def _rename_into_place(self, job):
        """rename(2) the part file over the destination, both named relative to directory descriptors
        walked from local_dir without following symlinks; returns the lstat of the result."""
        src_fd, src_name = parent_fd(job.part, root=self.local_dir)
        try:
            dst_fd, dst_name = parent_fd(job.dest, root=self.local_dir, create=True)
            try:
                os.replace(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
                if self.fsync:
                    _fsync_fd(dst_fd)
                safe_remove(job.state_path, root=self.local_dir)
                return os.stat(dst_name, dir_fd=dst_fd, follow_symlinks=False)
            finally:
                os.close(dst_fd)
        finally:
            os.close(src_fd)

    def _refetch(self, job, reason):
        job.verify_failures += 1
        self.stats.refetched.append(job.path)
        self._close_fds(job)
        for stale in (job.part, job.state_path):
            safe_remove(stale, root=self.local_dir)
        if job.verify_failures > self.retries:
            raise FetchFailed(
                "%s: %s (after %d downloads; the source keeps sending other bytes)" % (job.path, reason, job.verify_failures),
                path=job.path,
            )
        with self.lock:
            job.location = None
            job.segments = self._pieces(job)
            job.reset_hashers()
            job.finalizing = False
            job.state_dirty = True
            job.fd = self._open_part(job)
            job.dfd = self._open_direct(job)
            job.direct_ok = job.dfd is not None
            self.pending.extendleft(reversed(job.segments))  # first again: the files after it wait for it
            self.lock.notify_all()

    def _save_manifest(self):
        with self.lock:
            self._last_manifest_save = time.monotonic()
            data = json.loads(json.dumps(self.manifest.data))
        snapshot = hf_manifest.Manifest(self.local_dir, data)
        snapshot.save(fsync=self.fsync)

    def _save_manifest_after(self):
        """Final manifest save.  When the run already failed (a full disk, say) a failing save must
        not replace that error: the files it would record are hashed again on the next run."""
        try:
            self._save_manifest()
        except (OSError, UnsafePathError) as exc:
            with self.lock:
                failed = self.error is not None
            if not failed:
                raise
            self._warn_once("manifest not saved after the failure (verified files are hashed again next run): %s"
                            % exc)

    def _save_states(self, force=False):
        with self.lock:
            todo = [(j, j.state()) for j in self.jobs if j.started and not j.done and (j.state_dirty or force)]
            for job, _state in todo:
                job.state_dirty = False
        for job, state in todo:
            try:
                atomic_write(job.state_path, json.dumps(state, separators=(",", ":")), mode=0o600,
                             root=self.local_dir, create_dirs=True)
            except (OSError, UnsafePathError) as exc:
                # the download goes on; the part file resumes from an older state (or restarts)
                job.state_dirty = True
                self._warn_once("could not save the resume state of %s: %s" % (job.path, exc))

    def _warn_once(self, text):
        with self.lock:
            if len(self.warnings) < 5 and text not in self.warnings:
                self.warnings.append(text)

    # ---------------------------------------------------------------- monitor
    def _monitor(self, stop):
        last_state = time.monotonic()
        last_progress = 0.0
        while not stop.wait(0.25):
            now = time.monotonic()
            for transfer in list(self.transfers.values()):
                if not transfer.stalled and now - transfer.last_progress > self.stall_timeout:
                    transfer.stalled = True
                    shutdown_socket(transfer)
            if now - last_state >= STATE_SAVE_INTERVAL:
                last_state = now
                self._save_states()
            if self.on_progress is not None and now - last_progress >= self.progress_interval:
                last_progress = now
                try:
                    self.on_progress(self)
                except Exception as exc:  # progress is for the poller; the download goes on
                    self._warn_once("could not update the progress file: %s" % exc)

    # -------------------------------------------------------------------- run
    def run(self):
        if not self.jobs:
            return self.stats
        self._prepare()
        # empty files, and partial files that were complete when the last run died
        ready = [j for j in self.jobs if j.all_written()]
        stop = threading.Event()
        monitor = threading.Thread(target=self._monitor, args=(stop,), name="ct200-monitor")
        monitor.daemon = True
        monitor.start()
        workers = []
        try:
            for job in ready:
                try:
                    self._open_job(job)
                    self._maybe_finish(job)
                except FetchFailed as exc:
                    self._fail(exc)
            remaining = sum(s.remaining for s in self.pending)
            n = min(self.max_workers, max(1, len(self.pending), remaining // self.split_min + 1))
            for i in range(n - 1):
                t = threading.Thread(target=self._worker, name="ct200-fetch-%d" % i)
                t.daemon = True
                t.start()
                workers.append(t)
            self._worker()  # the last one in this thread: a one-file fan-out run starts its request sooner
            for t in workers:
                t.join()
        finally:
            stop.set()
            monitor.join()
            for job in self.jobs:
                self._close_fds(job)
            self._save_states(force=True)
            self._save_manifest_after()
            self.finished = True
        if self.error is not None:
            raise self.error
        missing = [j.path for j in self.jobs if not j.done]
        if missing:
            raise FetchFailed("internal error: %d file(s) not completed: %s" % (len(missing), ", ".join(missing[:5])))
        return self.stats


def _rate_limit_note(exc):
    """One warning per run and kind of limit (the numbers vary: _warn_once keys on the text)."""
    if exc.rate_limit is not None:
        resource, _reset, limit, window = exc.rate_limit
        quota = " (%d requests per %d s)" % (limit, window) if limit is not None and window is not None else ""
        return ("the Hub rate-limited the downloads (HTTP 429, its %r limit%s): waited as its RateLimit header "
                "asked, without using the retries; rate_limit_wait_s says how long" % (resource, quota))
    return ("the Hub answered HTTP 429 with Retry-After: waited as it asked, without using the retries; "
            "rate_limit_wait_s says how long")


def _refuse_encoded(resp, conns, url):
    """The bytes must be the file itself (what the oid hashes): a body sent with a Content-Encoding other than
    identity, asked for with ``Accept-Encoding: identity``, would fail the size or hash check without saying why."""
    encoding = (resp.getheader("Content-Encoding") or "identity").strip().lower()
    if encoding != "identity":
        conns.drop(url)
        raise TransferError(
            "the server sent the file with Content-Encoding: %s although the request asked for identity (the "
            "file's own bytes, which the Hub's oid hashes); a proxy or mirror in between compresses responses: "
            "exempt the Hub and its CDN from compression there" % redact(encoding[:40]), retryable=False)


def _update(job, data):
    job.sha256.update(data)
    if job.sha1 is not None:
        job.sha1.update(data)


def _without_auth(headers):
    return dict((k, v) for k, v in headers.items() if k.lower() != "authorization")


def _parse_content_range(value):
    """'bytes 0-99/1234' -> (0, 1234); total None for '*'; (-1, None) if unparsable."""
    try:
        unit, rest = value.strip().split(" ", 1)
        if unit.lower() != "bytes":
            return -1, None
        span, total = rest.split("/", 1)
        start = int(span.split("-", 1)[0])
        return start, (None if total.strip() == "*" else int(total))
    except (ValueError, IndexError):
        return -1, None


def _fsync_fd(dir_fd):
    try:
        os.fsync(dir_fd)
    except OSError:
        pass


def _cause_key(exc):
    if isinstance(exc, HttpError):
        return "http_%d" % exc.status
    text = str(exc)
    if "stalled" in text:
        return "stall"
    if "closed" in text:
        return "cut"
    return "network"
