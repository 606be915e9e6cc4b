# SPDX-License-Identifier: Apache-2.0
"""Fabric, GPU health and boot checks (gpu_health) on the real driver's outputs and on CT200-shaped ones.

real-h200-*: printed by driver 580.159.04 on one H200 (tests/unit/fixtures/gpu/README.md); ct200-*: 8x RTX PRO
6000 (sm_120) on two NUMA nodes, built from those formats (P2P with CNS/NS, an Xid 79, a pending row remap)."""
import os

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import gpu_health as gh
from ansible_collections.ct200.deploy.plugins.module_utils import host_facts

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "gpu")
CT200_BUS = ["17", "2A", "3D", "63", "9A", "AB", "BD", "E1"]


def fixture(name):
    with open(os.path.join(FIX, name), encoding="utf-8") as handle:
        return handle.read()


def by_check(results):
    return {r["check"]: r for r in results}


# ---------------------------------------------------------------- parsers, real driver output

def test_real_query_gpu_parses_with_na_fields_and_compute_cap():
    rows = gh.parse_health_query(fixture("real-h200-query-gpu.csv"))
    assert len(rows) == 1
    assert rows[0]["compute_cap"] == "9.0" and rows[0]["persistence_mode"] == "Enabled"
    assert rows[0]["retired_pages.pending"] is None  # printed as [N/A]
    assert rows[0]["ecc.errors.uncorrected.volatile.total"] == "0"
    assert rows[0]["pci.bus_id"] == "00000000:00:06.0"


def test_real_row_remapper_section_reads_healthy():
    gpus = gh.parse_smi_q(fixture("real-h200-q-rowremap.txt"))
    assert list(gpus) == ["00000000:00:06.0"]
    assert gh.memory_health(gpus["00000000:00:06.0"]) == {
        "ecc_uncorrectable_volatile": 0, "ecc_uncorrectable_aggregate": 0, "remap_pending": False,
        "remap_failure": False, "remapped_uncorrectable": 0, "retired_pending": False, "retired_double_bit": 0}


def test_real_p2p_matrix_with_ansi_underline_parses():
    text = fixture("real-h200-topo-p2p-r.txt")
    assert "\x1b[4m" in text  # the real header is underlined
    assert gh.parse_p2p(text) == {"labels": ["GPU0"], "status": {(0, 0): "X"}}


def test_p2p_garbage_is_unreadable_not_ok():
    assert gh.parse_p2p("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.") is None
    assert gh.parse_p2p(" \tGPU0\tGPU1\n GPU0\tX\tOK\n") is None  # a row missing


# ---------------------------------------------------------------- parsers, CT200-shaped

