# SPDX-License-Identifier: Apache-2.0
"""Hostile-Hub mode: a repo whose tree listing names files no genuine Hub would list.

A compromised Hub or mirror can put any string in the ``path`` of a tree entry.  With
this mode on, the local Hub appends such entries to the recursive tree listing of a
repo (and serves the bytes of a real file of the repo for them on ``/resolve``), so a
client can be proven to refuse them before it writes a byte.

A hostile entry (JSON object)::

    {"path": "../../x",            # any string, sent as is
     "like": "config.json",        # a real file of the repo: size, oid and bytes (default: the first file)
     "drop": ["size"]}             # fields removed from the entry ("size", "oid", "lfs")

Presets (``kinds``) build the usual cases: ``traversal`` (``../../ct200-hostile-x`` and
``a/../../ct200-hostile-b``), ``absolute`` (needs ``target``: an absolute path), ``nul``
(a name with a NUL byte), ``manifest`` (``.ct200/manifest.json``, hf_download's own state
file), ``missing_size`` (a real path listed without its size), ``backslash``
(``..\\..\\ct200-hostile-w``) and ``dot`` (``./config.json``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KINDS = ("traversal", "absolute", "nul", "manifest", "missing_size", "backslash", "dot")
_DROPPABLE = {"size", "oid", "lfs"}


class HostileError(ValueError):
    """Invalid hostile-mode specification (message names the field and the fix)."""


@dataclass
class HostileEntry:
    path: str
    like: str | None = None
    drop: tuple[str, ...] = field(default_factory=tuple)


def preset(kind: str, target: str | None = None) -> list[HostileEntry]:
    """The entries of one preset ``kind``; ``target`` is the absolute path for ``absolute``."""
    if kind == "traversal":
        return [HostileEntry("../../ct200-hostile-x"), HostileEntry("a/../../ct200-hostile-b")]
    if kind == "absolute":
        if not target or not target.startswith("/"):
            raise HostileError("hostile kind 'absolute' needs target: an absolute path such as /tmp/victim")
        return [HostileEntry(target)]
    if kind == "nul":
        return [HostileEntry("evil\x00name.bin")]
    if kind == "manifest":
        return [HostileEntry(".ct200/manifest.json")]
    if kind == "missing_size":
        return [HostileEntry("unsized.bin", drop=("size",))]
    if kind == "backslash":
        return [HostileEntry("..\\..\\ct200-hostile-w")]
    if kind == "dot":
        return [HostileEntry("./config.json")]
    raise HostileError(f"hostile kind must be one of {', '.join(KINDS)}, got {kind!r}")


def parse(data: Any) -> list[HostileEntry]:
    """``{"kinds": [...], "target": "/abs", "entries": [{"path", "like", "drop"}]}`` -> entries."""
    if not isinstance(data, dict):
        raise HostileError("hostile: send a JSON object with 'repo' and 'kinds' and/or 'entries'")
    out: list[HostileEntry] = []
    for kind in data.get("kinds") or []:
        out += preset(kind, data.get("target"))
    for i, raw in enumerate(data.get("entries") or []):
        if not isinstance(raw, dict) or not isinstance(raw.get("path"), str):
            raise HostileError(f"hostile entry #{i}: expected an object with a string 'path'")
        drop = tuple(raw.get("drop") or ())
        if set(drop) - _DROPPABLE:
            raise HostileError(f"hostile entry #{i}: drop may only name {', '.join(sorted(_DROPPABLE))}")
        out.append(HostileEntry(raw["path"], raw.get("like"), drop))
    return out


def tree_entries(hub, repo, entries: list[HostileEntry], masked: bool) -> list[dict]:
    """Tree-listing dicts for ``entries``, each shaped like the real file it imitates."""
    out = []
    for entry in entries:
        like = repo.files.get(entry.like) if entry.like else None
        like = like or repo.files[sorted(repo.files)[0]]
        item = hub.file_entry(repo, like, masked, False)
        item["path"] = entry.path
        for name in entry.drop:
            item.pop(name, None)
            if name == "size" and "lfs" in item:
                item["lfs"].pop("size", None)
        out.append(item)
    return out


def served_file(repo, entries: list[HostileEntry], path: str):
    """The real file whose bytes ``/resolve`` serves for a hostile ``path`` (None if not hostile)."""
    for entry in entries:
        if entry.path == path:
            like = repo.files.get(entry.like) if entry.like else None
            return like or repo.files[sorted(repo.files)[0]]
    return None
