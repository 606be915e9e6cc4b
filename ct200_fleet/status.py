# SPDX-License-Identifier: Apache-2.0
"""`ct200 status`'s instance table: status.yml's raw report through plugins/module_utils/monitoring.py
(status_rows: the rules an instance breaks, the same thresholds as the alert rules)."""

from __future__ import annotations

from ansible_collections.ct200.deploy.plugins.module_utils import monitoring


def in_rotation_probe():
    """The router's answer to "does it send this instance traffic?" (the traffic helper's function), or None
    while the collection has none: the column then shows '-'."""
    try:
        from ansible_collections.ct200.deploy.plugins.module_utils import router  # noqa: F401 (not merged yet)
    except ImportError:
        return None
    probe = getattr(router, "in_rotation", None)
    return probe if callable(probe) else None


def instance_report(raw: dict | None, out) -> dict:
    """Print the table; {"instances": rows, "instances_ok": bool} for the summary (--json)."""
    raw = dict(raw or {})
    if isinstance(raw.get("prometheus"), dict) and "status" in raw["prometheus"]:
        raw["prometheus"] = monitoring.prometheus_accept_lengths(raw["prometheus"])
    rows = monitoring.status_rows(raw, in_rotation=in_rotation_probe())
    if rows:
        print("\n" + monitoring.status_table(rows), file=out)
        broken = ["%s/%s: %s" % (r["host"], r["instance"], "; ".join(r["verdict"])) for r in rows if r["verdict"]]
        if broken:
            print("RULES BROKEN: " + " | ".join(broken), file=out)
    return {"instances": rows, "instances_ok": not any(r["verdict"] for r in rows)}
