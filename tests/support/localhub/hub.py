# SPDX-License-Identifier: Apache-2.0
"""The :class:`LocalHub` object: repos, access rules, faults, stats, lifecycle."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

from .content import BlobStore
from .faults import FaultSet, Stats, parse_rules
from .personas import PERSONAS, Persona, token_for
from .repos import (
    COMMIT_DATE,
    COMMIT_TIMESTAMP,
    FileSource,
    DEFAULT_DRAFTER_SIZE,
    DEFAULT_TARGET_SHARDS,
    Repo,
    RepoFile,
    RepoSpec,
    default_specs,
    materialize,
    parse_repo_arg,
)

MASKED_OID = "*" * 64
INVALID_CREDENTIALS = "Invalid credentials in Authorization header"


class HubError(Exception):
    """An error answer: status, message, optional X-Error-Code and extra headers."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or {}


class _Invalid:
    """Marker for an Authorization header carrying an unknown token."""


INVALID = _Invalid()


def _commit_date(repo: Repo) -> str:
    """The Hub's ISO date (milliseconds, Z) of the commit ``repo`` is at."""
    if repo.timestamp == COMMIT_TIMESTAMP:
        return COMMIT_DATE
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(repo.timestamp))


def _hexid(text: str) -> str:
    return hashlib.sha256(("localhub-id:" + text).encode()).hexdigest()[:24]


