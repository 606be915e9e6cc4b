# SPDX-License-Identifier: Apache-2.0
"""tests/support/machine_cpu.py: the machine's busy CPU from /proc/stat, which counts what getrusage misses."""

import os
import subprocess
import sys
import time

import pytest

from machine_cpu import MachineCpu, parse_cpu_line

SAMPLE = """cpu  100 5 50 1000 20 3 2 1 7 0
cpu0 50 2 25 500 10 1 1 0 3 0
intr 12345
"""


def test_busy_is_user_nice_system_irq_softirq_steal_and_idle_is_idle_iowait():
    assert parse_cpu_line(SAMPLE) == (100 + 5 + 50 + 3 + 2 + 1, 1000 + 20)


@pytest.mark.parametrize("text, cause", [("cpu0 1 2 3 4 5 6 7 8\n", "no aggregate"),
                                         ("cpu  1 2 3\n", "expected at least 8")])
def test_a_stat_it_cannot_read_is_named(text, cause):
    with pytest.raises(ValueError, match=cause):
        parse_cpu_line(text)


def test_it_counts_a_process_nobody_waits_for(tmp_path):
    """A detached grandchild, as a sandbox host's container is: getrusage never sees it, /proc/stat does."""
    done = tmp_path / "done"
    spin = ("import time, pathlib\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"
            "pathlib.Path(%r).write_text('x')\n" % str(done))
    cpu = MachineCpu()
    before = os.times()
    # the middle process exits at once; the spinner is reparented and never reaped by this process
    subprocess.run([sys.executable, "-c", "import subprocess, sys; subprocess.Popen([sys.executable, '-c', %r], "
                    "start_new_session=True)" % spin], check=True, timeout=30)
    deadline = time.monotonic() + 30
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done.exists(), "the spinner did not finish its 0.6 CPU seconds in 30 s"
    after = os.times()
    seen = cpu.since(wall_s=1.0)
    waited_for = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    assert waited_for < 0.3  # the spinner's 0.6 s are not in the children's count
    assert seen["machine_busy_cpu_s"] >= 0.55, seen
    assert seen["machine_cpus"] == os.cpu_count()
    assert abs(seen["machine_busy_cores"] - seen["machine_busy_cpu_s"] / 1.0) < 0.06, seen  # busy over 1 s of wall
    assert "machine_busy_cores" not in cpu.since()  # no wall time, no rate
