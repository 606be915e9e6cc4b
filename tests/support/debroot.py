# SPDX-License-Identifier: Apache-2.0
"""Debian packages unpacked (``dpkg-deb -x``) into a directory the tests run binaries from, once per
checkout and safely under xdist: several workers may ask for the same root at the same moment."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile


def unpacked(root: str, debs) -> str:
    """ROOT holding the files of the .deb paths DEBS, unpacked on first use, and ROOT.

    The packages are unpacked into a private directory beside ROOT and renamed into place whole: tar makes
    a binary executable before it has written it, and a worker that exec'd a half-written one got ETXTBSY
    (CI stop 33). So ROOT exists only complete, and its existence is the fast path."""
    if os.path.isdir(root):
        return root
    parent = os.path.dirname(root)
    os.makedirs(parent, exist_ok=True)
    with open(root + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.isdir(root):
            return root
        unpacking = tempfile.mkdtemp(prefix=os.path.basename(root) + ".", dir=parent)
        try:
            for deb in debs:
                subprocess.run(["dpkg-deb", "-x", deb, unpacking], check=True, capture_output=True, timeout=300)
            os.rename(unpacking, root)
        finally:
            shutil.rmtree(unpacking, ignore_errors=True)
    return root
