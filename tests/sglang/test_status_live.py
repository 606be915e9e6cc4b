# SPDX-License-Identifier: Apache-2.0
"""`ct200 status` on two local hosts, each serving a stand-in: one healthy with a recorded release, one with a
planted bad drafter (standin.json accept_length 1.0) and no release. The table shows both, the bad drafter
breaks the acceptance rule, the command exits 1 and --json carries the rows."""
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

import models
from conftest import kimi_params, plan, real_dialect, require_parse_venv
from test_standin import CHAT, call, free_port, start

REPO = Path(__file__).resolve().parents[2]


def test_status_table_flags_the_bad_drafter(tmp_path):
    python = require_parse_venv("0.5.23")
    procs, hosts = [], {}
    try:
        for name, accept in (("st-good", 3.5), ("st-bad", 1.0)):
            mdir = {"kimi": models.kimi(tmp_path / name), "kimi_draft": models.kimi_draft(tmp_path / name)}
            behaviour = {"accept_length": accept, "decode_tok_s": 41.5}
            Path(mdir["kimi_draft"], "standin.json").write_text(json.dumps(behaviour))
            port = free_port()
            _spec, _resolved, argv = plan(kimi_params(mdir, port=port), real_dialect("0.5.23"))
            procs.append(start(python, argv, port)[0])
            assert call("http://127.0.0.1:%d/v1/chat/completions" % port, CHAT)[0] == 200
            releases = tmp_path / name / "releases"
            releases.mkdir()
            hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                           "ct200_download_user": "nobody", "sglang_release_dir": str(releases),
                           "sglang_service_instances": [{"name": "kimi", "port": port, "host": "127.0.0.1",
                                                         "served_model_name": "kimi-k2.6",
                                                         "speculative": {"algorithm": "dflash"}}]}
        good = tmp_path / "st-good" / "releases"
        (good / "state.json").write_text(json.dumps({"current": "r0123456789ab", "previous": None, "keep": 2}))
        (good / "r0123456789ab.json").write_text(json.dumps({"id": "r0123456789ab", "target": {
            "repo_id": "moonshotai/Kimi-K2.6", "commit": "a" * 40, "dir": "/models/x"}}))
        inv = tmp_path / "hosts.yml"
        inv.write_text(yaml.safe_dump({"ct200": {"hosts": hosts}}))
        summary = tmp_path / "summary.json"
        env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
        proc = subprocess.run([sys.executable, "-m", "ct200_fleet", "status", "-i", str(inv), "--json", str(summary)],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    table = out[out.index("HOST     INSTANCE"):]
    lines = {line.split()[0]: line for line in table.splitlines()[1:] if line.startswith("st-")}
    assert "r0123456789ab (aaaaaaaaaaaa)" in lines["st-good"] and "3.50" in lines["st-good"], table
    assert lines["st-good"].rstrip().endswith("ok"), table
    assert "1.00" in lines["st-bad"] and "accept length 1.00 < 2.00" in lines["st-bad"], table
    assert "RULES BROKEN: st-bad/kimi: accept length 1.00 < 2.00" in out
    data = json.loads(summary.read_text())
    rows = {r["host"]: r for r in data["instances"]}
    assert data["ok"] is False and data["instances_ok"] is False
    assert rows["st-good"]["health"] == "ok" and rows["st-good"]["decode_tok_s"] == 41.5
    assert rows["st-good"]["accept_source"] == "metrics" and rows["st-bad"]["release"] == "-"
    assert rows["st-bad"]["verdict"] == ["accept length 1.00 < 2.00"]
    assert rows["st-good"]["token_state"] == "missing" and rows["st-good"]["in_rotation"] is None
