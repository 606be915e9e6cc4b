# SPDX-License-Identifier: Apache-2.0
"""ct200.deploy.sglang_release: ids, record (current -> previous), restore, check mode, diff, idempotence."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from modhelper import run_module  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_release as rel  # noqa: E402
from ansible_collections.ct200.deploy.plugins.modules import sglang_release as mod  # noqa: E402

C1, C2, D1, D2 = "1" * 40, "2" * 40, "d" * 40, "e" * 40


def unit(target, draft, venv="/opt/sglang/0.5.23", port=30000):
    return ("[Service]\nEnvironmentFile=/etc/sglang/kimi.env\n"
            'ExecStart="%s/bin/python" "-m" "sglang.launch_server" "--model-path" "%s" "--tp-size" "8" '
            '"--speculative-algorithm" "DFLASH" "--speculative-draft-model-path" "%s" "--port" "%d"\n'
            % (venv, target, draft, port))


@pytest.fixture
def host(tmp_path):
    """Two staged snapshots of target and drafter, a venv, the installed unit and env."""
    root = tmp_path / "models"
    dirs = {}
    for name, repo, commits in (("t", "moonshotai/Kimi-K2.6", (C1, C2)), ("d", "z-lab/Kimi-K2.6-DFlash", (D1, D2))):
        for commit in commits:
            path = root / repo / "snapshots" / commit
            path.mkdir(parents=True)
            dirs[(name, commit)] = str(path)
    venv = tmp_path / "opt" / "0.5.23"
    (venv / "bin").mkdir(parents=True)
    etc = tmp_path / "etc"
    etc.mkdir()
    unit_path, env_path = str(etc / "sglang@kimi.service"), str(etc / "kimi.env")

    def files(tc, dc, env="CUDA_VISIBLE_DEVICES=0,1\n"):
        return {unit_path: unit(dirs[("t", tc)], dirs[("d", dc)], str(venv)), env_path: env}

    def install(units):
        for path, content in units.items():
            with open(path, "w") as handle:
                handle.write(content)

    return {"release_dir": str(tmp_path / "releases"), "files": files, "install": install, "unit": unit_path,
            "env": env_path, "flag": str(tmp_path / "kimi.restart-owed"), "dirs": dirs}


def args(host, state, units=None, **extra):
    base = {"state": state, "release_dir": host["release_dir"], "sglang_version": "0.5.23",
            "target_repo": "moonshotai/Kimi-K2.6", "drafter_repo": "z-lab/Kimi-K2.6-DFlash"}
    if units is not None:
        base["units"] = units
    base.update(extra)
    return base


def test_the_id_is_the_agreed_hash_of_commits_version_and_rendered_files(host):
    units = host["files"](C1, D1)
    release = rel.build(units, "0.5.23")
    chash = rel.config_hash(units)
    import hashlib
    want = "r" + hashlib.sha256(json.dumps([C1, D1, "0.5.23", chash]).encode()).hexdigest()[:12]
    assert release["id"] == want and rel.ID_RE.match(want)
    assert release["target"]["commit"] == C1 and release["drafter"]["commit"] == D1  # from snapshots/<commit>
    assert release["venv"].endswith("/opt/0.5.23")
    assert rel.build(host["files"](C1, D1, env="X=1\n"), "0.5.23")["id"] != want  # a flag or env change
    assert rel.build(units, "0.5.24")["id"] != want
    assert rel.build(dict(reversed(list(units.items()))), "0.5.23")["id"] == want  # order-independent


def test_record_moves_current_to_previous_and_is_idempotent_with_check_mode_and_diff(host):
    r1, r2 = host["files"](C1, D1), host["files"](C1, D2)
    failed, out = run_module(mod.main, args(host, "recorded", r1, measured={"decode_tok_s": 40.1}),
                             check_mode=True, diff=True)
    assert not failed and out["changed"] and not os.path.exists(host["release_dir"])
    assert '"current": "%s"' % out["release"]["id"] in out["diff"]["after"]
    failed, out = run_module(mod.main, args(host, "recorded", r1, measured={"decode_tok_s": 40.1}))
    first = out["release"]["id"]
    assert not failed and out["changed"] and out["state"] == {"current": first, "previous": None, "keep": 2}
    assert oct(os.stat(host["release_dir"]).st_mode & 0o777) == "0o755"
    assert oct(os.stat(os.path.join(host["release_dir"], first + ".json")).st_mode & 0o777) == "0o644"
    again = run_module(mod.main, args(host, "recorded", r1))[1]  # no measurement: the recorded one stays
    assert not again["changed"] and again["current"]["measured"]["decode_tok_s"] == 40.1
    measured = {"decode_tok_s": 39.0, "accept_length": 3.5}
    failed, out = run_module(mod.main, args(host, "recorded", r2, measured=measured))
    second = out["release"]["id"]
    assert out["changed"] and out["state"] == {"current": second, "previous": first, "keep": 2}
    assert out["previous"]["measured"]["decode_tok_s"] == 40.1 and out["current"]["drafter"]["commit"] == D2
    record = json.load(open(os.path.join(host["release_dir"], second + ".json")))
    assert set(record) == {"id", "target", "drafter", "sglang_version", "venv", "config_hash", "units", "measured",
                           "recorded_at"}
    assert record["units"] == r2
    read = run_module(mod.main, args(host, "read", r1))[1]
    assert not read["changed"] and read["is_current"] is False and read["release"]["id"] == first


def test_adoption_records_the_installed_files_only_when_nothing_is_recorded(host):
    r1 = host["files"](C1, D1)
    host["install"](r1)
    paths = {"unit_paths": [host["unit"], host["env"]]}
    out = run_module(mod.main, args(host, "recorded", only_if_unrecorded=True, **paths))[1]
    assert out["changed"] and out["adopted"] and out["release"]["id"] == rel.build(r1, "0.5.23")["id"]
    host["install"](host["files"](C2, D2))
    out = run_module(mod.main, args(host, "recorded", only_if_unrecorded=True, **paths))[1]
    assert not out["changed"] and not out["adopted"] and out["is_current"] is False


def test_restore_writes_the_files_back_owes_the_restart_and_rollback_swaps(host):
    r1, r2 = host["files"](C1, D1), host["files"](C1, D2)
    run_module(mod.main, args(host, "recorded", r1))
    host["install"](r2)  # the switch wrote the new files, then a gate failed: back to current
    restore = {"restart_flag": host["flag"], "unit_name": "sglang@kimi.service"}
    failed, out = run_module(mod.main, args(host, "restored", **restore), check_mode=True)
    assert not failed and out["changed"] and out["files"] == [host["unit"]] and not os.path.exists(host["flag"])
    assert open(host["unit"]).read() == r2[host["unit"]]
    failed, out = run_module(mod.main, args(host, "restored", **restore))
    assert not failed and out["changed"] and out["restart_owed"] and open(host["unit"]).read() == r1[host["unit"]]
    assert open(host["flag"]).read() == "sglang@kimi.service\n"
    assert out["state"]["current"] == rel.build(r1, "0.5.23")["id"]  # current never moved
    os.unlink(host["flag"])
    assert not run_module(mod.main, args(host, "restored", **restore))[1]["changed"]  # idempotent
    assert not os.path.exists(host["flag"])

    # a rollback: r2 passed and was recorded, then `ct200 rollback`
    host["install"](r2)
    ids = [rel.build(r, "0.5.23")["id"] for r in (r1, r2)]
    run_module(mod.main, args(host, "recorded", r2))
    failed, out = run_module(mod.main, args(host, "restored", to="previous", **restore), diff=True)
    assert not failed and out["state"] == {"current": ids[0], "previous": ids[1], "keep": 2}
    assert open(host["unit"]).read() == r1[host["unit"]] and out["restart_owed"]
    assert '"current": "%s"' % ids[1] in out["diff"]["before"]


def test_refusals_name_the_cause_and_the_fix(host, tmp_path):
    failed, out = run_module(mod.main, args(host, "restored"))
    assert failed and "no current release recorded" in out["msg"] and "ct200 rollout" in out["msg"]
    r1 = host["files"](C1, D1)
    run_module(mod.main, args(host, "recorded", r1))
    os.rename(host["dirs"][("d", D1)], host["dirs"][("d", D1)] + ".gone")
    failed, out = run_module(mod.main, args(host, "restored"))
    assert failed and "no longer on this host" in out["msg"] and "without a download" in out["msg"]
    with open(os.path.join(host["release_dir"], "state.json"), "w") as handle:
        handle.write('{"current": "../../etc/passwd"}')
    failed, out = run_module(mod.main, args(host, "read"))
    assert failed and "not a release id" in out["msg"] and "move it away" in out["msg"]
    failed, out = run_module(mod.main, args(host, "recorded", {"/etc/x.env": "A=1\n"}))
    assert failed and "ExecStart=" in out["msg"]
    plain = {host["unit"]: unit(str(tmp_path), host["dirs"][("d", D1)] + ".gone"), host["env"]: ""}
    failed, out = run_module(mod.main, args(host, "recorded", plain))
    assert failed and "pass target_commit" in out["msg"]
