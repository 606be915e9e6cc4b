# SPDX-License-Identifier: Apache-2.0
"""Shared test setup: the repository is the collection ct200.deploy (see docs/architecture.md)."""

import json
import os
import shutil
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO_ROOT, "collections")
# Test-only collections (ct200.sandbox: the nsenter connection) live apart from the product.
SUPPORT_COLLECTIONS = os.path.join(REPO_ROOT, "tests", "support", "collections")
for _path in (SUPPORT_COLLECTIONS, COLLECTIONS):
    if _path not in sys.path:
        sys.path.insert(0, _path)
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)
# Test infrastructure (the local Hub package `localhub`, netlab) lives in tests/support, apart from
# the product. First on the path, for pytest and for every subprocess it starts (python -m localhub),
# so a checkout tests its own copy, not the one an editable install of another checkout points at.
SUPPORT = os.path.join(REPO_ROOT, "tests", "support")
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [SUPPORT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != SUPPORT])
os.environ.setdefault("ANSIBLE_CONFIG", os.path.join(REPO_ROOT, "ansible.cfg"))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def local_hub(tmp_path_factory):
    """The project's local Hub with its default repos (Kimi-shaped target, gated drafter, private repo)."""
    from localhub import LocalHub
    with LocalHub(tmp_path_factory.mktemp("local-hub")) as hub:
        yield hub


# Parallel runs (scripts/run-tests.sh: pytest-xdist -n N --dist loadgroup --no-loadscope-reorder).
# Tests that share an expensive fixture run on one worker, in collection order, so it is built once
# and no two copies of its hosts clash: each session fixture below, else the module (module-scoped
# fleets, tests that rely on the one before them). Work units are handed out heaviest first, so the
# long ones start at once and the short modules fill the gaps; a serial run keeps the same order.
SHARED_FIXTURES = ("served_host", "ssh_fleet", "fo_site", "token_fleet")
# About the seconds each took on a quiet machine (--durations); the others are short.
HEAVY_UNITS = {
    "served_host": 680, "ssh_fleet": 420,  # served_host: the deploy scenario, tag walk, API key, rollouts
    "token_fleet": 300,  # test_hub_calls.py then test_rotation.py
    "tests/sglang/test_molecule_sglang.py": 123, "tests/unit/test_docs_and_lint.py::test_ansible_test_sanity": 118,
    "tests/download/test_molecule_model_weights.py": 100, "fo_site": 90,
    "tests/unit/test_docs_and_lint.py::test_ansible_lint_production_profile": 60,
    # the real sglang-router in front of loopback stand-ins (measured on a loaded machine, load ~6)
    "tests/traffic/test_drain_playbook.py": 48, "tests/traffic/test_router_drain.py": 38,
    "tests/sglang/test_monitoring_live.py": 66, "tests/sglang/test_monitoring_role.py": 45,
    "tests/sglang/test_status_live.py": 33,
}
# Node id prefixes of tests that go first in their unit: on the served host, the tag walk and then the rollouts
# (which leave the host on the deployed release) run before test_api_key_and_restart reconfigures it, so neither
# pays for a deploy that puts the host back on spec.
RUN_FIRST = ("tests/integration/test_phase_tags.py::test_each_tag_runs_alone",
             "tests/integration/test_rollout_served_host.py::")
# Modules whose tests share nothing costly: each test is a unit of its own (sanity and lint side by side).
PER_TEST_MODULES = ("tests/unit/test_docs_and_lint.py",)
UNITS_DIR = "CT200_TEST_UNITS_DIR"  # where the workers leave the unit of each test for the scheduler


def work_unit(item) -> str:
    """The unit of ITEM: the first shared fixture it uses, else its module (or itself)."""
    for name in SHARED_FIXTURES:
        if name in item.fixturenames:
            return name
    module = item.nodeid.split("::", 1)[0]
    return item.nodeid if module in PER_TEST_MODULES else module


# The served host's chain (its bare deploy, the tag walk, the rollouts, the API-key test: about 1,400 s of a
# 1,630 s run) is the suite's longest path, and the machine's 2 vCPUs were 23 % idle in that run: the other
# workers finished early and waited on it. A worker running one of these units keeps the normal priority; the
# others run at nice 5, and what they start (sandbox hosts, playbooks) inherits it, so the longest path gets
# the CPU first and the rest fills the gaps. Only under xdist: a serial run has no one to yield to. Nice ranks
# processes only within one autogroup (a session) while the kernel's autogroup scheduling is on: every sshd session
# and every unit inside a sandbox host was its own group, weighted like all of pytest together, and the served
# chain took 773 s for a tag walk that takes 259 s quiet. scripts/run-tests.sh turns autogroup off for the run.
CRITICAL_UNITS = ("served_host",)
BACKGROUND_NICE = 5


