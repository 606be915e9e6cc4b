# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""SGLang flag dialects for sglang_service (PRIVATE to the collection).

A *dialect* is what one SGLang build's own argument parser accepts: its option
strings, the choices of a few options and the speculative algorithms it knows,
plus how (and whether) it spells DDTree. It comes from

* a **probe** of the host's SGLang venv: ``python -c PROBE_SOURCE`` builds
  SGLang's parser with ``ServerArgs.add_cli_args`` and dumps every action as
  JSON. The result is cached per venv in a file keyed by the interpreter's
  real path, the installed version and the mtime of its dist-info, so the
  ~5 s import happens once per install; or
* a **built-in table** (STATIC_DIALECTS, extracted from the real parsers of
  the released wheels, checked by tests/sglang against them) when the
  ``sglang_version`` option asks to render without probing.

Rendering picks, for each logical setting, the first spelling the dialect
knows (RENAMES), so 0.5.11 and 0.5.23 lines differ exactly where SGLang
renamed a flag.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ansible_collections.ct200.deploy.plugins.module_utils._io import atomic_write

Runner = Callable[[List[str]], Tuple[int, str, str]]

# ---------------------------------------------------------------------------
# Logical settings -> option strings, in order of preference (newest first).
RENAMES: Dict[str, Tuple[str, ...]] = {
    "model_path": ("--model-path",),
    "served_model_name": ("--served-model-name",),
    "tp": ("--tp-size",),
    "pp": ("--pp-size",),
    "trust_remote_code": ("--trust-remote-code",),
    "host": ("--host",),
    "port": ("--port",),
    "nccl_port": ("--nccl-port",),
    "mem_fraction_static": ("--mem-fraction-static",),
    "context_length": ("--context-length",),
    "attention_backend": ("--attention-backend",),
    "tool_call_parser": ("--tool-call-parser",),
    "reasoning_parser": ("--reasoning-parser",),
    "chunked_prefill_size": ("--chunked-prefill-size",),
    "max_running_requests": ("--max-running-requests",),
    "cuda_graph_max_bs": ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"),
    "kv_cache_dtype": ("--kv-cache-dtype",),
    "enable_metrics": ("--enable-metrics",),
    "speculative_algorithm": ("--speculative-algorithm",),
    "draft_model_path": ("--speculative-draft-model-path",),
    "num_draft_tokens": ("--speculative-num-draft-tokens",),
    "draft_attention_backend": ("--speculative-draft-attention-backend",),
    "draft_window_size": ("--speculative-draft-window-size", "--speculative-dflash-draft-window-size"),
    "mamba_strategy": ("--mamba-radix-cache-strategy", "--mamba-scheduler-strategy"),
    "ddtree_budget": ("--speculative-ddtree-budget",),
    "ddtree_enable": ("--speculative-dflash-enable-ddtree",),
}

# Options whose choices are checked before rendering (dest names).
CHECKED_CHOICES = (
    "tool_call_parser",
    "reasoning_parser",
    "attention_backend",
    "speculative_draft_attention_backend",
    "kv_cache_dtype",
    "mamba_radix_cache_strategy",
    "mamba_scheduler_strategy",
)

DDTREE_DIALECTS = ("pr29907", "fork")

# ---------------------------------------------------------------------------
# Probe run with the SGLang venv's interpreter. Prints one JSON object.
VERSION_SOURCE = r"""
import importlib.metadata as m, json, os, sys
try:
    d = m.distribution("sglang")
except m.PackageNotFoundError:
    print(json.dumps({"error": "sglang is not installed for " + sys.executable}))
    raise SystemExit(0)
path = str(getattr(d, "_path", "") or "")
mtime = os.stat(path).st_mtime_ns if path and os.path.exists(path) else 0
print(json.dumps({"version": d.version, "dist_info": path, "mtime_ns": mtime}))
"""

