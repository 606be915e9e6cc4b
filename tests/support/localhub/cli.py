# SPDX-License-Identifier: Apache-2.0
"""Command line: ``python -m localhub serve|token|personas``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path

from .personas import PERSONAS, token_for
from .repos import DEFAULT_DRAFTER_SIZE, DEFAULT_TARGET_SHARDS, parse_repo_arg


def _write_state(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _serve(args: argparse.Namespace) -> int:
    from .content import parse_shards, parse_size
    from .hub import LocalHub

    try:
        parse_shards(args.target_shards)
        parse_size(args.drafter_size)
        extra = [parse_repo_arg(r) for r in args.repo]
    except ValueError as exc:
        print(f"localhub: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    hub = LocalHub(
        args.data_dir,
        extra,
        host=args.host,
        port=args.port,
        target_shards=args.target_shards,
        drafter_size=args.drafter_size,
        include_defaults=not args.no_defaults,
        cdn_host=args.cdn_host,
        log_file=args.log_file,
    )
    if stop.is_set():
        return 0
    try:
        hub.start()
    except OSError as exc:
        print(f"localhub: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    state = Path(args.state_file) if args.state_file else None
    try:
        if state is not None:
            _write_state(state, {"url": hub.url, "cdn_url": hub.cdn_url, "pid": os.getpid(), "port": hub.port,
                                 "host": hub.host, "data_dir": str(Path(args.data_dir).resolve())})
        else:
            print(json.dumps({"url": hub.url, "pid": os.getpid()}), flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        hub.stop()
        if state is not None:
            try:
                state.unlink()
            except FileNotFoundError:
                pass
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m localhub", description="Local Hugging Face Hub stand-in")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the Hub until SIGTERM")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    serve.add_argument("--data-dir", required=True, help="content cache (generated once, reused)")
    serve.add_argument("--state-file", help='written atomically with {"url","pid","data_dir",...} once listening')
    serve.add_argument("--target-shards", default=DEFAULT_TARGET_SHARDS,
                       help=f"served shards of moonshotai/Kimi-K2.6, COUNTxSIZE (default {DEFAULT_TARGET_SHARDS})")
    serve.add_argument("--drafter-size", default=DEFAULT_DRAFTER_SIZE, help="size of the drafter's shard")
    serve.add_argument("--repo", action="append", default=[], metavar="ORG/NAME:NxSIZE[:gated=manual][:private]",
                       help="extra synthetic repo (repeatable), e.g. bench/synthetic:4x1GiB")
    serve.add_argument("--cdn-host", help="host name used in LFS redirects (default: localhost)")
    serve.add_argument("--log-file", help="append an access log (no headers, no tokens) to this file")
    serve.add_argument("--no-defaults", action="store_true", help="do not create the three built-in repos")
    token = sub.add_parser("token", help="print the token of a persona")
    token.add_argument("persona")
    personas = sub.add_parser("personas", help="list the personas")
    personas.add_argument("--json", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "token":
        if args.persona not in PERSONAS:
            print(f"localhub: unknown persona {args.persona!r}; known: {', '.join(PERSONAS)}", file=sys.stderr)
            return 2
        print(token_for(args.persona))
        return 0
    if args.json:
        print(json.dumps({n: {"username": p.username, "role": p.role, "can_read_gated": p.can_read_gated,
                              "gated_status": p.gated_status, "valid": p.valid, "description": p.description}
                          for n, p in PERSONAS.items()}, indent=2))
    else:
        for n, p in PERSONAS.items():
            print(f"{n:24} {p.role:12} {p.description}")
    return 0
