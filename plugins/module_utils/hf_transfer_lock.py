# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""The directory lock of hf_download, the fan-out and release_gc: one writer per local_dir.

PRIVATE to the ct200.deploy collection.  Standard library only (plus the collection's _io and hf_manifest).
"""

from __future__ import annotations

import fcntl
import os
import time

from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest
from ansible_collections.ct200.deploy.plugins.module_utils._io import open_nofollow
from ansible_collections.ct200.deploy.plugins.module_utils.hf_download_spec import PROGRESS_NAME
from ansible_collections.ct200.deploy.plugins.module_utils.hf_errors import DownloadError

LOCK_NAME = "lock"
LOCK_POLL = 0.1


class DirLock(object):
    """flock on <local_dir>/.ct200/lock, taken before anything is read or planned: one
    hf_download per local_dir at a time.  ``timeout`` seconds to wait for another run (0: fail
    at once).  Directories it had to create are removed again by :meth:`release` when a
    failed run left them empty."""

    def __init__(self, local_dir, timeout=0.0, clock=time.monotonic, sleep=time.sleep):
        self.local_dir = local_dir
        self.path = os.path.join(hf_manifest.state_dir(local_dir), LOCK_NAME)
        self.timeout = timeout
        self.clock = clock
        self.sleep = sleep
        self.fd = None
        self.created = []

    def acquire(self):
        if not os.path.isdir(self.local_dir):
            missing = []
            parent = self.local_dir
            while not os.path.lexists(parent):
                missing.append(parent)
                parent = os.path.dirname(parent)
            os.makedirs(self.local_dir, 0o755, exist_ok=True)
            self.created = missing  # deepest first
        if not os.path.lexists(hf_manifest.state_dir(self.local_dir)):
            self.created.insert(0, hf_manifest.state_dir(self.local_dir))
        deadline = self.clock() + max(0.0, float(self.timeout or 0))
        while True:
            fd = open_nofollow(self.path, os.O_RDWR | os.O_CREAT, 0o644, root=self.local_dir, create_dirs=True)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                if self.clock() >= deadline:
                    raise DownloadError(
                        "another hf_download is writing to %s%s" % (
                            self.local_dir, " (waited %g s)" % self.timeout if self.timeout else ""),
                        code="busy",
                        fix="wait for it to finish (see %s), stop it, or set lock_timeout to wait for it"
                            % os.path.join(hf_manifest.state_dir(self.local_dir), PROGRESS_NAME),
                    )
                self.sleep(LOCK_POLL)
                continue
            if self._still_linked(fd):
                self.fd = fd
                return self
            os.close(fd)  # the holder removed the lock file on its way out: lock the new one

    def _still_linked(self, fd):
        st = hf_manifest.lstat_under(self.local_dir, os.path.join(hf_manifest.STATE_DIR, LOCK_NAME))
        return st is not None and st.st_ino == os.fstat(fd).st_ino

    def release(self, failed=False):
        if self.fd is None:
            return
        try:
            if failed and self.created:
                self._remove_created()
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def _remove_created(self):
        """A run that failed on a directory it created leaves nothing behind (rmdir: only if empty)."""
        from ansible_collections.ct200.deploy.plugins.module_utils._io import safe_remove

        try:
            safe_remove(self.path, root=self.local_dir)
        except OSError:
            return
        for directory in self.created:
            try:
                os.rmdir(directory)
            except OSError:
                return

    def __enter__(self):
        return self.acquire()

    def __exit__(self, exc_type, *exc):
        self.release(failed=exc_type is not None)
