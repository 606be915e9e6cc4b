"""The real sglang_service module, run as its own process (as Ansible runs it).

Files go to a temp unit_dir/env_dir. systemctl/journalctl are fakes from
tests/sglang/fakebin because PID 1 here is not systemd; start/restart on real
systemd is covered by molecule/sglang_service. systemd-analyze is the real one.
"""
import json
import os
import shutil
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import HERE, kimi_params
from modhelper import run_module_process

FAKEBIN = os.path.join(HERE, "fakebin")
ANALYZE = shutil.which("systemd-analyze")
pytestmark = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze missing (apt-get install systemd)")


@pytest.fixture
def host(tmp_path):
    state = tmp_path / "systemd.json"
    env = {"PATH": FAKEBIN + os.pathsep + os.path.dirname(ANALYZE) + os.pathsep + os.environ.get("PATH", ""),
           "FAKE_SYSTEMD_STATE": str(state)}

    class Host(object):
        unit_dir = str(tmp_path / "units")
        env_dir = str(tmp_path / "etc-sglang")
        cache_dir = str(tmp_path / "cache")

        def run(self, args, **kw):
            return run_module_process("sglang_service", args, env=env, **kw)

        def systemd(self):
            data = {"calls": [], "active": {}, "enabled": {}}
            if state.exists():
                data.update(json.loads(state.read_text()))
            return data

        def set(self, **values):
            data = self.systemd()
            data.update(values)
            state.write_text(json.dumps(data))

        def files(self):
            out = {}
            for d in (self.unit_dir, self.env_dir):
                if os.path.isdir(d):
                    for name in sorted(os.listdir(d)):
                        with open(os.path.join(d, name), encoding="utf-8") as handle:
                            out[name] = handle.read()
            return out

    return Host()


def args(host, mdir, **over):
    params = kimi_params(mdir, python=sys.executable, sglang_version="0.5.23", unit_dir=host.unit_dir,
                         env_dir=host.env_dir, cache_dir=host.cache_dir, state="present")
    params.update(over)
    return params


