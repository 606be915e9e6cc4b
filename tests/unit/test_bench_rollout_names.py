# SPDX-License-Identifier: Apache-2.0
"""benchmarks/rollout/bench_rollout.py borrows the fleet scenarios' helpers (``test_fleet_rollout as t``) and the
fleet's ``FleetSession``. The benchmark needs the 8-host fleet and runs outside the suite, so a helper renamed or
removed on the test side broke it unseen once (``t.record``, gone when the tests called the session directly).
Read both sides as source, no import: every ``t.NAME`` the benchmark uses is defined at the top of the test
module, and every method it calls on ``session`` is one of FleetSession's."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "rollout" / "bench_rollout.py"


def top_level_names(path):
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def methods_of(path, class_name):
    cls = next(node for node in ast.parse(path.read_text()).body
               if isinstance(node, ast.ClassDef) and node.name == class_name)
    return {node.name for node in cls.body if isinstance(node, ast.FunctionDef)}


def attributes_used(path, owner):
    return {node.attr for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == owner}


def test_every_helper_the_rollout_benchmark_borrows_exists():
    borrowed = attributes_used(BENCH, "t")
    assert borrowed, "the benchmark no longer imports the scenarios' helpers as t: update this test"
    missing = borrowed - top_level_names(REPO / "tests" / "fleet" / "test_fleet_rollout.py")
    assert not missing, "bench_rollout.py uses %s, which tests/fleet/test_fleet_rollout.py lacks" % (
        ", ".join("t." + name for name in sorted(missing)))


def test_every_session_method_the_rollout_benchmark_calls_exists():
    called = {node.func.attr for node in ast.walk(ast.parse(BENCH.read_text()))
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Name) and node.func.value.id == "session"}
    assert called, "the benchmark calls no FleetSession method by the name session: update this test"
    missing = called - methods_of(REPO / "tests" / "fleet" / "conftest.py", "FleetSession")
    assert not missing, "bench_rollout.py calls %s, which FleetSession lacks" % (
        ", ".join("session.%s()" % name for name in sorted(missing)))
