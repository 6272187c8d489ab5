"""`warpstore nvme doctor`: what a machine lacks for the bare-metal `nvme`
controller (user-space NVMe over VFIO, queues and doorbells driven by GPU
threads), one line per check, each with its fix.

Everything is read from files (sysfs, /dev, /proc), so --sysfs, --dev and
--proc can point at a fake tree; nothing is written, nothing is opened but
for reading, and no ioctl is made. With every check OK, `controller="nvme"`
over `nvme://BDF` opens the device; that controller has not yet run on a
real device (docs/NVME.md), and `controller="nvme-model"` runs the same GPU
data path against the software device.

Standard library only: importable without the compiled extension.
"""
import argparse
import gzip
import json
import os
import re
import resource
import sys

NVME_CLASS = 0x010802  # mass storage, non-volatile memory, NVM Express
BAR0_MIN = 16 * 1024  # doorbells start at 0x1000; 16 KiB holds the first queue pairs
MEMLOCK_MIN = 1 << 30

OK, MISSING, WARN, INFO = "OK", "MISSING", "WARN", "INFO"

NOT_BUILT = ("the `nvme` controller (`controller=\"nvme\"`, path nvme://BDF) opens the device "
             "through VFIO, but has not yet run on a real device or a real kernel's VFIO "
             "(docs/NVME.md); `controller=\"nvme-model\"` runs the same GPU data path against "
             "the software device")

# Drivers a device may have and still leave its IOMMU group viable for VFIO
# (the kernel's vfio_dev_driver_allowed), besides vfio-pci; None: no driver.
_GROUP_DRIVERS_ALLOWED = {"vfio-pci", "pci-stub", "pcieport", None}

