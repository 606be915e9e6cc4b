# SPDX-License-Identifier: Apache-2.0
"""A site of hosts in plain network namespaces, for the fan-out tests and benchmark.

Each host ``fo-TAG-hN`` and the Hub ``fo-TAG-hub`` is its own network namespace with one
veth link to a bridge in ``fo-TAG-sw``; nothing is created in the machine's own namespace.
``tc tbf`` (short queue) shapes both directions of every link: the Hub's at ``hub_rate``, the hosts' at
``host_rate``.  In the namespaces run the real pieces: ``localhub`` (the Hub, its own
counters at ``/_admin/stats``), Debian's nginx (unpacked from the nginx-light packages of the
shared local apt repository, ``scripts/local-apt-repo.sh``) with the ``weight_peer`` role's own template, and the collection's
modules as processes (``hf_download`` on the seed, ``hf_fanout_fetch`` on the others).

This is the data path of the fleet without systemd/SSH hosts: the SSH netns fleet
(tests/fleet, helper ``sshfleet``) replaces the namespaces by hosts when it lands.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import glob

import jinja2

import debroot

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NGINX_TEMPLATE = os.path.join(REPO, "roles", "weight_peer", "templates", "nginx.conf.j2")
# The flat apt repository the sandbox hosts install Debian's packages from (scripts/local-apt-repo.sh),
# and Debian's nginx unpacked from it, to run in plain network namespaces without installing it here.
APT_REPO = os.path.join(REPO, ".cache", "apt-repo")
NGINX_ROOT = os.path.join(REPO, ".cache", "fanout", "nginx-root")
# What the weight_peer role installs (nginx-light and its closure) and what ansible.builtin.apt needs on a host.
APT_PACKAGES = ("nginx-light", "python3-apt")
NGINX_DEBS = ("nginx", "nginx-common", "libnginx-mod-http-echo")
SUBNET = "10.231.0"
QUEUE_MS = 10  # every link's shaper queue (tbf latency); the Hub's may be set deeper
HUB_IP = SUBNET + ".254"
HUB_PORT = 8080
PEER_PORT = 8790
MODEL = "model"


def sh(*argv, check=True, timeout=60):
    return subprocess.run(argv, check=check, timeout=timeout, capture_output=True, text=True)


def apt_repo():
    """The shared local apt repository with nginx-light in it (apt-get download on first use; additive)."""
    if not glob.glob(os.path.join(APT_REPO, "nginx-light_*.deb")):
        sh(os.path.join(REPO, "scripts", "local-apt-repo.sh"), *APT_PACKAGES, timeout=600)
    return APT_REPO


def nginx_binary():
    """Debian's nginx, unpacked from the local apt repository's packages (on first use)."""
    repo = apt_repo()
    debs = []
    for package in NGINX_DEBS:
        found = sorted(glob.glob(os.path.join(repo, package + "_*.deb")))
        if not found:
            raise RuntimeError("%s has no %s package: run scripts/local-apt-repo.sh %s"
                               % (repo, package, " ".join(APT_PACKAGES)))
        debs.append(found[-1])
    return os.path.join(debroot.unpacked(NGINX_ROOT, debs), "usr", "sbin", "nginx")


def render_nginx_conf(listen, models, state_dir, user="www-data"):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    template = env.from_string(open(NGINX_TEMPLATE).read())
    return template.render(
        ansible_managed="rendered by tests/fanout/netns_site.py", weight_peer_user=user,
        weight_peer_worker_processes=1, weight_peer_state_dir=state_dir, weight_peer_access_log=False,
        weight_peer_listen_address=listen, weight_peer_port=PEER_PORT, weight_peer_models=models)


class Site(object):
    """``hosts`` namespaces + Hub + switch.  Use as a context manager (always torn down)."""

    def __init__(self, tag, hosts=8, host_rate="100mbit", hub_rate="40mbit", workdir=None, hub_queue_ms=QUEUE_MS):
        if not tag.isalnum() or len(tag) > 6:
            raise ValueError("tag must be 1-6 letters/digits")
        self.tag = tag
        self.count = hosts
        self.host_rate = host_rate
        self.hub_rate = hub_rate
        self.hub_queue_ms = hub_queue_ms  # the Hub link's shaper queue (the hosts' stay QUEUE_MS)
        self.workdir = workdir or "/tmp/fo-%s" % tag
        self.hosts = ["h%d" % i for i in range(hosts)]
        self.nginx_pids = {}
        self.procs = []
        self.hub_proc = None
        self.hub_url = None

    # ------------------------------------------------------------- network
    def ns(self, name):
        return "fo-%s-%s" % (self.tag, name)

    def ip(self, host):
        return "%s.%d" % (SUBNET, self.hosts.index(host) + 1)

    def peer_url(self, host):
        return "http://%s:%d/%s" % (self.ip(host), PEER_PORT, MODEL)

    def local_dir(self, host):
        return os.path.join(self.workdir, host, "model")

    def up(self):
        self.down()
        shutil.rmtree(self.workdir, ignore_errors=True)
        os.makedirs(self.workdir, exist_ok=True)
        os.chmod(self.workdir, 0o755)
        try:
            self._build()
        except BaseException:
            self.down()
            raise
        return self

    def _build(self):
        sw = self.ns("sw")
        sh("ip", "netns", "add", sw)
        sh("ip", "netns", "exec", sw, "ip", "link", "add", "br0", "type", "bridge")
        sh("ip", "netns", "exec", sw, "ip", "link", "set", "br0", "up")
        self._link("hub", HUB_IP, self.hub_rate, self.hub_queue_ms)
        for host in self.hosts:
            self._link(host, self.ip(host), self.host_rate)

    def _link(self, name, address, rate, queue_ms=QUEUE_MS):
        ns, sw = self.ns(name), self.ns("sw")
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", name, "netns", sw)
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", address + "/24", "dev", "eth0")
        for cmd in (("ip", "link", "set", "lo", "up"), ("ip", "link", "set", "eth0", "up")):
            sh("ip", "netns", "exec", ns, *cmd)
        # 4 MiB initial TCP buffers (per namespace): on this loaded shared machine a thread may wait
        # tens of ms for a CPU; with the default 128 KiB window the sender stops meanwhile, so the
        # transfer would measure scheduling latency instead of links.  Hosts tuned for bulk do the same.
        sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.tcp_rmem=4096 4194304 16777216",
           "net.ipv4.tcp_wmem=4096 4194304 16777216")
        sh("ip", "netns", "exec", sw, "ip", "link", "set", name, "master", "br0", "up")
        # egress of the host (what it sends) and of the switch port (what it receives).  A short queue
        # (10 ms), as on a real NIC: with a long FIFO, ACKs of a host's download wait behind its uploads
        # to its children (this kernel has no fq_codel to separate the flows).
        for where, dev in ((ns, "eth0"), (sw, name)):
            sh("ip", "netns", "exec", where, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
               "burst", "64kb", "latency", "%dms" % queue_ms)

    def down(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.procs = []
        for host in list(self.nginx_pids):
            self.stop_nginx(host)
        self.stop_hub()
        listed = sh("ip", "netns", "list", check=False).stdout.split()
        for name in listed:
            if name.startswith("fo-%s-" % self.tag):
                sh("ip", "netns", "del", name, check=False)

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()

    def exec_argv(self, host, argv):
        return ["ip", "netns", "exec", self.ns(host)] + list(argv)

    # ----------------------------------------------------------------- hub
    def start_hub(self, repo_spec, data_dir):
        state = os.path.join(self.workdir, "hub.json")
        if os.path.exists(state):
            os.unlink(state)
        log = open(os.path.join(self.workdir, "hub.log"), "ab")
        self.hub_proc = subprocess.Popen(self.exec_argv("hub", [
            sys.executable, "-m", "localhub", "serve", "--host", HUB_IP, "--port", str(HUB_PORT),
            "--data-dir", data_dir, "--state-file", state, "--repo", repo_spec, "--cdn-host", HUB_IP]),
            stdout=log, stderr=log, env=_env())
        deadline = time.monotonic() + 600
        while not os.path.exists(state):
            if self.hub_proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("localhub did not start; see %s/hub.log" % self.workdir)
            time.sleep(0.1)
        self.hub_url = json.load(open(state))["url"]
        return self.hub_url

    def stop_hub(self):
        if self.hub_proc is not None and self.hub_proc.poll() is None:
            self.hub_proc.terminate()
            try:
                self.hub_proc.wait(10)
            except subprocess.TimeoutExpired:
                self.hub_proc.kill()
                self.hub_proc.wait()
        self.hub_proc = None

    def hub_admin(self, path, method="GET"):
        """The Hub's admin API, from inside the Hub's namespace (the controller cannot reach it)."""
        code = ("import json,sys,urllib.request;r=urllib.request.Request(sys.argv[1],method=sys.argv[2],data=b'' "
                "if sys.argv[2]=='POST' else None);print(urllib.request.urlopen(r,timeout=10).read().decode())")
        out = sh(*self.exec_argv("hub", [sys.executable, "-c", code, self.hub_url + path, method]), timeout=30)
        return json.loads(out.stdout)

    def hub_bytes(self):
        stats = self.hub_admin("/_admin/stats")
        return int(stats.get("cdn_bytes_sent", 0)) + int(stats.get("resolve_bytes_sent", 0))

    # --------------------------------------------------------------- nginx
    def start_nginx(self, host):
        state_dir = os.path.join(self.workdir, host, "nginx")
        os.makedirs(state_dir, exist_ok=True)
        os.makedirs(self.local_dir(host), exist_ok=True)
        for d in (os.path.join(self.workdir, host), self.local_dir(host)):
            os.chmod(d, 0o755)
        conf = os.path.join(state_dir, "nginx.conf")
        with open(conf, "w") as handle:
            handle.write(render_nginx_conf(self.ip(host), [{"name": MODEL, "path": self.local_dir(host)}], state_dir))
        binary = nginx_binary()
        sh(*self.exec_argv(host, [binary, "-t", "-q", "-c", conf]))
        sh(*self.exec_argv(host, [binary, "-c", conf]))
        pid_file = os.path.join(state_dir, "nginx.pid")
        deadline = time.monotonic() + 10
        while not os.path.exists(pid_file) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.nginx_pids[host] = int(open(pid_file).read())

    def stop_nginx(self, host):
        pid = self.nginx_pids.pop(host, None)
        if pid:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    # ------------------------------------------------------------- modules
    def module(self, host, name, args, wait=True, timeout=900):
        """Run plugins/modules/NAME.py in ``host``'s namespace; a Popen (wait=False) or the result dict."""
        payload = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()
        out = os.path.join(self.workdir, "%s-%s-%d.out" % (host, name, len(self.procs)))
        handle = open(out, "wb")
        module_path = os.path.join(REPO, "plugins", "modules", name + ".py")
        proc = subprocess.Popen(self.exec_argv(host, [sys.executable, module_path]),
                                stdin=subprocess.PIPE, stdout=handle, stderr=subprocess.STDOUT, env=_env())
        proc.stdin.write(payload)
        proc.stdin.close()
        proc.out_path = out
        self.procs.append(proc)
        if not wait:
            return proc
        proc.wait(timeout)
        return result_of(proc)

    def listing(self, repo_id):
        args = {"mode": "list", "repo_id": repo_id, "revision": "main", "local_dir": self.local_dir("h0"),
                "endpoint": self.hub_url}
        res = self.module("h0", "hf_fanout_fetch", args)
        if res.get("failed"):
            raise RuntimeError("listing failed: %s" % res.get("msg"))
        return res["commit"], res["files"]

    def seed_args(self, repo_id, commit, host="h0"):
        return {"repo_id": repo_id, "revision": commit, "local_dir": self.local_dir(host), "endpoint": self.hub_url,
                "min_free_bytes": 0, "stall_timeout": 30}

    def fetch_args(self, host, repo_id, commit, files, fanout=2, hosts=None, use_hub=False, **extra):
        hosts = hosts or self.hosts
        args = {"repo_id": repo_id, "local_dir": self.local_dir(host), "commit": commit, "files": files,
                "peers": [{"name": h, "url": self.peer_url(h)} for h in hosts], "host": host, "fanout": fanout,
                "use_hub": use_hub, "endpoint": self.hub_url, "poll_interval": 0.05, "peer_stall_timeout": 30,
                "stall_timeout": 10}
        args.update(extra)
        return args

    def wipe(self, host):
        shutil.rmtree(self.local_dir(host), ignore_errors=True)
        os.makedirs(self.local_dir(host), exist_ok=True)
        os.chmod(self.local_dir(host), 0o755)


