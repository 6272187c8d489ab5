"""`warpstore nvme doctor` against fake sysfs, /dev and /proc trees: each
check's state and text, the exit status, JSON, and the CLI wiring."""
import importlib
import importlib.util
import json
import os
import sys

import pytest

import warpstore

_HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "warpstore")


def _checkout_module(name):
    """warpstore.<name> from this checkout's python/warpstore: the warpstore
    imported may be an installed copy older than the checkout."""
    path = os.path.join(_HERE, name + ".py")
    try:
        m = importlib.import_module(f"warpstore.{name}")
        if os.path.samefile(m.__file__, path):
            return m
    except ImportError:
        pass
    spec = importlib.util.spec_from_file_location(f"warpstore.{name}", path)
    m = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = m
    setattr(warpstore, name, m)
    spec.loader.exec_module(m)
    return m


nvme_doctor = _checkout_module("nvme_doctor")
cli = _checkout_module("cli")

BDF = "0000:65:00.0"
GROUP = "12"
NVIDIA = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
          "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:15:33 UTC 2024\nGCC version:  gcc 12.3.0\n")


class Tree:
    """A fake machine: sysfs laid out as the kernel does it (devices under
    /sys/devices, links from bus/pci/devices, driver and iommu_group links)."""

    def __init__(self, root):
        self.root = root
        self.sys, self.dev, self.proc = root / "sys", root / "dev", root / "proc"
        for d in (self.sys / "bus/pci/devices", self.sys / "bus/pci/drivers", self.dev,
                  self.proc / "sys/kernel"):
            d.mkdir(parents=True, exist_ok=True)

    def args(self, *extra):
        return [*extra, "--sysfs", str(self.sys), "--dev", str(self.dev), "--proc", str(self.proc)]

    def roots(self):
        return nvme_doctor.Roots(str(self.sys), str(self.dev), str(self.proc))

    def file(self, path, text=""):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def iommu(self):
        (self.sys / "class/iommu/dmar0").mkdir(parents=True, exist_ok=True)
        self.file(self.proc / "cmdline",
                  "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on iommu=pt\n")

    def device(self, bdf, cls=0x010802, driver="vfio-pci", group=GROUP,
               bar=(0xFE000000, 0xFE003FFF, 0x140204)):
        real = self.sys / "devices/pci0000:64" / bdf
        real.mkdir(parents=True)
        devices = self.sys / "bus/pci/devices"
        (devices / bdf).symlink_to(os.path.relpath(real, devices))
        self.file(real / "class", f"0x{cls:06x}\n")
        start, end, flags = bar
        self.file(real / "resource", f"0x{start:016x} 0x{end:016x} 0x{flags:016x}\n"
                  + "0x0000000000000000 0x0000000000000000 0x0000000000000000\n" * 5)
        if driver is not None:
            self.bind(bdf, driver)
        if group is not None:
            gdir = self.sys / "kernel/iommu_groups" / group / "devices"
            gdir.mkdir(parents=True, exist_ok=True)
            (gdir / bdf).symlink_to(os.path.relpath(real, gdir))
            (real / "iommu_group").symlink_to(os.path.relpath(gdir.parent, real))
        return real

    def bind(self, bdf, driver):
        real = (self.sys / "bus/pci/devices" / bdf).resolve()
        ddir = self.sys / "bus/pci/drivers" / driver
        ddir.mkdir(parents=True, exist_ok=True)
        link = real / "driver"
        if link.is_symlink():
            link.unlink()
        link.symlink_to(os.path.relpath(ddir, real))

    def ready(self):
        """Everything the nvme controller needs, one NVMe device alone in group 12."""
        self.iommu()
        (self.sys / "bus/pci/drivers/vfio-pci").mkdir(parents=True, exist_ok=True)
        (self.sys / "kernel/dmabuf").mkdir(parents=True)
        self.file(self.dev / "vfio/vfio")
        self.file(self.dev / "vfio" / GROUP)
        self.file(self.dev / "iommu")
        self.file(self.proc / "driver/nvidia/version", NVIDIA)
        self.file(self.proc / "sys/kernel/osrelease", "6.8.0-fake\n")
        self.device(BDF)
        return self


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.setattr(nvme_doctor, "_memlock", lambda: None)  # unlimited
    return Tree(tmp_path)


