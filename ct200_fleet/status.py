# SPDX-License-Identifier: Apache-2.0
"""`ct200 status`'s instance table: status.yml's raw report through plugins/module_utils/monitoring.py
(status_rows: the rules an instance breaks, the same thresholds as the alert rules)."""

from __future__ import annotations

from ansible_collections.ct200.deploy.plugins.module_utils import monitoring
from ansible_collections.ct200.deploy.plugins.module_utils.redact import redact


def instance_report(raw: dict | None, out) -> dict:
    """Print the table; {"instances": rows, "instances_ok": bool} for the summary (--json)."""
    raw = dict(raw or {})
    if isinstance(raw.get("prometheus"), dict) and "status" in raw["prometheus"]:
        raw["prometheus"] = monitoring.prometheus_accept_lengths(raw["prometheus"])
    rows = monitoring.status_rows(raw)  # the ROUTER column: raw["traffic"], the router's own worker list
    if rows:
        # the one redaction, as every line the fleet command prints (a host's answers fill these cells)
        print("\n" + redact(monitoring.status_table(rows)), file=out)
        router = monitoring.router_summary(raw.get("traffic"))
        if router:
            print(redact(router), file=out)
        broken = ["%s/%s: %s" % (r["host"], r["instance"], "; ".join(r["verdict"])) for r in rows if r["verdict"]]
        if broken:
            print(redact("RULES BROKEN: " + " | ".join(broken)), file=out)
    return {"instances": rows, "instances_ok": not any(r["verdict"] for r in rows)}