def test_ct200_fixtures_parse():
    rows = gh.parse_health_query(fixture("ct200-query-gpu.csv"))
    assert [r["compute_cap"] for r in rows] == ["12.0"] * 8
    assert rows[0]["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    memory = {bus: gh.memory_health(sec) for bus, sec in gh.parse_smi_q(fixture("ct200-q-rowremap.txt")).items()}
    assert sorted(b for b, m in memory.items() if m["remap_pending"]) == ["00000000:63:00.0"]
    p2p = gh.parse_p2p(fixture("ct200-topo-p2p-r.txt"))
    assert len(p2p["labels"]) == 8 and p2p["status"][(0, 4)] == "CNS" and p2p["status"][(2, 3)] == "NS"
    assert p2p["status"][(0, 1)] == "OK"
    xids = gh.parse_xids(fixture("ct200-kernel.log"))
    assert [(x["bus"], x["xid"]) for x in xids] == [("0000:2A:00", 13), ("0000:BD:00", 79)]
    acs = gh.parse_lspci_acs(fixture("ct200-lspci-acs-on.txt"))
    assert acs["0000:99:00.0"]["ReqRedir"] and acs["0000:99:00.0"]["SrcValid"]
    assert not acs["0000:16:00.0"]["ReqRedir"]


def test_mount_options_pick_the_mount_holding_tmp():
    info = ("22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
            "30 22 0:27 / /tmp rw,nosuid,nodev,noexec,relatime shared:5 - tmpfs tmpfs rw\n"
            "31 22 0:28 / /tmpfoo rw shared:6 - tmpfs tmpfs rw\n")
    assert gh.mount_options("/tmp", info) == ("/tmp", ["rw", "nosuid", "nodev", "noexec", "relatime"])
    assert gh.mount_options("/tmp", info.splitlines()[0])[0] == "/"


# ---------------------------------------------------------------- a CT200 sysfs tree and the verdicts

def sysfs(tmp_path, iommu_type=None):
    """8 GPUs behind one switch port each, GPUs 0-3 on NUMA node 0 and 4-7 on node 1."""
    root = tmp_path / "sys"
    for i, bus in enumerate(CT200_BUS):
        bdf = "0000:%s:00.0" % bus.lower()
        up = "0000:%02x:00.0" % (int(bus, 16) - 1)
        dev = root / "devices" / ("pci0000:%02x" % (int(bus, 16) - 2)) / up / bdf
        dev.mkdir(parents=True)
        (dev / "numa_node").write_text("%d\n" % (0 if i < 4 else 1))
        (root / "bus/pci/devices").mkdir(parents=True, exist_ok=True)
        (root / "bus/pci/devices" / bdf).symlink_to(dev)
        if iommu_type:
            group = root / "kernel/iommu_groups" / str(40 + i)
            group.mkdir(parents=True)
            (group / "type").write_text(iommu_type + "\n")
            (dev / "iommu_group").symlink_to(group)
    for node in ("node0", "node1"):
        (root / "devices/system/node" / node).mkdir(parents=True)
    return str(root)


def ct200_host(root):
    gpus = [{"index": i, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "memory_mib": 97887,
             "pci_bus_id": "00000000:%s:00.0" % b, "numa_node": host_facts.numa_node_of("00000000:%s:00.0" % b, root)}
            for i, b in enumerate(CT200_BUS)]
    return {"gpu_count": 8, "gpus": gpus, "numa_nodes": host_facts.numa_nodes(root), "nvidia_smi": "/usr/bin/nvidia-smi"}


def recorded_run(p2p="ct200-healthy-topo-p2p-r.txt", lspci="ct200-lspci-acs-off.txt", log="ct200-healthy-kernel.log",
                 rowremap="ct200-healthy-q-rowremap.txt", query="ct200-query-gpu.csv"):
    """A Runner answering each command with its recorded output (nvidia-smi is the one thing we mock)."""
    def run(argv):
        joined = " ".join(argv[1:])
        if joined.startswith("--query-gpu=" + gh.HEALTH_QUERY):
            return 0, fixture(query), ""
        if joined.startswith("-q -d ROW_REMAPPER"):
            return 0, fixture(rowremap), ""
        if joined == "topo -p2p r":
            return 0, fixture(p2p), ""
        if argv[0].endswith("lspci"):
            return 0, fixture(lspci), ""
        if argv[0].endswith(("journalctl", "dmesg")):
            return 0, fixture(log), ""
        raise AssertionError("unexpected command %s" % argv)
    return run


def gather(run, root, monkeypatch, tmp_path):
    monkeypatch.setattr(gh, "_which", lambda name, extra=(): "/usr/bin/" + name)
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True, exist_ok=True)
    (proc / "self/mountinfo").write_text("30 22 0:27 / /tmp rw,nosuid,nodev shared:5 - tmpfs tmpfs rw\n")
    (proc / "cmdline").write_text("BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on iommu=pt\n")
    bin_dir = tmp_path / "root/usr/bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "nvidia-modprobe").write_text("#!/bin/sh\n")
    (bin_dir / "nvidia-modprobe").chmod(0o755)
    return gh.gather(run, "/usr/bin/nvidia-smi", ct200_host(root)["gpus"], root, str(proc), str(tmp_path / "root"))


WANT = {"gpus_needed": 8, "compute_cap": "12.0"}


def test_a_healthy_ct200_passes_every_check(tmp_path, monkeypatch):
    root = sysfs(tmp_path, iommu_type="identity")
    results = gh.evaluate(ct200_host(root), gather(recorded_run(), root, monkeypatch, tmp_path), WANT)
    assert [r for r in results if not r["ok"]] == []
    checks = by_check(results)
    assert set(checks) == {"tmp_exec", "nvidia_uvm_boot", "compute_cap", "persistence_mode", "gpu_memory", "xid",
                           "p2p", "acs", "iommu", "numa"}
    assert checks["iommu"]["value"]["cmdline"] == ["intel_iommu=on", "iommu=pt"]
    assert checks["numa"]["value"]["gpus"] == {str(i): (0 if i < 4 else 1) for i in range(8)}
    assert all(r["proven"] for r in results)