_BDF = re.compile(r"^(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
_GROUP = re.compile(r"^(?:.*/)?vfio/(\d+)$")


class UsageError(ValueError):
    """A TARGET that is neither a PCI address nor a VFIO group path."""


def parse_target(text):
    """("pci", "0000:65:00.0") for a PCI address (nvme:// prefix allowed,
    domain optional), ("group", "12") for /dev/vfio/12; raises UsageError."""
    t = text.strip()
    if t.startswith("nvme://"):
        t = t[len("nvme://"):].rstrip("/")
    m = _BDF.match(t)
    if m:
        domain, bus, dev, fn = m.groups()
        return "pci", f"{(domain or '0000').lower()}:{bus.lower()}:{dev.lower()}.{fn}"
    m = _GROUP.match(t)
    if m:
        return "group", m.group(1)
    raise UsageError(f"nvme doctor: {text!r} is neither a PCI address (0000:65:00.0, "
                     f"nvme://0000:65:00.0) nor a VFIO group (/dev/vfio/N)")


class Roots:
    """Where sysfs, /dev and /proc are (a fake tree in tests)."""

    def __init__(self, sysfs="/sys", dev="/dev", proc="/proc"):
        self.sysfs, self.dev, self.proc = sysfs, dev, proc

    def sys(self, *parts):
        return os.path.join(self.sysfs, *parts)

    def devp(self, *parts):
        return os.path.join(self.dev, *parts)

    def procp(self, *parts):
        return os.path.join(self.proc, *parts)

    def pci(self, bdf, *parts):
        return self.sys("bus", "pci", "devices", bdf, *parts)


def _read(path):
    """The file's text, stripped; None if it cannot be read."""
    try:
        with open(path, "r", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _link_name(path):
    """The basename of the link's target; None if `path` is no link."""
    try:
        return os.path.basename(os.readlink(path).rstrip("/"))
    except OSError:
        return None


def _accessible(path):
    """Whether this user may open `path` for reading and writing (tests replace it)."""
    return os.access(path, os.R_OK | os.W_OK)


def _memlock():
    """The soft RLIMIT_MEMLOCK in bytes; None: unlimited (tests replace it)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return None if soft == resource.RLIM_INFINITY else soft


def _human(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} bytes"


def _pci_class(roots, bdf):
    text = _read(roots.pci(bdf, "class"))
    try:
        return int(text, 16)
    except (TypeError, ValueError):
        return None


def nvme_devices(roots):
    """PCI addresses of every device of class 0x010802 under SYSFS/bus/pci/devices."""
    return [d for d in _listdir(roots.sys("bus", "pci", "devices"))
            if _pci_class(roots, d) == NVME_CLASS]


def _result(check, state, detail, fix=""):
    return {"check": check, "state": state, "detail": detail, "fix": fix}


# ---- checks of the machine ----------------------------------------------------------

def _iommu_fix():
    return ("enable intel_iommu=on (Intel) or amd_iommu=on (AMD), and iommu=pt, on the kernel "
            "command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub or "
            "grub2-mkconfig, and reboot); VT-d / AMD-Vi must also be on in the firmware")


def check_kernel(roots):
    release = _read(roots.procp("sys", "kernel", "osrelease")) or os.uname().release
    return _result("kernel", INFO, f"Linux {release}")


def check_iommu(roots):
    units = _listdir(roots.sys("class", "iommu"))
    groups = _listdir(roots.sys("kernel", "iommu_groups"))
    cmdline = _read(roots.procp("cmdline"))
    flags = [w for w in (cmdline or "").split()
             if w.split("=")[0] in ("intel_iommu", "amd_iommu", "iommu")]
    said = f"; kernel command line: {' '.join(flags) or 'no iommu options'}" \
        if cmdline is not None else ""
    if units and groups:
        return _result("iommu", OK, f"{len(units)} IOMMU unit(s), {len(groups)} group(s){said}")
    what = "no IOMMU units in {}".format(roots.sys("class", "iommu")) if not units else \
        "no IOMMU groups in {}".format(roots.sys("kernel", "iommu_groups"))
    if flags and cmdline is not None:
        what += " although the command line asks for one (is VT-d / AMD-Vi off in the firmware?)"
    return _result("iommu", MISSING, what + said, _iommu_fix())


def check_vfio_pci(roots):
    path = roots.sys("bus", "pci", "drivers", "vfio-pci")
    if os.path.isdir(path):
        return _result("vfio-pci", OK, f"driver present ({path})")
    return _result("vfio-pci", MISSING, f"the vfio-pci driver is not loaded ({path} is absent)",
                   "modprobe vfio-pci (and add vfio-pci to /etc/modules-load.d/vfio.conf to keep "
                   "it across reboots)")


def check_vfio_container(roots):
    path = roots.devp("vfio", "vfio")
    if not os.path.exists(path):
        return _result("vfio container", MISSING, f"{path} is absent",
                       "modprobe vfio-pci (the kernel needs CONFIG_VFIO with the group/container "
                       "interface, CONFIG_VFIO_CONTAINER or CONFIG_IOMMUFD_VFIO_CONTAINER)")
    if not _accessible(path):
        return _result("vfio container", MISSING, f"{path} is not readable and writable by this "
                       "user", f"chmod 0666 {path} (its usual mode)")
    return _result("vfio container", OK, f"{path}")


def check_iommufd(roots):
    path = roots.devp("iommu")
    if os.path.exists(path):
        return _result("iommufd", INFO, f"{path} present: the newer iommufd interface (the "
                       "planned VFIO path maps memory with VFIO_IOMMU_MAP_DMA on the container)")
    return _result("iommufd", INFO, f"{path} absent: no iommufd (Linux 6.2+, CONFIG_IOMMUFD); "
                   "the VFIO container interface is enough for pinned host memory")


def check_memlock():
    limit = _memlock()
    if limit is None:
        return _result("memlock", OK, "RLIMIT_MEMLOCK unlimited")
    if limit >= MEMLOCK_MIN:
        return _result("memlock", OK, f"RLIMIT_MEMLOCK {_human(limit)}")
    return _result("memlock", WARN,
                   f"RLIMIT_MEMLOCK is {_human(limit)}, below 1 GiB: the queues, PRP lists and "
                   "staging are pinned and mapped through VFIO, which counts against it",
                   "ulimit -l unlimited (as root), a memlock line in /etc/security/limits.conf, "
                   "LimitMEMLOCK=infinity for a systemd unit, or --ulimit memlock=-1 for a "
                   "container")


def _nvidia_version(roots):
    """(version, open kernel modules?) from /proc/driver/nvidia/version; None if absent."""
    text = _read(roots.procp("driver", "nvidia", "version"))
    if not text:
        return None
    first = text.splitlines()[0]
    m = re.search(r"\b(\d+\.\d+(?:\.\d+)?)\b", first)
    return (m.group(1) if m else first), "Open Kernel Module" in first


def _kernel_has_dmabuf(roots):
    """True / False where known, None where the tree does not say."""
    if os.path.isdir(roots.sys("kernel", "dmabuf")):
        return True
    config = roots.procp("config.gz")
    try:
        with gzip.open(config, "rt", errors="replace") as f:
            text = f.read()
    except (OSError, EOFError):
        return None
    return re.search(r"^CONFIG_DMA_SHARED_BUFFER=y", text, re.M) is not None


def check_gpu_memory(roots):
    """NVIDIA driver, dma-buf, and what the PRPs could point at: two lines."""
    out = []
    nv = _nvidia_version(roots)
    if nv is None:
        out.append(_result("nvidia driver", WARN,
                           f"no NVIDIA driver loaded ({roots.procp('driver', 'nvidia', 'version')} "
                           "is absent): the GPU side of the path cannot run",
                           "install and load the NVIDIA driver (the open kernel modules for "
                           "GPU memory as a PRP target)"))
    else:
        version, open_modules = nv
        if open_modules:
            out.append(_result("nvidia driver", INFO, f"{version}, open kernel modules"))
        else:
            out.append(_result("nvidia driver", WARN,
                               f"{version}, proprietary kernel modules: CUDA memory cannot be "
                               "exported as a dma-buf with them; PRPs would target pinned host "
                               "memory", "install the open kernel modules (nvidia-open) to try "
                               "GPU memory as a PRP target"))
    dmabuf = _kernel_has_dmabuf(roots)
    how = ("GPU memory as a PRP target needs a dma-buf export of CUDA memory "
           "(cuMemGetHandleForAddressRange with CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, CUDA 11.7+, "
           "the open kernel modules) mapped into the device's IOMMU domain through VFIO/iommufd; "
           "otherwise pinned host memory mapped through VFIO is the PRP target and the GPU pulls "
           "from it (neither is built or tested here)")
    if dmabuf is True:
        out.append(_result("dma-buf", INFO, "the kernel has dma-buf; " + how))
    elif dmabuf is False:
        out.append(_result("dma-buf", WARN, "the kernel lacks dma-buf (CONFIG_DMA_SHARED_BUFFER "
                           "is not y); " + how, "a kernel with CONFIG_DMA_SHARED_BUFFER=y for GPU "
                           "memory as a PRP target; pinned host memory works without it"))
    else:
        out.append(_result("dma-buf", WARN, f"cannot tell whether the kernel has dma-buf (no "
                           f"{roots.sys('kernel', 'dmabuf')}, no {roots.procp('config.gz')}); "
                           + how, "grep CONFIG_DMA_SHARED_BUFFER /boot/config-$(uname -r)"))
    return out


# ---- checks of one device -----------------------------------------------------------

def _bind_fix(roots, bdf, current):
    drivers = roots.sys("bus", "pci", "drivers")
    steps = []
    if current is not None:
        steps.append(f"echo {bdf} > {os.path.join(drivers, current, 'unbind')}")
    steps.append(f"echo vfio-pci > {roots.pci(bdf, 'driver_override')}")
    steps.append(f"echo {bdf} > {roots.sys('bus', 'pci', 'drivers_probe')}")
    return "as root: " + "; ".join(steps)


def _namespaces(roots, bdf):
    """[(name, logical block size or None, [mount points])] of the kernel's
    block devices on this controller (only while the `nvme` driver holds it)."""
    mounts = {}
    for line in (_read(roots.procp("mounts")) or "").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith("/dev/"):
            mounts.setdefault(parts[0][len("/dev/"):], []).append(parts[1])
    found = []
    for ctrl in _listdir(roots.pci(bdf, "nvme")):
        for ns in _listdir(roots.pci(bdf, "nvme", ctrl)):
            if not re.match(r"^nvme\d+(c\d+)?n\d+$", ns):
                continue
            lbs = _read(roots.pci(bdf, "nvme", ctrl, ns, "queue", "logical_block_size"))
            where = [m for dev, ms in mounts.items()
                     if dev == ns or re.match(re.escape(ns) + r"p\d+$", dev) for m in ms]
            found.append((ns, int(lbs) if lbs and lbs.isdigit() else None, where))
    return found


def check_device(roots, bdf):
    """The device's own checks, in order; stops after one that makes the rest moot."""
    out = []
    name = f"{bdf}"
    if not os.path.isdir(roots.pci(bdf)):
        out.append(_result(f"{name} device", MISSING,
                           f"no PCI device {bdf} ({roots.pci(bdf)} is absent)",
                           "lspci -D -d ::0108 lists the NVMe devices and their addresses"))
        return out
    cls = _pci_class(roots, bdf)
    if cls != NVME_CLASS:
        shown = "unreadable" if cls is None else f"0x{cls:06x}"
        out.append(_result(f"{name} class", MISSING,
                           f"class {shown} is not NVMe (0x{NVME_CLASS:06x})",
                           "pick an NVMe device: lspci -D -d ::0108"))
        return out
    out.append(_result(f"{name} class", OK, f"0x{NVME_CLASS:06x} (NVM Express)"))

    driver = _link_name(roots.pci(bdf, "driver"))
    if driver == "vfio-pci":
        out.append(_result(f"{name} driver", OK, "bound to vfio-pci"))
    elif driver == "nvme":
        namespaces = _namespaces(roots, bdf)
        said = ", ".join(
            n + (f" ({b}-byte blocks)" if b else "") + (f" mounted on {', '.join(m)}" if m else "")
            for n, b, m in namespaces) or "no namespaces seen"
        out.append(_result(
            f"{name} driver", MISSING,
            f"bound to the kernel's nvme driver ({said}); binding it to vfio-pci takes it from "
            "the kernel: its block devices and any filesystem on it are gone from this host until "
            "it is bound back (unmount first), and a device driven by warpstore has no filesystem",
            _bind_fix(roots, bdf, driver)))
        small = [(n, b) for n, b, _ in namespaces if b is not None and b != 512]
        if small:
            out.append(_result(
                f"{name} lba format", WARN,
                ", ".join(f"{n} has {b}-byte blocks" for n, b in small) +
                ": arrays address 512-byte blocks, other formats are refused",
                "nvme id-ns -H /dev/NS lists the LBA formats; nvme format --lbaf=N /dev/NS picks "
                "a 512-byte one (erases the namespace)"))
    elif driver is None:
        out.append(_result(f"{name} driver", MISSING, "bound to no driver",
                           _bind_fix(roots, bdf, None)))
    else:
        out.append(_result(f"{name} driver", MISSING, f"bound to {driver}, not vfio-pci",
                           _bind_fix(roots, bdf, driver)))

    group = _link_name(roots.pci(bdf, "iommu_group"))
    if group is None:
        out.append(_result(f"{name} iommu group", MISSING,
                           "the device has no IOMMU group (the IOMMU is off)", _iommu_fix()))
    else:
        out.append(_result(f"{name} iommu group", OK, f"group {group}"))
        out.append(check_group_node(roots, group, driver == "vfio-pci"))
        out.append(check_group_members(roots, group, bdf))

    out.append(check_bar0(roots, bdf))
    return out


def check_group_node(roots, group, bound):
    node = roots.devp("vfio", group)
    check = f"/dev/vfio/{group}"
    if not os.path.exists(node):
        why = "" if bound else " (it appears once the device is bound to vfio-pci)"
        return _result(check, MISSING, f"{node} is absent{why}",
                       "bind the device to vfio-pci (see its driver line); every device of the "
                       "group must be bound to vfio-pci or be a bridge")
    if not _accessible(node):
        user = _user()
        return _result(check, MISSING, f"{node} is not readable and writable by {user}",
                       f"as root: chown {user} {node}; to keep it, a udev rule in "
                       f"/etc/udev/rules.d/99-vfio.rules: SUBSYSTEM==\"vfio\", "
                       f"KERNEL==\"{group}\", OWNER=\"{user}\", MODE=\"0600\"; or run as root")
    return _result(check, OK, f"{node} readable and writable")


def _user():
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return str(os.getuid())


def check_group_members(roots, group, bdf):
    """Every other device of the group must be bound to vfio-pci (or pci-stub,
    or no driver) or be a bridge, or VFIO refuses to open the group."""
    check = f"{bdf} group members"
    members = [d for d in _listdir(roots.sys("kernel", "iommu_groups", group, "devices"))
               if d != bdf]
    if not members:
        return _result(check, OK, f"{bdf} is alone in group {group}")
    bad, fine = [], []
    for d in members:
        drv = _link_name(roots.pci(d, "driver"))
        cls = _pci_class(roots, d)
        bridge = cls is not None and (cls >> 16) == 0x06
        label = f"{d} ({'bridge, ' if bridge else ''}{drv or 'no driver'})"
        (fine if bridge or drv in _GROUP_DRIVERS_ALLOWED else bad).append((d, drv, label))
    if not bad:
        return _result(check, OK, "group {} also holds {}".format(
            group, ", ".join(label for _, _, label in fine)))
    fix = "; ".join(_bind_fix(roots, d, drv).replace("as root: ", "") for d, drv, _ in bad)
    return _result(check, MISSING,
                   "group {} also holds {}, not bound to vfio-pci: VFIO opens a group only when "
                   "all of its devices are".format(group, ", ".join(label for _, _, label in bad)),
                   "as root: " + fix + " (or move the NVMe device to a slot with a group of its "
                   "own; ACS on the bridges above it splits groups)")


def check_bar0(roots, bdf):
    check = f"{bdf} BAR0"
    text = _read(roots.pci(bdf, "resource"))
    try:
        start, end, flags = (int(x, 16) for x in text.splitlines()[0].split()[:3])
    except (AttributeError, IndexError, ValueError):
        return _result(check, MISSING, f"cannot read {roots.pci(bdf, 'resource')}",
                       "check that the device is present and enabled (lspci -vv -s " + bdf + ")")
    if start == 0 and end == 0:
        return _result(check, MISSING, "BAR0 is not assigned",
                       "the firmware or kernel did not assign BAR0: check lspci -vv -s " + bdf)
    size = end - start + 1
    if size < BAR0_MIN:
        return _result(check, MISSING,
                       f"BAR0 is {_human(size)} ({size} bytes) at 0x{start:x}: the doorbells "
                       f"start at 0x1000, and the driver needs at least {_human(BAR0_MIN)}",
                       "this is not a usable NVMe controller BAR: check the device (lspci -vv -s "
                       f"{bdf})")
    memory = " memory" if flags & 0x200 else ""
    return _result(check, OK, f"{_human(size)}{memory} at 0x{start:x}")


# ---- the whole diagnosis --------------------------------------------------------------

def diagnose(target=None, roots=None):
    """The results, in order: the machine, then each device (TARGET's, those
    of its VFIO group, or every NVMe-class device)."""
    roots = roots or Roots()
    kind, value = parse_target(target) if target else (None, None)
    out = [check_kernel(roots), check_iommu(roots), check_vfio_pci(roots),
           check_vfio_container(roots), check_iommufd(roots), check_memlock()]
    out += check_gpu_memory(roots)
    if kind == "pci":
        devices = [value]
    elif kind == "group":
        gdir = roots.sys("kernel", "iommu_groups", value, "devices")
        members = _listdir(gdir)
        devices = [d for d in members if _pci_class(roots, d) == NVME_CLASS]
        if not os.path.isdir(gdir):
            out.append(_result(f"/dev/vfio/{value}", MISSING, f"no IOMMU group {value} ({gdir} "
                               "is absent)", "ls /sys/kernel/iommu_groups lists the groups"))
        elif not devices:
            out.append(_result(f"/dev/vfio/{value}", MISSING,
                               f"group {value} holds no NVMe device ({', '.join(members)})",
                               "lspci -D -d ::0108 lists the NVMe devices; readlink "
                               "/sys/bus/pci/devices/BDF/iommu_group gives a device's group"))
    else:
        devices = nvme_devices(roots)
        if not devices:
            out.append(_result("nvme devices", MISSING,
                               "no PCI device of class 0x010802 (NVMe) under "
                               f"{roots.sys('bus', 'pci', 'devices')}",
                               "install an NVMe SSD; lspci -D -d ::0108 lists them"))
        else:
            out.append(_result("nvme devices", INFO, ", ".join(devices)))
    for bdf in devices:
        out += check_device(roots, bdf)
    return out


def exit_status(results):
    return 1 if any(r["state"] == MISSING for r in results) else 0


def render(results):
    width = max(len(r["check"]) for r in results)
    lines = []
    for r in results:
        line = f"{r['state']:<8} {r['check']:<{width}}  {r['detail']}"
        if r["fix"] and r["state"] != OK:
            line += f"  -- fix: {r['fix']}"
        lines.append(line)
    return "\n".join(lines)


def add_arguments(p):
    """TARGET and the options, for cli.py's `nvme doctor` parser and main() here."""
    p.add_argument("target", nargs="?", metavar="TARGET",
                   help="a PCI address (0000:65:00.0 or nvme://0000:65:00.0) or a VFIO group "
                   "(/dev/vfio/N); without it, every NVMe-class device")
    p.add_argument("--sysfs", default="/sys", metavar="ROOT", help="sysfs root (default /sys)")
    p.add_argument("--dev", default="/dev", metavar="ROOT", help="device root (default /dev)")
    p.add_argument("--proc", default="/proc", metavar="ROOT", help="procfs root (default /proc)")
    p.add_argument("--json", action="store_true",
                   help="print a JSON list of {check, state, detail, fix}")


def run(args, out=None):
    """Prints the diagnosis of parsed `args`; returns 0 (nothing MISSING) or 1.
    Raises UsageError (a ValueError) for a bad TARGET."""
    out = out or sys.stdout
    results = diagnose(args.target, Roots(args.sysfs, args.dev, args.proc))
    status = exit_status(results)
    if args.json:
        doc = results + [_result("nvme controller", INFO, NOT_BUILT)]
        out.write(json.dumps(doc, indent=2) + "\n")
    else:
        out.write(render(results) + "\n")
        missing = sum(r["state"] == MISSING for r in results)
        out.write(f"{missing} check(s) MISSING\n" if missing else "nothing MISSING\n")
        out.write(NOT_BUILT[0].upper() + NOT_BUILT[1:] + ".\n")
    return status


def main(argv=None):
    p = argparse.ArgumentParser(prog="warpstore nvme doctor", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return run(args)
    except UsageError as e:
        sys.stderr.write(f"warpstore: error: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