class LocalHub:
    """A local, real-HTTP stand-in for the Hugging Face Hub.

    >>> hub = LocalHub("/tmp/hubdata").start()     # doctest: +SKIP
    >>> hub.url                                     # HF_ENDPOINT for clients
    >>> hub.stop()

    ``repos`` are extra :class:`~localhub.repos.RepoSpec` objects or CLI-style
    strings ``"ORG/NAME:4x1GiB[:gated=manual][:private]"``.  The three built-in
    repos are added unless ``include_defaults=False``.  ``cdn_host`` is the host
    name put in LFS redirects (default ``localhost``, a different origin from
    ``http://127.0.0.1:PORT`` so clients drop Authorization like with the real CDN).
    """

    def __init__(
        self,
        data_dir: str | Path,
        repos: list[RepoSpec | str] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        target_shards: str = DEFAULT_TARGET_SHARDS,
        drafter_size: str | int = DEFAULT_DRAFTER_SIZE,
        include_defaults: bool = True,
        cdn_host: str | None = None,
        log_file: str | Path | None = None,
    ):
        self.data_dir = Path(data_dir)
        self.store = BlobStore(self.data_dir)
        self.host = host
        self._requested_port = port
        self.port: int | None = None
        self.cdn_host = cdn_host or ("127.0.0.1" if host == "localhost" else "localhost")
        self.log_file = Path(log_file) if log_file else None
        # Behaviours of other Hub implementations and mirrors, for robustness tests
        # (plain attributes: flip them on a running hub, restore them after):
        # serve LFS bytes straight from /resolve instead of a 302 to the CDN origin,
        # and answer every Range request with the whole file (200).
        self.lfs_redirect = True
        self.honour_range = True
        # Real-Hub behaviours (localhub.realhub), off by default: signed CDN URLs that expire
        # after cdn_expiry seconds; /resolve replaying the same signed URL for redirect_cache
        # seconds (an edge-cached 302); Xet listings (xetHash) and the cas-bridge origin; Xet
        # entries without lfs.
        self.cdn_expiry: float | None = None
        self.redirect_cache = 0.0
        self.xet = False
        self.xet_without_lfs = False
        self.url_secret = os.urandom(16)
        self._redirects: dict[str, tuple[float, str]] = {}
        self._xet_hashes: dict[str, str] = {}
        self._bridge = None
        self.bridge_port: int | None = None
        self.faults = FaultSet()
        self.stats_obj = Stats()
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._repos: dict[tuple[str, str], Repo] = {}
        self._by_sha256: dict[str, RepoFile] = {}
        self._server = None
        self._thread: threading.Thread | None = None
        # hostile-Hub mode (localhub.hostile): (repo_type, repo_id) -> extra tree entries
        self.hostile: dict[tuple[str, str], list] = {}
        specs: list[RepoSpec | str] = list(default_specs(target_shards, drafter_size)) if include_defaults else []
        specs += list(repos or [])
        for spec in specs:
            self.add_repo(spec)

    # ------------------------------------------------------------------ repos
    def add_repo(
        self,
        spec: RepoSpec | str,
        files: dict | None = None,
        *,
        gated: Any = False,
        private: bool = False,
        repo_type: str = "model",
        **kwargs: Any,
    ) -> Repo:
        """Add (or replace) a repo.  ``spec`` is a RepoSpec, a CLI string
        ``ORG/NAME:NxSIZE``, or a repo id together with ``files``."""
        if isinstance(spec, str) and files is None and ":" in spec:
            spec = parse_repo_arg(spec)
        elif isinstance(spec, str):
            if files is None:
                raise ValueError(f"add_repo({spec!r}): pass files={{path: bytes|size}} or a spec 'ORG/NAME:NxSIZE'")
            spec = RepoSpec(repo_id=spec, files=files, gated=gated, private=private, repo_type=repo_type, **kwargs)
        repo = materialize(self.store, spec)
        self._install(repo)
        return repo

    def commit(self, repo_id: str, files: dict[str, FileSource | None], message: str, repo_type: str = "model") -> str:
        """Add a commit to ``repo_id`` that moves ``main``: ``files`` maps a path to its new content
        (as in RepoSpec.files) or to None to delete it; every other file keeps its content and oid.
        Older commits stay resolvable by their sha, and tags stay on the commits they named.
        Returns the new commit's sha."""
        parent = self.repo(repo_id, repo_type)
        sources = {path: src for path, src in parent.spec.files.items()}
        for path, source in files.items():
            if source is None:
                if path not in sources:
                    raise KeyError(f"commit to {repo_id}: cannot delete {path!r}, it is not in the repo")
                del sources[path]
            else:
                sources[path] = source
        spec = dataclasses.replace(parent.spec, files=sources, tags=())
        repo = materialize(self.store, spec, parent=parent, message=message)
        history = dict(parent.older)
        history[parent.commit] = dataclasses.replace(parent, older={})
        repo.older = history
        self._install(repo)
        return repo.commit

    def _install(self, repo: Repo) -> None:
        with self._lock:
            repos = dict(self._repos)
            repos[(repo.repo_type, repo.repo_id)] = repo
            # every commit's blobs stay servable (the CDN serves by sha256)
            by_sha = {f.sha256: f for r in repos.values() for c in r.commits() for f in c.files.values()}
            self._repos, self._by_sha256 = repos, by_sha

    def set_hostile(self, repo_id: str, kinds: list[str] | None = None, *, target: str | None = None,
                    entries: list[dict] | None = None, repo_type: str = "model") -> list:
        """Make the tree listing of ``repo_id`` name hostile paths (see localhub.hostile); [] clears."""
        from .hostile import parse

        self.repo(repo_id, repo_type)  # KeyError for an unknown repo
        parsed = parse({"kinds": kinds or [], "target": target, "entries": entries or []})
        with self._lock:
            if parsed:
                self.hostile[(repo_type, repo_id)] = parsed
            else:
                self.hostile.pop((repo_type, repo_id), None)
        return parsed

    def clear_hostile(self) -> None:
        with self._lock:
            self.hostile = {}

    def repo(self, repo_id: str, repo_type: str = "model") -> Repo:
        try:
            return self._repos[(repo_type, repo_id)]
        except KeyError:
            raise KeyError(f"no {repo_type} repo {repo_id!r} on this hub") from None

    def repos(self) -> list[Repo]:
        return list(self._repos.values())

    def find_repo(self, repo_type: str, repo_id: str) -> Repo | None:
        return self._repos.get((repo_type, repo_id))

    def blob(self, sha256: str) -> RepoFile | None:
        return self._by_sha256.get(sha256)

    def xet_hash(self, f: RepoFile) -> str:
        """The real Xet hash of ``f`` (computed once, with hf_xet)."""
        from .realhub import xet_hash_of

        with self._lock:
            known = self._xet_hashes.get(f.sha256)
        if known is None:
            known = xet_hash_of(f.disk_path)
            with self._lock:
                self._xet_hashes[f.sha256] = known
        return known

    def blob_by_xet_hash(self, xet_hash: str) -> RepoFile | None:
        with self._lock:
            sha = next((s for s, x in self._xet_hashes.items() if x == xet_hash), None)
        return self._by_sha256.get(sha) if sha else None

    def lfs_location(self, repo: Repo, f: RepoFile) -> str:
        """Where /resolve sends an LFS file: the CDN (signed when cdn_expiry is set) or, with xet,
        the cas-bridge origin; the same URL again while redirect_cache lasts."""
        from . import realhub

        now = time.time()
        key = f"{'xet' if self.xet else 'cdn'}:{f.sha256}"
        with self._lock:
            cached = self._redirects.get(key)
        if cached is not None and now - cached[0] < self.redirect_cache:
            return cached[1]
        if self.xet:
            path = realhub.bridge_path(_hexid(f"{repo.repo_type}:{repo.repo_id}"), self.xet_hash(f))
            expiry = int(self.cdn_expiry) if self.cdn_expiry is not None else realhub.DEFAULT_BRIDGE_EXPIRY
            location = f"{self.bridge_url}{path}?{realhub.bridge_query(self.url_secret, path, expiry, now)}"
        else:
            path = f"/cdn/{f.sha256}"
            location = f"{self.cdn_url}{path}"
            if self.cdn_expiry is not None:
                location += "?" + realhub.cdn_query(self.url_secret, path, self.cdn_expiry, now)
        with self._lock:
            self._redirects[key] = (now, location)
        return location

    def set_access(self, repo_id: str, persona: str, status: str | None, repo_type: str = "model") -> None:
        """Set ``persona``'s access-request status on a gated repo
        (``accepted``, ``pending``, ``rejected`` or ``None`` = never requested)."""
        repo = self.repo(repo_id, repo_type)
        if persona not in PERSONAS:
            raise ValueError(f"unknown persona {persona!r}; known: {', '.join(sorted(PERSONAS))}")
        if status not in ("accepted", "pending", "rejected", None):
            raise ValueError(f"invalid status {status!r}: use accepted, pending, rejected or None")
        access = dict(repo.spec.access)
        access[persona] = status
        repo.spec.access = access

    # ------------------------------------------------------------- faults/stats
    def set_faults(self, rules: Any, append: bool = False) -> list[dict]:
        """Install fault rules (replacing existing ones unless ``append``).
        Invalid input raises ValueError and leaves the current rules intact."""
        return self.faults.set(parse_rules(rules), append=append)

    def clear_faults(self) -> None:
        self.faults.clear()

    def list_faults(self) -> list[dict]:
        return self.faults.list()

    def stats(self, _ticket: int | None = None) -> dict:
        return self.stats_obj.snapshot(exclude=_ticket)

    def reset_stats(self, _ticket: int | None = None) -> None:
        self.stats_obj.reset(exclude=_ticket)

    def requests_log(self, _ticket: int | None = None) -> list[dict]:
        return self.stats_obj.requests_log(exclude=_ticket)

    @staticmethod
    def token(persona: str) -> str:
        return token_for(persona)

    # ------------------------------------------------------------- lifecycle
    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("LocalHub is not started; call start() first")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def cdn_url(self) -> str:
        if self.port is None:
            raise RuntimeError("LocalHub is not started; call start() first")
        return f"http://{self.cdn_host}:{self.port}"

    @property
    def bridge_url(self) -> str:
        """Origin imitating cas-bridge.xethub.hf.co: the CDN host on a second port (another origin)."""
        if self.bridge_port is None:
            raise RuntimeError("LocalHub is not started; call start() first")
        return f"http://{self.cdn_host}:{self.bridge_port}"

    def start(self) -> "LocalHub":
        from .server import make_server

        if self._server is not None:
            return self
        self.stop_event.clear()
        self._server = make_server(self, self.host, self._requested_port)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"localhub:{self.port}", daemon=True)
        self._thread.start()
        self._bridge = make_server(self, self.host, 0)
        self.bridge_port = self._bridge.server_address[1]
        threading.Thread(target=self._bridge.serve_forever, kwargs={"poll_interval": 0.2},
                         name=f"localhub-bridge:{self.bridge_port}", daemon=True).start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self.stop_event.set()
        bridge, self._bridge = self._bridge, None
        if bridge is not None:
            bridge.shutdown()
            bridge.close_all_connections()
            bridge.server_close()
        server.shutdown()
        server.close_all_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._thread = None

    def __enter__(self) -> "LocalHub":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------- decisions
    def authenticate(self, authorization: str | None) -> Persona | _Invalid | None:
        if authorization is None:
            return None
        scheme, _unused, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return INVALID
        token = token.strip()
        for persona in PERSONAS.values():
            if persona.valid and token == token_for(persona.name):
                return persona
        return INVALID

    @staticmethod
    def is_member(persona: Persona | None, repo: Repo) -> bool:
        if persona is None:
            return False
        namespace = repo.repo_id.split("/")[0] if "/" in repo.repo_id else None
        return namespace is not None and (namespace == persona.username or namespace in persona.orgs)

    def can_see(self, persona: Persona | None, repo: Repo) -> bool:
        if not repo.private:
            return True
        if persona is None:
            return False
        return self.is_member(persona, repo) or persona.name in repo.spec.private_readers

    def lookup(self, repo_type: str, repo_id: str, persona: Persona | None) -> Repo:
        """The repo if it exists and ``persona`` may see it, else RepoNotFound
        (401 anonymous, 404 authenticated -- like the real Hub)."""
        repo = self.find_repo(repo_type, repo_id)
        if repo is None or not self.can_see(persona, repo):
            if persona is None:
                raise HubError(401, "Invalid username or password.", "RepoNotFound")
            raise HubError(404, "Repository not found", "RepoNotFound")
        return repo

    def access_status(self, persona: Persona, repo: Repo) -> str | None:
        if persona.name in repo.spec.access:
            return repo.spec.access[persona.name]
        return persona.gated_status

    def gate_error(self, persona: Persona | None, repo: Repo) -> HubError | None:
        """None if ``persona`` may read the content of ``repo``, else the Hub's error."""
        if not repo.gated:
            return None
        what = f"{repo.repo_type} {repo.repo_id}"
        if persona is None:
            return HubError(
                401,
                f"Access to {what} is restricted. You must have access to it and be authenticated to access it. Please log in.",
                "GatedRepo",
            )
        if self.is_member(persona, repo):
            return None
        status = self.access_status(persona, repo)
        if status == "accepted":
            if persona.fine_grained and not persona.can_read_gated:
                return HubError(
                    403,
                    f"Access to {what} is restricted. Please enable access to public gated repositories in your "
                    "fine-grained token settings to view this repository "
                    "(\"Read access to contents of all public gated repos you can access\").",
                    "GatedRepo",
                )
            return None
        if status == "pending":
            return HubError(403, f"Your request to access {what} is awaiting a review from the repo authors.", "GatedRepo")
        return HubError(
            403,
            f"Access to {what} is restricted and you are not in the authorized list. "
            f"Visit https://huggingface.co/{'datasets/' if repo.repo_type == 'dataset' else ''}{repo.repo_id} "
            "to ask for access.",
            "GatedRepo",
        )

    # ------------------------------------------------------------- JSON views
    def whoami_json(self, persona: Persona) -> dict:
        orgs = [
            {"type": "org", "id": _hexid(org), "name": org, "fullname": org.upper(), "email": None, "canPay": False,
             "periodEnd": None, "avatarUrl": f"/avatars/{_hexid(org)}.svg",
             "roleInOrg": "write" if persona.role == "write" else "read", "isEnterprise": False}
            for org in persona.orgs
        ]
        token: dict[str, Any] = {"displayName": f"{persona.name}-token", "role": persona.role, "createdAt": COMMIT_DATE}
        if persona.fine_grained:
            scoped = [{"entity": {"_id": _hexid(persona.username), "type": "user", "name": persona.username},
                       "permissions": ["repo.content.read", "repo.write"]}]
            scoped += [{"entity": {"_id": _hexid(org), "type": "org", "name": org},
                        "permissions": ["repo.content.read"]} for org in persona.orgs]
            token["fineGrained"] = {"canReadGatedRepos": persona.can_read_gated,
                                    "global": ["discussion.write", "post.write"], "scoped": scoped}
        return {
            "type": "user",
            "id": _hexid(persona.username),
            "name": persona.username,
            "fullname": persona.username.replace("-", " ").title(),
            "email": f"{persona.username}@users.localhub.invalid",
            "emailVerified": True,
            "canPay": False,
            "isPro": False,
            "periodEnd": None,
            "avatarUrl": f"/avatars/{_hexid(persona.username)}.svg",
            "orgs": orgs,
            "auth": {"type": "access_token", "accessToken": token},
        }

    def repo_info_json(self, repo: Repo, persona: Persona | None, blobs: bool, expand: list[str] | None) -> dict:
        masked = self.gate_error(persona, repo) is not None
        siblings = []
        for f in repo.files.values():
            s: dict[str, Any] = {"rfilename": f.path}
            if blobs:
                s["blobId"] = f.oid
                s["size"] = f.size
                if f.lfs:
                    s["lfs"] = {"sha256": MASKED_OID if masked else f.sha256, "size": f.size, "pointerSize": f.pointer_size}
            siblings.append(s)
        info: dict[str, Any] = {
            "_id": _hexid(f"{repo.repo_type}:{repo.repo_id}"),
            "id": repo.repo_id,
            "author": repo.repo_id.split("/")[0] if "/" in repo.repo_id else None,
            "sha": repo.commit,
            "lastModified": _commit_date(repo),
            "createdAt": COMMIT_DATE,
            "private": repo.private,
            "gated": repo.gated,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": siblings,
            "usedStorage": sum(f.size for f in repo.files.values()),
        }
        if repo.spec.card_data is not None:
            info["cardData"] = repo.spec.card_data
        if repo.repo_type == "model":
            info["modelId"] = repo.repo_id
            info["spaces"] = []
        info.update(repo.spec.info)
        if expand:
            return {"_id": info["_id"], "id": info["id"], **{k: info[k] for k in expand if k in info}}
        return info

    def file_entry(self, repo: Repo, f: RepoFile, masked: bool, expand: bool) -> dict:
        entry: dict[str, Any] = {"type": "file", "oid": f.oid, "size": f.size, "path": f.path}
        if f.lfs and not (self.xet and self.xet_without_lfs):
            entry["lfs"] = {"oid": MASKED_OID if masked else f.sha256, "size": f.size, "pointerSize": f.pointer_size}
        if f.lfs and self.xet:
            entry["xetHash"] = MASKED_OID if masked else self.xet_hash(f)
        if expand:
            entry["lastCommit"] = {"id": repo.commit, "title": repo.message or f"Upload {repo.repo_id}", "date": _commit_date(repo)}
            entry["securityFileStatus"] = {"status": "safe", "avScan": {"virusFound": False, "virusNames": None},
                                           "pickleImportScan": None}
        return entry

    def dir_entry(self, repo: Repo, path: str, expand: bool) -> dict:
        entry: dict[str, Any] = {"type": "directory", "oid": repo.dirs[path], "path": path}
        if expand:
            entry["lastCommit"] = {"id": repo.commit, "title": repo.message or f"Upload {repo.repo_id}", "date": _commit_date(repo)}
        return entry

    def entry(self, repo: Repo, kind: str, path: str, masked: bool, expand: bool) -> dict:
        if kind == "directory":
            return self.dir_entry(repo, path, expand)
        return self.file_entry(repo, repo.files[path], masked, expand)