def test_the_sick_ct200_is_refused_with_the_remedy_for_each_finding(tmp_path, monkeypatch):
    root = sysfs(tmp_path, iommu_type="DMA-FQ")
    run = recorded_run(p2p="ct200-topo-p2p-r.txt", lspci="ct200-lspci-acs-on.txt", log="ct200-kernel.log",
                       rowremap="ct200-q-rowremap.txt")
    checks = by_check(gh.evaluate(ct200_host(root), gather(run, root, monkeypatch, tmp_path), WANT))
    failed = sorted(c for c, r in checks.items() if not r["ok"])
    assert failed == ["acs", "gpu_memory", "iommu", "p2p", "xid"]
    assert "GPU3: uncorrectable ECC" not in checks["gpu_memory"]["cause"]  # aggregate rows, not volatile
    assert "GPU3: a row remap is pending" in checks["gpu_memory"]["cause"]
    assert "take the host out of service" in checks["gpu_memory"]["fix"]
    assert "Xid 79: GPU has fallen off the bus" in checks["xid"]["cause"] and "GPU6 (0000:BD:00)" in checks["xid"]["cause"]
    assert "Xid 13" not in checks["xid"]["cause"]  # an application fault is listed, not gated
    assert "take the host out of service" in checks["xid"]["fix"]
    assert "GPU0-GPU4 CNS" in checks["p2p"]["cause"] and "GPU2-GPU3 NS" in checks["p2p"]["cause"]
    assert "NCCL_P2P_DISABLE=1" in checks["p2p"]["fix"]
    assert "0000:99:00.0 above GPU4 (ReqRedir+ CmpltRedir+)" in checks["acs"]["cause"]
    assert "setpci" in checks["acs"]["fix"] and "NCCL_P2P_DISABLE=1" in checks["acs"]["fix"]
    assert "group 40, DMA-FQ" in checks["iommu"]["cause"] and "iommu=pt" in checks["iommu"]["fix"]


def test_nccl_p2p_disable_turns_fabric_findings_into_reports_but_not_health(tmp_path, monkeypatch):
    root = sysfs(tmp_path, iommu_type="DMA")
    run = recorded_run(p2p="ct200-topo-p2p-r.txt", lspci="ct200-lspci-acs-on.txt", log="ct200-kernel.log",
                       rowremap="ct200-q-rowremap.txt")
    checks = by_check(gh.evaluate(ct200_host(root), gather(run, root, monkeypatch, tmp_path),
                                  dict(WANT, nccl_p2p_disable=True)))
    assert sorted(c for c, r in checks.items() if not r["ok"]) == ["gpu_memory", "xid"]
    assert "NCCL_P2P_DISABLE=1 is set by the inventory" in checks["acs"]["cause"]


def test_compute_cap_persistence_and_numa_binding(tmp_path, monkeypatch):
    root = sysfs(tmp_path)
    query = fixture("ct200-query-gpu.csv").replace("12.0, Enabled", "12.0, Disabled", 1)
    (tmp_path / "q.csv").write_text(query)
    run = recorded_run()
    facts = gather(run, root, monkeypatch, tmp_path)
    facts["query"] = gh.parse_health_query(query)
    checks = by_check(gh.evaluate(ct200_host(root), facts, dict(WANT, numa_node=0)))
    assert not checks["persistence_mode"]["ok"] and "GPU(s) [0]" in checks["persistence_mode"]["cause"]
    assert "nvidia-persistenced" in checks["persistence_mode"]["fix"]
    assert not checks["numa"]["ok"] and "GPU(s) [4, 5, 6, 7] sit on node(s) [1]" in checks["numa"]["cause"]
    checks = by_check(gh.evaluate(ct200_host(root), facts, dict(WANT, numa_node=0, instance_gpus=[0, 1, 2, 3])))
    assert checks["numa"]["ok"]
    checks = by_check(gh.evaluate(ct200_host(root), facts, dict(WANT, compute_cap="9.0")))
    assert not checks["compute_cap"]["ok"] and "assume 9.0" in checks["compute_cap"]["cause"]


def test_a_gpu_missing_from_the_health_query_is_a_failure(tmp_path, monkeypatch):
    root = sysfs(tmp_path, iommu_type="identity")
    facts = gather(recorded_run(), root, monkeypatch, tmp_path)
    facts["query"] = facts["query"][:7]
    checks = by_check(gh.evaluate(ct200_host(root), facts, WANT))
    assert not checks["gpu_health_query"]["ok"] and "lists 8 GPU(s)" in checks["gpu_health_query"]["cause"]