def test_check_mode_returns_argv_and_unit_and_writes_nothing(host, mdir):
    failed, result = host.run(args(host, mdir), check_mode=True, diff=True)
    assert not failed, result.get("msg")
    assert result["changed"] is True
    assert result["argv"][:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert "--speculative-algorithm" in result["argv"] and 'ExecStart="' in result["unit"]
    assert result["dialect"]["source"] == "static" and result["dialect"]["version"] == "0.5.23"
    assert result["expected_server_info"] == {"tp_size": 8, "speculative_algorithm": "DFLASH",
                                              "speculative_draft_model_path": mdir["kimi_draft"],
                                              "speculative_num_draft_tokens": 16}
    assert [d["after_header"] for d in result["diff"]] == [os.path.join(host.unit_dir, "sglang@kimi.service"),
                                                           os.path.join(host.env_dir, "kimi.env")]
    assert host.files() == {}
    assert [c for c in host.systemd()["calls"] if c[0] != "show"] == []  # read-only queries only


def test_apply_then_idempotent(host, mdir):
    failed, first = host.run(args(host, mdir))
    assert not failed and first["changed"], first.get("msg")
    files = host.files()
    assert set(files) == {"sglang@kimi.service", "kimi.env", "wait-healthy.py"}
    assert files["sglang@kimi.service"] == first["unit"]
    assert ["daemon-reload"] in host.systemd()["calls"]
    host.set(calls=[])
    failed, second = host.run(args(host, mdir), diff=True)
    assert not failed and second["changed"] is False and second["changed_files"] == []
    assert ["daemon-reload"] not in host.systemd()["calls"]
    assert host.files() == files


def test_refused_spec_writes_nothing_and_keeps_previous_files(host, mdir):
    assert not host.run(args(host, mdir))[0]
    before = host.files()
    failed, result = host.run(args(host, mdir, tp=4, gpus=[0, 1, 2, 3]))
    assert failed
    assert result["msg"].startswith("sglang_service refused the spec: weights 598.3 GB")
    assert result["msg"].endswith("use tp 8 (74.8 GB per GPU); nothing was written")
    assert len(result["problems"]) == 1
    assert host.files() == before


def test_token_is_refused_and_never_echoed(host, mdir):
    token = "hf_" + "Tk7" * 11
    failed, result = host.run(args(host, mdir, environment={"OMP_NUM_THREADS": "8", "NOTE": token},
                                   extra_args=["--api-key", token]))
    assert failed and "looks like a Hugging Face token" in result["msg"]
    dumped = json.dumps(result)
    assert token not in dumped and token not in result["_stderr"]
    assert result["invocation"]["module_args"]["environment"]["NOTE"] == "<redacted>"
    assert host.files() == {}


def test_missing_systemd_analyze_refuses_to_write(host, mdir, tmp_path):
    env = {"PATH": FAKEBIN, "FAKE_SYSTEMD_STATE": str(tmp_path / "s.json")}
    failed, result = run_module_process("sglang_service", args(host, mdir), env=env)
    assert failed and result["msg"].startswith("systemd-analyze not found")
    assert result["msg"].endswith("nothing was written") and host.files() == {}


def test_model_problem_is_reported_before_anything(host, mdir, tmp_path):
    failed, result = host.run(args(host, mdir, draft=str(tmp_path / "missing")))
    assert failed and result["msg"].startswith("draft: directory %s does not exist" % (tmp_path / "missing"))


def test_second_instance_with_the_same_port_is_refused(host, mdir):
    assert not host.run(args(host, mdir))[0]
    failed, result = host.run(args(host, mdir, name="kimi2", gpus=[0, 1, 2, 3, 4, 5, 6, 7]))
    assert failed
    assert "port 30000 is already used by instance 'kimi' (%s/kimi.env)" % host.env_dir in result["msg"]
    assert "GPUs 0, 1, 2, 3, 4, 5, 6, 7 are already assigned to instance 'kimi'" in result["msg"]


class _Info(object):
    def __init__(self, payload):
        self.payload = payload
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                body = b"" if self.path.startswith("/health") else json.dumps(outer.payload).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_started_proves_server_info_then_is_idempotent(host, mdir):
    payload = {"speculative_algorithm": "DFLASH", "speculative_draft_model_path": mdir["kimi_draft"],
               "speculative_num_draft_tokens": 16, "tp_size": 8, "version": "0.5.23"}
    info = _Info(payload)
    try:
        params = args(host, mdir, state="started", port=info.port, service_user="root")
        failed, first = host.run(params)
        assert not failed, first.get("msg")
        assert first["changed"] and first["action"] == "start"
        assert first["server_info"]["speculative_num_draft_tokens"] == 16
        calls = host.systemd()["calls"]
        assert ["start", "--no-block", "sglang@kimi.service"] in calls and ["enable", "sglang@kimi.service"] in calls
        host.set(calls=[])
        failed, second = host.run(params)
        assert not failed and second["changed"] is False and second["action"] is None
        assert not any(c[0] in ("start", "restart", "daemon-reload") for c in host.systemd()["calls"])
        # a changed spec restarts
        failed, third = host.run(dict(params, context_length=65536))
        assert not failed and third["action"] == "restart"
        # the server reports something else than rendered -> failure with journal lines
        payload["speculative_num_draft_tokens"] = 8
        failed, fourth = host.run(dict(params, context_length=32768))
        assert failed
        assert "/server_info speculative_num_draft_tokens is 8, expected 16" in fourth["msg"]
        assert any("fake journal line" in line for line in fourth["journal"])
    finally:
        info.close()


def test_unit_that_fails_to_start_reports_the_journal(host, mdir):
    host.set(refuse_start=True)
    failed, result = host.run(args(host, mdir, state="started", service_user="root", port=30999))
    assert failed and "did not start: it is failed/dead" in result["msg"]
    assert result["journal"][0].endswith("fake journal line 1 for sglang@kimi.service")


def test_absent_removes_everything(host, mdir):
    assert not host.run(args(host, mdir))[0]
    host.set(active={"sglang@kimi.service": True}, enabled={"sglang@kimi.service": True}, calls=[])
    failed, result = host.run({"name": "kimi", "state": "absent", "unit_dir": host.unit_dir,
                               "env_dir": host.env_dir})
    assert not failed and result["changed"] and result["argv"] == [] and result["unit"] == ""
    calls = host.systemd()["calls"]
    assert ["stop", "sglang@kimi.service"] in calls and ["disable", "sglang@kimi.service"] in calls
    assert host.files() == {"wait-healthy.py": host.files().get("wait-healthy.py")}
    failed, again = host.run({"name": "kimi", "state": "absent", "unit_dir": host.unit_dir, "env_dir": host.env_dir})
    assert not failed and again["changed"] is False


def test_gpu_memory_detected_with_nvidia_smi(host, mdir, tmp_path):
    from test_gpu import RECORDED_8X_RTX_PRO_6000
    recorded = tmp_path / "smi.txt"
    recorded.write_text(RECORDED_8X_RTX_PRO_6000)
    env = {"PATH": FAKEBIN + os.pathsep + os.path.dirname(ANALYZE) + os.pathsep + os.environ["PATH"],
           "FAKE_SYSTEMD_STATE": str(tmp_path / "s.json"), "FAKE_NVIDIA_SMI_OUTPUT": str(recorded)}
    params = args(host, mdir, gpu_memory_gib=None, tp=4, gpus=[0, 1, 2, 3])
    failed, result = run_module_process("sglang_service", params, env=env, check_mode=True)
    assert failed and "(95.59 GiB x mem_fraction_static 0.85 = 81.25 GiB); use tp 8" in result["msg"]
    failed, result = run_module_process("sglang_service", args(host, mdir, gpu_memory_gib=None), env=env,
                                        check_mode=True)
    assert not failed and round(result["gpu_memory_gib"], 2) == 95.59 and result["gpus"] == list(range(8))


def test_nvidia_smi_failure_needs_gpu_memory_gib(host, mdir):
    failed, result = host.run(args(host, mdir, gpu_memory_gib=None), check_mode=True)
    assert failed and "gpu_memory_gib is not set and nvidia-smi found no GPU" in result["msg"]
    assert result["gpu_detection"].startswith("nvidia-smi failed (rc 9): NVIDIA-SMI has failed")