def prioritize(item):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 0 if work_unit(item) in CRITICAL_UNITS else BACKGROUND_NICE)
    except PermissionError:  # only root may lower a nice value again: a user's run keeps the one it has
        pass


def pytest_configure(config):
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        # the controller, before it starts the workers (they inherit the environment)
        os.environ[UNITS_DIR] = tempfile.mkdtemp(prefix="ct200-test-units-")


def pytest_collection_modifyitems(config, items):
    # stable: the order within a unit is kept, but for RUN_FIRST
    items.sort(key=lambda item: (-HEAVY_UNITS.get(work_unit(item), 0), not item.nodeid.startswith(RUN_FIRST)))
    if hasattr(config, "workerinput") and os.environ.get(UNITS_DIR):
        # xdist's own xdist_group marks do not reach its scheduler under pytest 9 (it sets
        # item._nodeid, which pytest 9 no longer reads): hand the units over in a file instead.
        path = os.path.join(os.environ[UNITS_DIR], config.workerinput["workerid"] + ".json")
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump({item.nodeid: work_unit(item) for item in items}, fh)
        os.replace(path + ".tmp", path)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: without it, never called
def pytest_xdist_make_scheduler(config, log):
    """loadgroup, with the units above (every worker has collected, and written its file, by now)."""
    from xdist.scheduler import LoadGroupScheduling

    class UnitScheduling(LoadGroupScheduling):
        units: dict = {}

        def _split_scope(self, nodeid):
            if not self.units:
                directory = os.environ[UNITS_DIR]
                name = next(n for n in sorted(os.listdir(directory)) if n.endswith(".json"))
                with open(os.path.join(directory, name), encoding="utf-8") as fh:
                    self.units.update(json.load(fh))
            return self.units[nodeid]

        def _assign_work_unit(self, node):
            # xdist tops a worker up while it still has 2 tests pending (a worker holds its last test until it
            # gets more: pytest needs the next item). Behind a heavy unit, hand it a light one, so two heavy
            # units never wait on one worker while another idles; behind light tests, the heaviest waiting unit
            # (the queue is sorted by HEAVY_UNITS). The earlier rule gave a light unit to any worker with tests
            # pending, which is every top-up: on 2026-12-07 sanity, both Molecule scenarios and the monitoring
            # tests started in the last 5 minutes, and the run ended on one busy core for about 170 s.
            pending_units = [unit for unit, tests in self.assigned_work.get(node, {}).items()
                             if not all(tests.values())]
            if any(unit in HEAVY_UNITS for unit in pending_units):
                light = next((unit for unit in self.workqueue if unit not in HEAVY_UNITS), None)
                if light is not None:
                    self.workqueue.move_to_end(light, last=False)
            super()._assign_work_unit(node)

    return UnitScheduling(config, log) if config.getvalue("dist") == "loadgroup" else None


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput") and os.environ.get(UNITS_DIR, "").startswith(tempfile.gettempdir()):
        shutil.rmtree(os.environ.pop(UNITS_DIR), ignore_errors=True)


# CPU seconds per test (this process and the children it waited for: ansible-playbook, Molecule, pip),
# beside --durations' wall seconds. On 2 cores the suite's wall time follows its CPU time, and wall
# seconds of one test inflate with whatever else runs: CPU is what a cut actually saves.
def _cpu_seconds():
    import resource
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _counting_cpu(item, phase):
    start = _cpu_seconds()
    yield
    item.user_properties.append(("cpu_s_" + phase, round(_cpu_seconds() - start, 2)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    prioritize(item)  # before the fixtures: a session fixture's hosts inherit the priority of the unit they serve
    yield from _counting_cpu(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _counting_cpu(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _counting_cpu(item, "teardown")


def pytest_terminal_summary(terminalreporter):
    cpu = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "teardown":  # its properties hold all three phases
                continue
            for name, value in getattr(report, "user_properties", ()):
                if name.startswith("cpu_s_"):
                    key = (report.nodeid, name[6:])
                    cpu[key] = value
    if not cpu:
        return
    terminalreporter.write_sep("=", "most CPU (seconds, with waited-for children)")
    total = sum(cpu.values())
    for (nodeid, phase), value in sorted(cpu.items(), key=lambda kv: -kv[1])[:25]:
        terminalreporter.write_line("%8.1fs %-8s %s" % (value, phase, nodeid))
    terminalreporter.write_line("%8.1fs in all" % total)
