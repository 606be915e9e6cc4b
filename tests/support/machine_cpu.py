# SPDX-License-Identifier: Apache-2.0
"""The whole machine's busy CPU seconds, from /proc/stat, for benchmarks that run sandbox hosts.

``time`` and ``resource.getrusage(RUSAGE_CHILDREN)`` count only the processes their caller waits for.
A sandbox host's container is reparented when ``sandbox.sh up`` exits, so its systemd, sshd, module runs
and SGLang stand-in are never counted there: a rollout benchmark that used 13 CPU minutes showed 5.8.
"""

from __future__ import annotations

import os

# /proc/stat "cpu" fields (proc(5)): user nice system idle iowait irq softirq steal [guest guest_nice]
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # guest time is already inside user and nice
IDLE_FIELDS = (3, 4)


def parse_cpu_line(text: str) -> tuple[int, int]:
    """(busy, idle) clock ticks of the aggregate ``cpu`` line of a /proc/stat text."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            ticks = [int(value) for value in parts[1:]]
            if len(ticks) < 8:
                raise ValueError("/proc/stat's cpu line has %d fields, expected at least 8" % len(ticks))
            return sum(ticks[i] for i in BUSY_FIELDS), sum(ticks[i] for i in IDLE_FIELDS)
    raise ValueError("/proc/stat has no aggregate cpu line")


def read_ticks(path: str = "/proc/stat") -> tuple[int, int]:
    with open(path, encoding="ascii") as stat:
        return parse_cpu_line(stat.read(65536))


class MachineCpu:
    """Busy and idle CPU seconds of the machine since it was made (every process, not only children)."""

    def __init__(self, path: str = "/proc/stat"):
        self.path = path
        self.hz = os.sysconf("SC_CLK_TCK")
        self.start = read_ticks(path)

    def since(self, wall_s: float | None = None) -> dict:
        """The figures since this object was made; with ``wall_s``, the busy cores over that time too."""
        busy, idle = read_ticks(self.path)
        busy_s = (busy - self.start[0]) / self.hz
        figures = {"machine_busy_cpu_s": round(busy_s, 1),
                   "machine_idle_cpu_s": round((idle - self.start[1]) / self.hz, 1),
                   "machine_cpus": os.cpu_count()}
        if wall_s:
            figures["machine_busy_cores"] = round(busy_s / wall_s, 2)
        return figures
