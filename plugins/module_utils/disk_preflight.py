# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Disk-space preflight: free space and filesystem type for paths, checked together.

PRIVATE to the ct200.deploy collection.

Several downloads that land on one filesystem are checked *together*: their
outstanding byte counts are summed and compared with the free space of that
filesystem minus a headroom, so "target fits" + "drafter fits" can never add up
to a full disk.  Only the standard library is used (statvfs, /proc/self/mountinfo).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

__all__ = [
    "DiskSpaceError",
    "FsInfo",
    "FsCheck",
    "check_requirements",
    "fs_info",
    "format_bytes",
    "format_headroom",
    "nearest_existing",
    "parse_mountinfo",
    "parse_size",
]


class DiskSpaceError(Exception):
    """Not enough space (or the space cannot be determined); ``str()`` is the operator message."""

    def __init__(self, message, checks=None):
        super().__init__(message)
        self.checks = checks or []


@dataclass(eq=False)
class FsInfo:
    """Facts about the filesystem that holds a path."""

    __slots__ = ("path", "device", "mountpoint", "fstype", "free_bytes", "total_bytes")
    path: str
    device: str
    mountpoint: str
    fstype: str
    free_bytes: int
    total_bytes: int

    def as_dict(self):
        return {
            "mountpoint": self.mountpoint,
            "fstype": self.fstype,
            "free_bytes": self.free_bytes,
            "total_bytes": self.total_bytes,
        }


class FsCheck(object):
    """Result of the combined check for one filesystem."""

    __slots__ = ("fs", "needed_bytes", "headroom_bytes", "items", "reused_bytes")

    def __init__(self, fs, needed_bytes, headroom_bytes, items, reused_bytes=0):
        self.fs = fs
        self.needed_bytes = needed_bytes
        self.headroom_bytes = headroom_bytes
        self.items = items  # list of (label, path, bytes)
        self.reused_bytes = reused_bytes  # hard-linked from kept snapshots: no new blocks, not counted

    @property
    def ok(self):
        return self.needed_bytes == 0 or self.needed_bytes + self.headroom_bytes <= self.fs.free_bytes

    @property
    def shortfall_bytes(self):
        return max(0, self.needed_bytes + self.headroom_bytes - self.fs.free_bytes) if self.needed_bytes else 0

    def message(self):
        text = "need %s more on %s (%s, %s free, headroom %s)" % (
            format_bytes(self.needed_bytes),
            self.fs.mountpoint,
            self.fs.fstype,
            format_bytes(self.fs.free_bytes),
            format_headroom(self.headroom_bytes),
        )
        if len(self.items) > 1:
            text += ": " + " + ".join("%s %s" % (label, format_bytes(n)) for label, _path, n in self.items)
        if self.reused_bytes:
            text += "; %s more are hard-linked from the kept snapshots (unchanged files, no new space, not counted)" % (
                format_bytes(self.reused_bytes))
        return text

    def as_dict(self):
        data = self.fs.as_dict()
        data.update(
            {
                "needed_bytes": self.needed_bytes,
                "headroom_bytes": self.headroom_bytes,
                "ok": self.ok,
                "shortfall_bytes": self.shortfall_bytes,
                "reused_bytes": self.reused_bytes,
                "paths": [p for _label, p, _n in self.items],
                "message": self.message(),
            }
        )
        return data


_UNITS = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))


def format_bytes(n):
    """Decimal units with one decimal place: ``595.3 GB``, ``20.9 MB``, ``512 B``."""
    n = int(n)
    for unit, scale in _UNITS:
        if abs(n) >= scale:
            return "%.1f %s" % (n / scale, unit)
    return "%d B" % n


def format_headroom(n):
    """Like :func:`format_bytes` but without a trailing ``.0`` (``10 GB``)."""
    text = format_bytes(n)
    return text.replace(".0 ", " ")


_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtT]?)(i?)([bB]?)\s*\Z")


