"""Opening a real NVMe device (controller="nvme", an nvme:// path): on a
machine without the device and without VFIO (this one), the open fails
loudly, naming the address and the missing piece, and leaves nothing open.
Nothing here reaches a real device."""
import os

import numpy as np
import pytest

import warpstore
from conftest import SMALL, write

ADDRESS = "0000:65:00.0"
absent = pytest.mark.skipif(os.path.exists(f"/sys/bus/pci/devices/{ADDRESS}"),
                            reason=f"this machine has a PCI function at {ADDRESS}")


def open_fds():
    return len(os.listdir("/proc/self/fd"))


@absent
@pytest.mark.parametrize("controller", [None, "auto", "nvme"])
@pytest.mark.parametrize("path", [f"nvme://{ADDRESS}", f"nvme://{ADDRESS}/ns2"])
def test_opening_a_device_without_vfio_names_the_address(path, controller):
    before = open_fds()
    with pytest.raises(RuntimeError) as e:
        warpstore.open(path, "float32", (1024, 128), controller=controller, **SMALL)
    m = str(e.value)
    assert f"{ADDRESS}: no such PCI device" in m and f"/sys/bus/pci/devices/{ADDRESS}" in m
    assert e.value.path == ADDRESS and e.value.kind == "runtime"
    assert open_fds() == before


@absent
def test_the_controller_setting_picks_nvme_too():
    warpstore.settings.set("controller", "nvme")
    try:
        with pytest.raises(RuntimeError, match=ADDRESS):
            warpstore.open(f"nvme://{ADDRESS}", "float32", 1024, **SMALL)
    finally:
        warpstore.settings.reset()


def test_a_device_needs_the_row_count():
    for shape in (None, -1, (-1, 4)):
        with pytest.raises(ValueError, match="needs its shape with the row count"):
            warpstore.open(f"nvme://{ADDRESS}", "float32", shape)


def test_bad_nvme_paths_are_refused():
    with pytest.raises(ValueError, match="/ns<N>"):
        warpstore.open(f"nvme://{ADDRESS}/ns0", "float32", 1024, **SMALL)
    with pytest.raises(ValueError, match="PCI address"):
        warpstore.open("nvme://0000:65:00.9", "float32", 1024, **SMALL)


def test_controllers_and_paths_that_do_not_go_together(tmp_path):
    for c in ("host", "memory", "nvme-model"):
        with pytest.raises(ValueError, match=f"names an NVMe device.*not controller={c}"):
            warpstore.open(f"nvme://{ADDRESS}", "float32", 1024, controller=c, **SMALL)
    path = write(tmp_path / "a.f32", np.zeros(1024, np.float32))
    with pytest.raises(ValueError, match="controller=nvme drives an NVMe device"):
        warpstore.open(path, "float32", controller="nvme", **SMALL)