def result_of(proc):
    text = open(proc.out_path, "rb").read().decode("utf-8", "replace")
    try:
        return json.loads(text[text.index("{"):])
    except ValueError:
        return {"failed": True, "msg": "no module result (rc %s): %s" % (proc.returncode, text[-2000:])}


def _env():
    dropped = ("HF_", "HUGGING_FACE", "http_", "https_", "HTTP_", "HTTPS_", "no_proxy", "NO_PROXY")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "collections"), REPO, os.path.join(REPO, "tests", "support")])
    env["HF_HUB_DISABLE_XET"] = "1"
    return env


def sha256_of(path):
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_all(site, hosts, files):
    """{host: [paths that are missing or do not hash to the listed oid]} (LFS files; small files by sha1)."""
    import hashlib

    bad = {}
    for host in hosts:
        wrong = []
        for path, info in files.items():
            full = os.path.join(site.local_dir(host), path)
            if not os.path.isfile(full) or os.path.islink(full):
                wrong.append(path)
                continue
            if info["lfs"]:
                ok = sha256_of(full) == info["oid"]
            else:
                data = open(full, "rb").read()
                ok = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == info["oid"]
            if not ok:
                wrong.append(path)
        if wrong:
            bad[host] = wrong
    return bad


def fetch_url(url, method="GET", timeout=10):
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
