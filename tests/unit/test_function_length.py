# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""hf_download's modules keep every function (and method) at 50 lines or fewer (issue 16, item 4).

The run is named steps (hf_transfer._run_locked), and each concern has its own module; a function that
grows past the limit fails here with its file, name and length.  Counted from the first decorator to the
last line, docstring and comments included (what a reader has to hold at once).
"""

from __future__ import annotations

import ast
import glob
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE_UTILS = os.path.join(ROOT, "plugins", "module_utils")
MAX_LINES = 50

# hf_transfer.py and the modules it was split into (options, Hub client, progress file, error type)
SPLIT_MODULES = ("hf_download_spec.py", "hf_hub.py", "hf_progress.py")
# hf_transfer_engine.py is being changed for issue 19 (fan-out pipelining); its two long functions are named
# here so that no third one can join them, and each entry fails once the function is short (remove it then).
KNOWN_LONG = {("hf_transfer_engine.py", "Engine.__init__"), ("hf_transfer_engine.py", "Engine._fetch_range")}


def long_functions(source, limit=MAX_LINES):
    """[(qualified name, lines)] of the functions and methods of ``source`` longer than ``limit`` lines."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                lines = child.end_lineno - start + 1
                if lines > limit:
                    found.append((name, lines))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def checked_files():
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(MODULE_UTILS, "hf_transfer*.py")))
    return names + list(SPLIT_MODULES)


def test_the_split_modules_are_all_there():
    names = checked_files()
    for name in ("hf_transfer.py", "hf_transfer_plan.py", "hf_transfer_lock.py", "hf_transfer_local.py",
                 "hf_transfer_engine.py") + SPLIT_MODULES:
        assert name in names and os.path.isfile(os.path.join(MODULE_UTILS, name)), name


@pytest.mark.parametrize("name", checked_files())
def test_no_function_is_longer_than_50_lines(name):
    with open(os.path.join(MODULE_UTILS, name), encoding="utf-8") as handle:
        found = long_functions(handle.read())
    too_long = ["%s (%d lines)" % (func, lines) for func, lines in found if (name, func) not in KNOWN_LONG]
    assert not too_long, "%s: split into named steps of at most %d lines: %s" % (name, MAX_LINES, ", ".join(too_long))
    stale = sorted(func for file_name, func in KNOWN_LONG if file_name == name and func not in dict(found))
    assert not stale, "%s: no longer too long, remove from KNOWN_LONG: %s" % (name, ", ".join(stale))


def _body(lines, indent):
    return "".join("%sx%d = %d\n" % (" " * indent, i, i) for i in range(lines))


def test_the_count_fails_a_long_function_and_passes_a_short_one():
    long_method = "class A(object):\n    @staticmethod\n    def f():\n" + _body(MAX_LINES - 1, 8)
    assert long_functions(long_method) == [("A.f", MAX_LINES + 1)]
    assert long_functions("def g():\n" + _body(MAX_LINES - 1, 4)) == []
    nested = "def outer():\n    def inner():\n" + _body(MAX_LINES, 8) + "    return inner\n"
    assert long_functions(nested) == [("outer", MAX_LINES + 3), ("outer.inner", MAX_LINES + 1)]