def parse_size(value):
    """Parse ``10GB`` (decimal), ``10GiB`` (binary), ``512`` or an int into bytes.

    Raises ValueError with a message naming the accepted forms.
    """
    if isinstance(value, bool):
        raise ValueError("size must be a number of bytes or a string like '10GB' or '10GiB', got %r" % (value,))
    if isinstance(value, int):
        if value < 0:
            raise ValueError("size must not be negative, got %d" % value)
        return _bounded(value, value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("size %r is not a finite number; use bytes (10000000000) or a string like '10GB'" % (value,))
        if value < 0:
            raise ValueError("size must not be negative, got %r" % value)
        return _bounded(int(value), value)
    match = _SIZE_RE.match(str(value))
    if not match:
        raise ValueError("cannot parse size %r; use bytes (10000000000) or a string like '10GB' or '10GiB'" % (value,))
    number, prefix, binary, _b = match.groups()
    if binary and not prefix:
        raise ValueError("cannot parse size %r; use bytes (10000000000) or a string like '10GB' or '10GiB'" % (value,))
    exponent = " KMGT".index(prefix.upper()) if prefix else 0
    scale = (1024 if binary else 1000) ** exponent
    return _bounded(int(float(number) * scale), value)


MAX_SIZE = 1 << 63  # no filesystem is larger; anything above is a typo (or 1.5e400)


def _bounded(n, value):
    if n >= MAX_SIZE:
        raise ValueError("size %r is larger than any filesystem (max %d bytes); use bytes or a string like '10GB'"
                         % (value, MAX_SIZE - 1))
    return n


def _unescape_mount(text):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text):
    """Parse /proc/self/mountinfo into a list of dicts (device 'major:minor', mountpoint, fstype, source)."""
    mounts = []
    for line in text.splitlines():
        parts = line.split(" ")
        if len(parts) < 10 or "-" not in parts:
            continue
        sep = parts.index("-", 6)
        mounts.append(
            {
                "device": parts[2],
                "root": _unescape_mount(parts[3]),
                "mountpoint": _unescape_mount(parts[4]),
                "fstype": parts[sep + 1],
                "source": _unescape_mount(parts[sep + 2]) if len(parts) > sep + 2 else "",
            }
        )
    return mounts


def _read_mountinfo():
    try:
        with open("/proc/self/mountinfo", "r") as handle:
            return parse_mountinfo(handle.read())
    except OSError:
        return []


def nearest_existing(path):
    """The path itself or its nearest existing ancestor (a download dir may not exist yet)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _is_under(path, mountpoint):
    if mountpoint == "/":
        return True
    return path == mountpoint or path.startswith(mountpoint.rstrip("/") + "/")


def fs_info(path, mounts=None, statvfs=os.statvfs, stat=os.stat):
    """Filesystem facts for ``path`` (or its nearest existing ancestor).

    The mount is found by device number (st_dev) in /proc/self/mountinfo, the
    longest mount point containing the path wins (bind mounts share a device).
    """
    existing = nearest_existing(path)
    real = os.path.realpath(existing)
    st = stat(real)
    device = "%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev))
    if mounts is None:
        mounts = _read_mountinfo()
    candidates = [m for m in mounts if m["device"] == device and _is_under(real, m["mountpoint"])]
    if not candidates:
        candidates = [m for m in mounts if _is_under(real, m["mountpoint"])]
    if candidates:
        best = max(candidates, key=lambda m: len(m["mountpoint"]))
        mountpoint, fstype = best["mountpoint"], best["fstype"]
    else:
        mountpoint, fstype = real, "unknown"
    vfs = statvfs(real)
    return FsInfo(
        path=path,
        device=device,
        mountpoint=mountpoint,
        fstype=fstype,
        free_bytes=vfs.f_bavail * vfs.f_frsize,
        total_bytes=vfs.f_blocks * vfs.f_frsize,
    )


def check_requirements(requirements, headroom_bytes, fs_lookup=fs_info):
    """Check several outstanding downloads at once.

    ``requirements``: iterable of ``(label, path, bytes_needed)`` or ``(label, path, bytes_needed, bytes_reused)``;
    ``bytes_needed`` (only the new bytes: files hard-linked from a kept snapshot take no new blocks and are
    ``bytes_reused``, named in the message) must be a known int (``None`` is refused: an unknown size is an
    error, never 0).  The free space is what the filesystem has now, so the kept releases are already in it.
    Returns the list of :class:`FsCheck` (one per filesystem, in first-seen order);
    raises :class:`DiskSpaceError` naming every filesystem that is short.
    """
    groups = {}
    order = []
    for requirement in requirements:
        label, path, needed = requirement[:3]
        reused = requirement[3] if len(requirement) > 3 else 0
        if needed is None or isinstance(needed, bool) or not isinstance(needed, int) or needed < 0:
            raise DiskSpaceError(
                "size of %s is unknown (%r); refusing to guess free space -- the Hub tree listing must give a size for every selected file"
                % (label, needed)
            )
        info = fs_lookup(path)
        if info.device not in groups:
            groups[info.device] = FsCheck(info, 0, headroom_bytes, [])
            order.append(info.device)
        group = groups[info.device]
        group.needed_bytes += needed
        group.reused_bytes += int(reused or 0)
        group.items.append((label, path, needed))
    checks = [groups[d] for d in order]
    short = [c for c in checks if not c.ok]
    if short:
        raise DiskSpaceError(
            "; ".join(c.message() for c in short)
            + ". Fix: free space there, choose a local_dir on a larger filesystem, or lower min_free_bytes.",
            checks,
        )
    return checks