def test_the_real_h200_against_the_ct200_assumption(tmp_path, monkeypatch):
    """The recorded H200 is healthy but sm_90: the compute_cap check names it; one GPU has no peer traffic."""
    def run(argv):
        joined = " ".join(argv[1:])
        if joined.startswith("--query-gpu="):
            return 0, fixture("real-h200-query-gpu.csv"), ""
        if joined.startswith("-q -d"):
            return 0, fixture("real-h200-q-rowremap.txt"), ""
        if joined == "topo -p2p r":
            return 0, fixture("real-h200-topo-p2p-r.txt"), ""
        return 1, "", "not found"
    monkeypatch.setattr(gh, "_which", lambda name, extra=(): None)  # the VM had no lspci; no kernel log here
    host = {"gpu_count": 1, "numa_nodes": 1, "gpus": [{"index": 0, "pci_bus_id": "00000000:00:06.0", "numa_node": None}]}
    facts = gh.gather(run, "/usr/local/nvidia/bin/nvidia-smi", host["gpus"], str(tmp_path), str(tmp_path), str(tmp_path))
    checks = by_check(gh.evaluate(host, facts, {"gpus_needed": 1, "compute_cap": "12.0"}))
    assert not checks["compute_cap"]["ok"] and "GPU(s) [0] report compute capability ['9.0']" in checks["compute_cap"]["cause"]
    assert checks["persistence_mode"]["ok"] and checks["gpu_memory"]["ok"] and checks["gpu_memory"]["proven"]
    assert checks["p2p"]["value"] == "one GPU per instance: no peer traffic"
    assert checks["xid"]["ok"] and not checks["xid"]["proven"]  # unreadable log: not proven, not passed
    assert not checks["nvidia_uvm_boot"]["ok"]  # the VM had neither nvidia-modprobe nor a modules-load entry


def test_boot_readiness_refuses_noexec_tmp_and_no_way_to_load_uvm(tmp_path):
    facts = {"tmp": ("/tmp", ["rw", "nosuid", "noexec"]),
             "uvm": {"nvidia_modprobe": None, "modules_load": [], "module_installed": False, "kernel": "6.1.0-27-amd64"}}
    checks = by_check(gh.check_boot(facts, has_gpu=True))
    assert not checks["tmp_exec"]["ok"] and "numactl wrapper" in checks["tmp_exec"]["cause"]
    assert not checks["nvidia_uvm_boot"]["ok"] and "nvidia-modprobe" in checks["nvidia_uvm_boot"]["fix"]
    facts["uvm"]["module_installed"] = True
    assert by_check(gh.check_boot(facts, has_gpu=True))["nvidia_uvm_boot"]["ok"]
    facts["uvm"] = {"nvidia_modprobe": None, "modules_load": ["/etc/modules-load.d/nvidia-uvm.conf"], "kernel": "x"}
    assert by_check(gh.check_boot(facts, has_gpu=True))["nvidia_uvm_boot"]["value"] == ["/etc/modules-load.d/nvidia-uvm.conf"]


def test_uvm_facts_read_modules_load_d_and_modules_dep(tmp_path):
    conf = tmp_path / "etc/modules-load.d"
    conf.mkdir(parents=True)
    (conf / "gpu.conf").write_text("# GPUs\nnvidia_uvm  # CUDA's unified memory\n")
    facts = gh.uvm_facts(str(tmp_path))
    assert facts["modules_load"] == ["/etc/modules-load.d/gpu.conf"] and facts["nvidia_modprobe"] is None
    mods = tmp_path / "lib/modules" / os.uname().release
    mods.mkdir(parents=True)
    (mods / "modules.dep").write_text("updates/dkms/nvidia-uvm.ko.xz: updates/dkms/nvidia.ko.xz\n")
    assert gh.uvm_facts(str(tmp_path))["module_installed"]


def test_a_cpu_standin_reports_gpu_checks_as_not_proven():
    results = gh.evaluate({"gpu_count": 0, "gpus": []}, {"tmp": ("/tmp", ["rw"]), "uvm": {}}, WANT)
    assert all(r["ok"] for r in results)
    assert [r["check"] for r in results if r["proven"]] == ["tmp_exec"]


def test_real_nvrm_lines_without_an_xid_are_no_finding():
    text = fixture("real-h200-dmesg-nvrm.txt")
    assert "NVRM: loading NVIDIA UNIX Open Kernel Module" in text
    assert gh.parse_xids(text) == []
    assert gh._check_xids({"kernel_log": text, "kernel_log_source": "dmesg"}, {})["ok"]


@pytest.mark.parametrize("line, bus, xid", [
    ("[ 8391.117002] h kernel: NVRM: Xid (PCI:0000:bd:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
     "the bus.", "0000:BD:00", 79),
    ("Dec 01 21:03:19 h kernel: NVRM: Xid (PCI:0000:17:00): 48, pid=1, name=python3, An uncorrectable double bit "
     "error", "0000:17:00", 48),
])
def test_xid_lines_in_journal_and_dmesg_forms(line, bus, xid):
    assert [(x["bus"], x["xid"]) for x in gh.parse_xids(line)] == [(bus, xid)]


def test_failed_results_become_preflight_failed_checks():
    results = [gh.result("p2p", False, {}, "cause", "fix"), gh.result("xid", True, [])]
    assert gh.failed(results) == [{"check": "p2p", "cause": "cause", "fix": "fix"}]