PROBE_SOURCE = r"""
import argparse, importlib.metadata as m, json, sys
out = {"version": m.version("sglang"), "actions": [], "algorithms": []}
try:
    from sglang.srt.server_args import ServerArgs
    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    for a in parser._actions:
        out["actions"].append({
            "options": list(a.option_strings),
            "dest": a.dest,
            "choices": None if a.choices is None else [str(c) for c in a.choices],
            "takes_value": a.nargs != 0,
            "action": type(a).__name__,
        })
except Exception as exc:  # report, the controller decides
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
try:
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    out["algorithms"] = [x.name for x in SpeculativeAlgorithm]
    try:
        from sglang.srt.plugins import load_plugins
        load_plugins()
    except Exception:
        pass
    try:
        from sglang.srt.speculative import spec_registry
        out["algorithms"] += [str(k).upper() for k in getattr(spec_registry, "_REGISTRY", {})]
    except Exception:
        pass
except Exception as exc:
    out["algorithms_error"] = "%s: %s" % (type(exc).__name__, exc)


def config_reader():
    # --config (how the API key reaches SGLang) is merged by this module, imported only when
    # --config is on the argv; it needs PyYAML, which sglang does not declare.
    import importlib, importlib.util
    for name in ("sglang.srt.utils.server_args_config_parser", "sglang.srt.server_args_config_parser"):
        try:
            found = importlib.util.find_spec(name)
        except ImportError:
            found = None
        if found is not None:
            importlib.import_module(name)
            return None
    return "SGLang's --config reader (server_args_config_parser) is not in this build"


try:
    out["config_reader_error"] = config_reader()
except Exception as exc:
    out["config_reader_error"] = "%s: %s" % (type(exc).__name__, exc)
print("CT200-MANIFEST " + json.dumps(out))
"""

HELP_OPTION_RE = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")


class DialectError(Exception):
    """The SGLang build cannot be identified or lacks what the spec needs."""


def _base_version(version: str) -> str:
    """'0.5.23.post1+g1234' -> '0.5.23'."""
    match = re.match(r"^(\d+)\.(\d+)\.(\d+)", version or "")
    return ".".join(match.groups()) if match else (version or "")


def version_tuple(version: str) -> Tuple[int, ...]:
    base = _base_version(version)
    try:
        return tuple(int(x) for x in base.split("."))
    except ValueError:
        return ()


class Dialect(object):
    """What one SGLang build's parser accepts."""

    def __init__(self, version: str, options: Iterable[str], choices: Dict[str, Optional[List[str]]],
                 algorithms: Iterable[str], source: str, full: bool,
                 value_options: Optional[Iterable[str]] = None, config_reader_error: Optional[str] = None):
        self.version = version
        self.options = frozenset(options)
        self.choices = dict(choices)
        self.algorithms = frozenset(a.upper() for a in algorithms)
        self.source = source  # "probe", "cache", "static", "help"
        self.full = full  # True: options is the complete parser (extra_args checkable)
        self.value_options = frozenset(value_options if value_options is not None else self.options)
        # why this build cannot read --config (None: it can, or not probed)
        self.config_reader_error = config_reader_error

    # -- DDTree / DFLASH ---------------------------------------------------
    @property
    def ddtree(self) -> Optional[str]:
        if "--speculative-ddtree-budget" in self.options:
            return "pr29907"
        if "--speculative-dflash-enable-ddtree" in self.options:
            return "fork"
        return None

    @property
    def has_dflash(self) -> bool:
        return "DFLASH" in self.algorithms

    def flag(self, logical: str) -> Optional[str]:
        """The spelling this build understands for a logical setting, or None."""
        for candidate in RENAMES[logical]:
            if candidate in self.options:
                return candidate
        return None

    def describe(self) -> Dict[str, Any]:
        return {
            "version": self.version,
            "source": self.source,
            "ddtree": self.ddtree,
            "dflash": self.has_dflash,
            "full_manifest": self.full,
            "spellings": {k: self.flag(k) for k in sorted(RENAMES)},
        }