def doctor(tree, target=BDF):
    """(exit status, {check: result}) of `target` on the fake machine."""
    results = nvme_doctor.diagnose(target, tree.roots())
    return nvme_doctor.exit_status(results), {r["check"]: r for r in results}


def state(results, check):
    return results[check]["state"]


def test_ready_device_is_all_ok(tree, capsys):
    tree.ready()
    rc, r = doctor(tree)
    assert rc == 0
    assert {v["state"] for v in r.values()} <= {"OK", "INFO"}, r
    for check in ("iommu", "vfio-pci", "vfio container", "memlock", f"{BDF} class",
                  f"{BDF} driver", f"{BDF} iommu group", f"/dev/vfio/{GROUP}",
                  f"{BDF} group members", f"{BDF} BAR0"):
        assert state(r, check) == "OK", r[check]
    assert r["kernel"]["detail"] == "Linux 6.8.0-fake"
    assert "550.54.15" in r["nvidia driver"]["detail"] and "open" in r["nvidia driver"]["detail"]
    assert r[f"{BDF} BAR0"]["detail"].startswith("16 KiB")
    assert "intel_iommu=on" in r["iommu"]["detail"]
    assert cli.main(["nvme", "doctor", BDF, *tree.args()]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == ("The `nvme` controller (`controller=\"nvme\"`, path nvme://BDF) opens the "
                       "device through VFIO, but has not yet run on a real device or a real "
                       "kernel's VFIO (docs/NVME.md); `controller=\"nvme-model\"` runs the same "
                       "GPU data path against the software device.")
    assert out[-2] == "nothing MISSING"
    assert not any(line.startswith("MISSING") for line in out)


def test_device_bound_to_nvme_says_how_to_bind_and_what_is_lost(tree):
    tree.ready()
    (tree.dev / "vfio" / GROUP).unlink()  # no group node while the kernel holds the device
    tree.bind(BDF, "nvme")
    ns = tree.sys / "devices/pci0000:64" / BDF / "nvme/nvme0/nvme0n1"
    tree.file(ns / "queue/logical_block_size", "4096\n")
    tree.file(tree.proc / "mounts", "/dev/nvme0n1p1 /data ext4 rw 0 0\n")
    rc, r = doctor(tree)
    assert rc == 1
    d = r[f"{BDF} driver"]
    assert d["state"] == "MISSING"
    assert "kernel's nvme driver" in d["detail"] and "filesystem" in d["detail"]
    assert "nvme0n1" in d["detail"] and "/data" in d["detail"]
    sysfs = str(tree.sys)
    assert d["fix"] == (f"as root: echo {BDF} > {sysfs}/bus/pci/drivers/nvme/unbind; "
                        f"echo vfio-pci > {sysfs}/bus/pci/devices/{BDF}/driver_override; "
                        f"echo {BDF} > {sysfs}/bus/pci/drivers_probe")
    assert state(r, f"/dev/vfio/{GROUP}") == "MISSING"
    assert "bound to vfio-pci" in r[f"/dev/vfio/{GROUP}"]["detail"]
    assert state(r, f"{BDF} lba format") == "WARN"
    assert "4096-byte" in r[f"{BDF} lba format"]["detail"]


def test_no_iommu_is_missing(tree):
    tree.ready()
    # No IOMMU: no units, no groups, no group link, no group node.
    import shutil

    shutil.rmtree(tree.sys / "class/iommu")
    shutil.rmtree(tree.sys / "kernel/iommu_groups")
    (tree.sys / "devices/pci0000:64" / BDF / "iommu_group").unlink()
    (tree.dev / "vfio" / GROUP).unlink()
    tree.file(tree.proc / "cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet\n")
    rc, r = doctor(tree)
    assert rc == 1
    assert state(r, "iommu") == "MISSING"
    assert "no iommu options" in r["iommu"]["detail"]
    assert "intel_iommu=on" in r["iommu"]["fix"] and "amd_iommu=on" in r["iommu"]["fix"]
    assert "iommu=pt" in r["iommu"]["fix"]
    assert state(r, f"{BDF} iommu group") == "MISSING"
    assert f"/dev/vfio/{GROUP}" not in r


def test_iommu_asked_for_but_absent_points_at_the_firmware(tree):
    tree.ready()
    import shutil

    shutil.rmtree(tree.sys / "class/iommu")
    rc, r = doctor(tree)
    assert rc == 1 and state(r, "iommu") == "MISSING"
    assert "firmware" in r["iommu"]["detail"]


def test_group_node_missing(tree):
    tree.ready()
    (tree.dev / "vfio" / GROUP).unlink()
    rc, r = doctor(tree)
    assert rc == 1
    assert state(r, f"/dev/vfio/{GROUP}") == "MISSING"
    assert str(tree.dev / "vfio" / GROUP) in r[f"/dev/vfio/{GROUP}"]["detail"]


def test_group_node_not_accessible(tree, monkeypatch):
    tree.ready()
    node = str(tree.dev / "vfio" / GROUP)
    real = nvme_doctor._accessible
    # Tests may run as root, for whom os.access says yes to any mode.
    monkeypatch.setattr(nvme_doctor, "_accessible", lambda p: p != node and real(p))
    rc, r = doctor(tree)
    assert rc == 1
    g = r[f"/dev/vfio/{GROUP}"]
    assert g["state"] == "MISSING" and "not readable and writable" in g["detail"]
    assert "chown" in g["fix"] and "udev" in g["fix"] and f'KERNEL=="{GROUP}"' in g["fix"]
    assert state(r, "vfio container") == "OK"


def test_bar_too_small(tree):
    tree.ready()
    (tree.sys / "bus/pci/devices" / BDF / "resource").write_text(
        "0x00000000fe000000 0x00000000fe000fff 0x0000000000140204\n")
    rc, r = doctor(tree)
    assert rc == 1
    b = r[f"{BDF} BAR0"]
    assert b["state"] == "MISSING"
    assert "4 KiB (4096 bytes)" in b["detail"] and "0x1000" in b["detail"]


def test_unassigned_bar_is_missing(tree):
    tree.ready()
    (tree.sys / "bus/pci/devices" / BDF / "resource").write_text(
        "0x0000000000000000 0x0000000000000000 0x0000000000000000\n")
    rc, r = doctor(tree)
    assert rc == 1 and "not assigned" in r[f"{BDF} BAR0"]["detail"]


def test_group_with_a_device_not_on_vfio_pci(tree):
    tree.ready()
    tree.device("0000:65:00.1", cls=0x010601, driver="ahci")
    tree.device("0000:64:00.0", cls=0x060400, driver="pcieport")  # a bridge: allowed
    rc, r = doctor(tree)
    assert rc == 1
    m = r[f"{BDF} group members"]
    assert m["state"] == "MISSING"
    assert "0000:65:00.1 (ahci)" in m["detail"]
    assert "0000:64:00.0" not in m["detail"]
    assert f"echo 0000:65:00.1 > {tree.sys}/bus/pci/drivers/ahci/unbind" in m["fix"]
    # Bound to vfio-pci, the group is viable.
    tree.bind("0000:65:00.1", "vfio-pci")
    rc, r = doctor(tree)
    assert rc == 0 and state(r, f"{BDF} group members") == "OK"
    assert "0000:64:00.0 (bridge, pcieport)" in r[f"{BDF} group members"]["detail"]


def test_unbound_device_and_wrong_class(tree):
    tree.ready()
    (tree.sys / "bus/pci/devices" / BDF / "driver").unlink()
    rc, r = doctor(tree)
    assert rc == 1 and r[f"{BDF} driver"]["detail"] == "bound to no driver"
    fix = r[f"{BDF} driver"]["fix"]
    assert "unbind" not in fix and "driver_override" in fix
    tree.device("0000:17:00.0", cls=0x030200, driver="nvidia", group="40")
    rc, r = doctor(tree, "0000:17:00.0")
    assert rc == 1 and state(r, "0000:17:00.0 class") == "MISSING"
    assert "0x030200" in r["0000:17:00.0 class"]["detail"]
    rc, r = doctor(tree, "0000:99:00.0")
    assert rc == 1 and state(r, "0000:99:00.0 device") == "MISSING"


def test_no_target_checks_nvme_class_devices_only(tree):
    tree.ready()
    tree.device("0000:b3:00.0", group="30")
    tree.device("0000:00:17.0", cls=0x010601, driver="ahci", group="5")
    tree.device("0000:17:00.0", cls=0x030200, driver="nvidia", group="40")
    assert nvme_doctor.nvme_devices(tree.roots()) == [BDF, "0000:b3:00.0"]
    rc, r = doctor(tree, None)
    assert r["nvme devices"]["detail"] == f"{BDF}, 0000:b3:00.0"
    devices = {k.split()[0] for k in r if k.startswith("0000:")}
    assert devices == {BDF, "0000:b3:00.0"}
    assert rc == 1  # /dev/vfio/30 does not exist
    assert state(r, "/dev/vfio/30") == "MISSING" and state(r, f"/dev/vfio/{GROUP}") == "OK"


def test_no_nvme_device_at_all(tree):
    tree.ready()
    import shutil

    shutil.rmtree(tree.sys / "bus/pci/devices")
    (tree.sys / "bus/pci/devices").mkdir()
    tree.device("0000:00:17.0", cls=0x010601, driver="ahci", group="5")
    rc, r = doctor(tree, None)
    assert rc == 1 and state(r, "nvme devices") == "MISSING"


def test_target_forms(tree):
    assert nvme_doctor.parse_target("0000:65:00.0") == ("pci", BDF)
    assert nvme_doctor.parse_target("nvme://0000:65:00.0") == ("pci", BDF)
    assert nvme_doctor.parse_target("65:00.0") == ("pci", BDF)
    assert nvme_doctor.parse_target("0000:B3:00.0") == ("pci", "0000:b3:00.0")
    assert nvme_doctor.parse_target("/dev/vfio/12") == ("group", "12")
    for bad in ("/dev/vfio/vfio", "0000:65:00.8", "nvme0n1", "nvme://", ""):
        with pytest.raises(ValueError):
            nvme_doctor.parse_target(bad)
    tree.ready()
    for target in (f"nvme://{BDF}", f"/dev/vfio/{GROUP}"):
        rc, r = doctor(tree, target)
        assert rc == 0 and state(r, f"{BDF} driver") == "OK", target
    rc, r = doctor(tree, "/dev/vfio/77")
    assert rc == 1 and "no IOMMU group 77" in r["/dev/vfio/77"]["detail"]


def test_memlock_below_1_gib_warns_but_passes(tree, monkeypatch):
    tree.ready()
    monkeypatch.setattr(nvme_doctor, "_memlock", lambda: 64 << 20)
    rc, r = doctor(tree)
    assert rc == 0 and state(r, "memlock") == "WARN" and "64 MiB" in r["memlock"]["detail"]


def test_proprietary_driver_and_unknown_dmabuf_warn(tree):
    tree.ready()
    (tree.proc / "driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  "
        "Sat Aug 19 01:15:15 UTC 2023\n")
    (tree.sys / "kernel/dmabuf").rmdir()
    rc, r = doctor(tree)
    assert rc == 0
    assert state(r, "nvidia driver") == "WARN" and "proprietary" in r["nvidia driver"]["detail"]
    assert state(r, "dma-buf") == "WARN" and "cannot tell" in r["dma-buf"]["detail"]
    assert "pinned host memory" in r["dma-buf"]["detail"]


def test_json_parses(tree, capsys):
    tree.ready()
    tree.bind(BDF, "nvme")
    assert cli.main(["nvme", "doctor", BDF, "--json", *tree.args()]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc, list) and all(set(d) == {"check", "state", "detail", "fix"} for d in doc)
    assert {d["state"] for d in doc} <= {"OK", "MISSING", "WARN", "INFO"}
    by = {d["check"]: d for d in doc}
    assert by[f"{BDF} driver"]["state"] == "MISSING"
    assert doc[-1]["check"] == "nvme controller" and "not yet run on a real device" in doc[-1]["detail"]


def test_cli_usage_errors_exit_2(tree, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["nvme", "doctor", "not-a-device", *tree.args()])
    assert e.value.code == 2
    assert "neither a PCI address" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["nvme"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        cli.main(["nvme", "doctor", "--colour"])
    assert e.value.code == 2


def test_cli_missing_exits_1(tree, capsys):
    tree.ready()
    (tree.sys / "bus/pci/drivers/vfio-pci").rmdir()
    assert cli.main(["nvme", "doctor", *tree.args()]) == 1
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.split()[1:2] == ["vfio-pci"])
    assert line.startswith("MISSING") and "fix: modprobe vfio-pci" in line
    assert "1 check(s) MISSING" in out
