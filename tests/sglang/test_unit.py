"""Unit rendering: systemd quoting, directives, env file, NUMA, peers, systemd-analyze verify."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import kimi_params, plan, qwen_ddtree_params, real_dialect
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_spec as specmod
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_unit as unit

D23 = real_dialect("0.5.23")
PR = real_dialect("0.5.23", ["--speculative-ddtree-budget"], ["DDTREE"])
ANALYZE = shutil.which("systemd-analyze")
ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "s": " "}


def systemd_split(line):
    """Reference reading of an ExecStart= value (systemd.service(5) "Command lines", systemd.syntax(7)).

    Written from the documentation, independently of the renderer: words split on
    whitespace, single/double quotes group, C escapes are resolved, "%%" -> "%"
    (specifiers), "$$" -> "$" (no expansion). Other "%x"/"$X" would be expanded
    by systemd, so they are reported as errors here.
    """
    words, i, n = [], 0, len(line)
    while i < n:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            break
        word, quote = [], None
        while i < n:
            c = line[i]
            if quote is None and c in " \t":
                break
            if c in "\"'" and (quote is None or quote == c):
                quote = None if quote == c else c
                i += 1
                continue
            if c == "\\":
                nxt = line[i + 1]
                assert nxt in ESCAPES, "unsupported escape \\%s" % nxt
                word.append(ESCAPES[nxt])
                i += 2
                continue
            if c in "%$":
                assert line[i + 1:i + 2] == c, "unescaped %s in %r" % (c, line)
                word.append(c)
                i += 2
                continue
            word.append(c)
            i += 1
        assert quote is None, "unbalanced quote"
        words.append("".join(word))
    return words


def directive(text, key):
    values = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key + "=")]
    assert len(values) == 1, (key, values)
    return values[0]


@pytest.mark.parametrize("arg", [
    "/models/Kimi K2.6", "/m/it's \"q\"", "100%", "$HOME", "${X}", "a\\b", "", "--x=y z", "%i%n", "'", "\"",
    "semi;colon", "-leading-dash",
])
def test_quoting_round_trip(arg):
    line = unit.command_line(["/usr/bin/python3", arg, "next"])
    assert systemd_split(line) == ["/usr/bin/python3", arg, "next"]


@pytest.mark.parametrize("arg", ["a\nb", "tab\there", "nul\x00", ";"])
def test_quoting_refuses_what_systemd_cannot_carry(arg):
    with pytest.raises(unit.UnitError):
        unit.systemd_quote(arg)


def test_env_quoting_round_trip():
    value = 'a "b" $c `d` \\e'
    text = "K=%s\n" % unit.env_quote(value)
    assert unit.parse_env_file(text) == {"K": value}
    with pytest.raises(unit.UnitError):
        unit.env_quote("x\ny")


def test_kimi_unit_directives(mdir):
    spec, resolved, argv = plan(kimi_params(mdir, environment={"OMP_NUM_THREADS": "8"}), D23)
    text = unit.render_unit(spec, argv)
    assert systemd_split(directive(text, "ExecStart")) == argv
    assert systemd_split(directive(text, "ExecStartPost")) == [
        spec.python, "/etc/sglang/wait-healthy.py", "http://127.0.0.1:30000/health_generate", "2400"]
    expected = {"Type": "exec", "KillMode": "mixed", "Restart": "on-failure", "TimeoutStartSec": "2400",
                "TimeoutStopSec": "180", "RestartSec": "30", "StartLimitBurst": "3", "StartLimitIntervalSec": "600",
                "LimitNOFILE": "1048576", "LimitMEMLOCK": "infinity", "User": "sglang", "Group": "sglang",
                "NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes",
                "EnvironmentFile": "/etc/sglang/%i.env", "WantedBy": "multi-user.target"}
    for key, value in expected.items():
        assert directive(text, key) == value, key
    for forbidden in ("PrivateDevices", "ProtectClock", "DeviceAllow", "MemoryDenyWriteExecute", "hf_"):
        assert forbidden not in text
    env = unit.parse_env_file(unit.render_env(spec, resolved.gpus, specmod.FIXED_ENV))
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["OMP_NUM_THREADS"] == "8" and env["CT200_SGLANG_PORT"] == "30000"
    assert not any("TOKEN" in key for key in env)


def test_numa_binding_with_and_without_numactl(mdir):
    spec, resolved, argv = plan(qwen_ddtree_params(mdir), PR)
    with_numactl = unit.render_unit(spec, argv, numactl="/usr/bin/numactl")
    assert systemd_split(directive(with_numactl, "ExecStart"))[:3] == [
        "/usr/bin/numactl", "--cpunodebind=0", "--membind=0"]
    assert "NUMAPolicy" not in with_numactl
    native = unit.render_unit(spec, argv, numactl=None)
    assert systemd_split(directive(native, "ExecStart")) == argv
    assert directive(native, "NUMAPolicy") == "bind" and directive(native, "NUMAMask") == "0"
    env = unit.parse_env_file(unit.render_env(spec, resolved.gpus, specmod.FIXED_ENV))
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and env["CT200_SGLANG_NUMA_NODE"] == "0"


def test_health_url():
    assert unit.health_url("0.0.0.0", 30000, "/health") == "http://127.0.0.1:30000/health"
    assert unit.health_url("::", 1, "/h") == "http://[::1]:1/h"
    assert unit.health_url("10.0.0.5", 2, "/h") == "http://10.0.0.5:2/h"


def test_peers_are_read_from_env_files(tmp_path, mdir):
    spec, resolved, argv = plan(qwen_ddtree_params(mdir, nccl_port=31000), PR)
    (tmp_path / "qwen-a.env").write_text(unit.render_env(spec, resolved.gpus, specmod.FIXED_ENV))
    (tmp_path / "unrelated.env").write_text("FOO=1\n")
    assert unit.read_peers(str(tmp_path), "other") == [
        {"name": "qwen-a", "gpus": [0, 1, 2, 3], "source": str(tmp_path / "qwen-a.env"), "port": 30000,
         "nccl_port": 31000}]
    assert unit.read_peers(str(tmp_path), "qwen-a") == []


def test_write_atomic_sets_mode_and_leaves_no_temp(tmp_path):
    path = str(tmp_path / "f.service")
    unit.write_atomic(path, "a", 0o644)
    unit.write_atomic(path, "b", 0o755)
    assert open(path).read() == "b" and (os.stat(path).st_mode & 0o777) == 0o755
    assert os.listdir(str(tmp_path)) == ["f.service"]


def _run(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout, proc.stderr


needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze missing (apt-get install systemd)")


@needs_analyze
@pytest.mark.parametrize("profile", ["kimi", "qwen", "spaces"])
def test_rendered_units_pass_systemd_analyze_verify(mdir, tmp_path, profile):
    if profile == "kimi":
        spec, resolved, argv = plan(kimi_params(mdir, python=sys.executable), D23)
    elif profile == "qwen":
        spec, resolved, argv = plan(qwen_ddtree_params(mdir, python=sys.executable, limit_nofile="20000",
                                                       read_write_paths=["/srv/scratch"]), PR)
    else:
        import models
        odd = models.kimi(tmp_path, "dir with spaces, it's \"quoted\" 100% $HOME")
        spec, resolved, argv = plan(kimi_params(mdir, target=odd, python=sys.executable), D23)
    text = unit.render_unit(spec, argv, numactl=None)
    assert unit.verify_unit(_run, spec.unit_name, text, systemd_analyze=ANALYZE) == []


@needs_analyze
@pytest.mark.parametrize("broken, expected", [
    ("Type=exec\nTyp=exec", "Unknown key 'Typ' in section [Service], ignoring"),
    ("Type=exec\nRestart=sometimes", "Failed to parse service restart specifier"),
    ("Type=exec\nExecStart=/nonexistent/python -m x", "/nonexistent/python"),
])
def test_verify_fails_on_warnings_and_errors(mdir, broken, expected):
    spec, resolved, argv = plan(kimi_params(mdir, python=sys.executable), D23)
    text = unit.render_unit(spec, argv).replace("Type=exec", broken, 1)
    if "ExecStart=/nonexistent" in broken:
        text = "\n".join(l for l in text.splitlines() if not l.startswith('ExecStart="'))
    problems = unit.verify_unit(_run, spec.unit_name, text, systemd_analyze=ANALYZE)
    assert problems and any(expected in p for p in problems), problems


def test_wait_healthy_script_polls_until_200(tmp_path):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    answers = [503, 503, 200]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(answers.pop(0) if len(answers) > 1 else answers[0])
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    script = tmp_path / unit.WAIT_SCRIPT_NAME
    script.write_text(unit.WAIT_HEALTHY_SCRIPT)
    try:
        url = "http://127.0.0.1:%d/health_generate" % server.server_address[1]
        ok = subprocess.run([sys.executable, str(script), url, "30"], capture_output=True, text=True, timeout=60, check=False)
        assert ok.returncode == 0 and "answered 200" in ok.stdout
    finally:
        server.shutdown()
        server.server_close()
    down = subprocess.run([sys.executable, str(script), url, "3"], capture_output=True, text=True, timeout=60, check=False)
    assert down.returncode == 1 and "not healthy after 3 s" in down.stderr


def test_wait_healthy_script_stops_when_the_main_process_is_gone(tmp_path):
    script = tmp_path / unit.WAIT_SCRIPT_NAME
    script.write_text(unit.WAIT_HEALTHY_SCRIPT)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=False)
    env = dict(os.environ, MAINPID=dead.stdout.strip())
    proc = subprocess.run([sys.executable, str(script), "http://127.0.0.1:9/health", "600"], capture_output=True,
                          text=True, timeout=60, env=env, check=False)
    assert proc.returncode == 1 and "exited before" in proc.stderr