def dialect_from_manifest(manifest: Dict[str, Any], source: str) -> Dialect:
    """Build a Dialect from the probe's JSON."""
    options: List[str] = []
    value_options: List[str] = []
    choices: Dict[str, Optional[List[str]]] = {}
    algorithms = list(manifest.get("algorithms") or [])
    for action in manifest.get("actions") or []:
        opts = action.get("options") or []
        options.extend(opts)
        if action.get("takes_value", True):
            value_options.extend(opts)
        dest = action.get("dest")
        if dest in CHECKED_CHOICES or dest == "speculative_algorithm":
            choices[dest] = action.get("choices")
        if dest == "speculative_algorithm" and action.get("choices"):
            algorithms.extend(action["choices"])
    if not options:
        raise DialectError(
            "SGLang %s: the probe found no parser options (%s); check that the venv's "
            "sglang imports (python -m sglang.launch_server --help)"
            % (manifest.get("version"), manifest.get("error", "no error reported"))
        )
    return Dialect(manifest.get("version", "unknown"), options, choices, algorithms, source, True, value_options,
                   manifest.get("config_reader_error"))


def dialect_from_help(version: str, help_text: str) -> Dialect:
    """Fallback: option strings scraped from ``launch_server --help`` (no choices)."""
    options = set(HELP_OPTION_RE.findall(help_text))
    algorithms = set()
    match = re.search(r"--speculative-algorithm \{([A-Z0-9_,]+)\}", help_text)
    if match:
        algorithms = set(match.group(1).split(","))
    elif version_tuple(version) >= (0, 5, 11):
        algorithms = {"DFLASH"}
    if "--speculative-ddtree-budget" in options:
        algorithms.add("DDTREE")
    if not options:
        raise DialectError("SGLang %s: no options found in --help output" % version)
    return Dialect(version, options, {}, algorithms, "help", True)


# ---------------------------------------------------------------------------
# Built-in tables (extracted from the real parsers; tests/sglang checks them
# against the parse venvs). Only what rendering and validation use.
_COMMON_OPTIONS = (
    "--model-path", "--served-model-name", "--tp-size", "--pp-size", "--trust-remote-code",
    "--host", "--port", "--nccl-port", "--mem-fraction-static", "--context-length",
    "--attention-backend", "--tool-call-parser", "--reasoning-parser", "--chunked-prefill-size",
    "--max-running-requests", "--kv-cache-dtype", "--enable-metrics", "--speculative-algorithm",
    "--speculative-draft-model-path", "--speculative-num-draft-tokens",
    "--speculative-draft-attention-backend", "--watchdog-timeout", "--device",
    "--speculative-dflash-block-size", "--disable-radix-cache",
)
STATIC_DIALECTS: Dict[str, Dict[str, Any]] = {
    "0.5.11": {
        "options": _COMMON_OPTIONS + (
            "--cuda-graph-max-bs", "--speculative-dflash-draft-window-size", "--mamba-scheduler-strategy",
        ),
        "algorithms": ("DFLASH", "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"),
    },
    "0.5.23": {
        "options": _COMMON_OPTIONS + (
            "--cuda-graph-max-bs-decode", "--speculative-draft-window-size", "--mamba-radix-cache-strategy",
            "--speculative-draft-kv-cache-dtype",
        ),
        "algorithms": ("DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM"),
    },
}


def static_dialect(version: str, ddtree_dialect: Optional[str] = None) -> Dialect:
    """Dialect for ``sglang_version`` without probing (built-in table)."""
    base = _base_version(version)
    table = STATIC_DIALECTS.get(base)
    if table is None:
        raise DialectError(
            "sglang_version %s has no built-in flag table (known: %s); omit sglang_version "
            "so the module probes the SGLang installed at the python option"
            % (version, ", ".join(sorted(STATIC_DIALECTS)))
        )
    options = list(table["options"])
    algorithms = list(table["algorithms"])
    if ddtree_dialect == "pr29907":
        options.append("--speculative-ddtree-budget")
        algorithms.append("DDTREE")
    elif ddtree_dialect == "fork":
        options.append("--speculative-dflash-enable-ddtree")
    value_options = [o for o in options if o not in ("--trust-remote-code", "--enable-metrics",
                                                     "--disable-radix-cache",
                                                     "--speculative-dflash-enable-ddtree")]
    return Dialect(version, options, {}, algorithms, "static", False, value_options)


# ---------------------------------------------------------------------------
# Probing with cache.
def _parse_json_line(text: str, prefix: str = "") -> Optional[Dict[str, Any]]:
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if prefix:
            if not line.startswith(prefix):
                continue
            line = line[len(prefix):].strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
    return None


def installed_version(run: Runner, python: str) -> Dict[str, Any]:
    """Cheap call: version, dist-info path and its mtime of the venv's sglang."""
    if not os.path.isabs(python) or not os.access(python, os.X_OK):
        raise DialectError(
            "SGLang is not installed: %s is not an executable absolute path; install SGLang with the "
            "role ct200.deploy.sglang_runtime, or set sglang_runtime_version in the inventory to render "
            "without probing" % python
        )
    rc, out, err = run([python, "-c", VERSION_SOURCE])
    data = _parse_json_line(out)
    if rc != 0 or data is None:
        raise DialectError("cannot read the SGLang version with %s (rc %s): %s" % (python, rc, (err or out)[-400:]))
    if data.get("error"):
        raise DialectError(
            "SGLang is not installed (%s); install it with the role ct200.deploy.sglang_runtime, or set "
            "sglang_runtime_version in the inventory to render without probing" % data["error"]
        )
    return data


def cache_key(python: str, info: Dict[str, Any]) -> str:
    material = "%s|%s|%s|%s" % (os.path.realpath(python), python, info.get("version"), info.get("mtime_ns"))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()[:20]


def probe_dialect(run: Runner, python: str, cache_dir: Optional[str], write_cache: bool = True) -> Dialect:
    """Dialect of the SGLang in ``python``'s venv (cached per venv)."""
    info = installed_version(run, python)
    path = None
    if cache_dir:
        path = os.path.join(cache_dir, "sglang-flags-%s.json" % cache_key(python, info))
        if os.path.isfile(path):
            try:
                with open(path, "r", encoding="utf-8") as handle:
                    manifest = json.load(handle)
                # a build that could not read --config is probed again: its venv may be fixed
                # without touching sglang's dist-info (the cache key)
                if manifest.get("version") == info.get("version") and "config_reader_error" in manifest \
                        and manifest["config_reader_error"] is None:
                    return dialect_from_manifest(manifest, "cache")
            except (OSError, ValueError):
                pass  # rebuilt below
    rc, out, err = run([python, "-c", PROBE_SOURCE])
    manifest = _parse_json_line(out, "CT200-MANIFEST")
    if manifest is None or not manifest.get("actions"):
        # Fallback: the build's own --help text.
        hrc, hout, herr = run([python, "-m", "sglang.launch_server", "--help"])
        if hrc == 0 and "--model-path" in hout:
            return dialect_from_help(info["version"], hout)
        raise DialectError(
            "SGLang %s at %s: its parser could not be built (rc %s): %s; fix the venv or set "
            "sglang_version to render without probing"
            % (info.get("version"), python, rc, ((manifest or {}).get("error") or err or out)[-600:])
        )
    dialect = dialect_from_manifest(manifest, "probe")
    if path and write_cache:
        atomic_write(path, json.dumps(manifest, sort_keys=True), mode=0o644, create_dirs=True)
    return dialect


# ---------------------------------------------------------------------------
# extra_args checks against the parser.
def option_names(args: Sequence[str]) -> List[str]:
    """Option strings used in an argv fragment ('--x=1' -> '--x')."""
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


def unknown_options(dialect: Dialect, args: Sequence[str]) -> List[str]:
    """Options in ``args`` the build's parser does not know (full manifests only)."""
    if not dialect.full:
        return []
    return [o for o in option_names(args) if o not in dialect.options]
