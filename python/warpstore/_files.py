"""What a path holds, in bytes: regular files by stat, block devices by the
BLKGETSIZE64 ioctl (stat says 0 for them); anything else is refused. And
drop_pages, which takes a file's pages out of the page cache."""
import fcntl
import os
import stat
import struct
import time

# _IOR(0x12, 114, size_t) from <linux/fs.h>: the device's size in bytes.
BLKGETSIZE64 = 0x80081272


def file_size(path):
    """Bytes in `path`: a regular file or a block device.

    Raises FileNotFoundError (and other OSErrors) as os.stat does,
    IsADirectoryError for a directory, and ValueError for anything else
    (character devices, FIFOs, sockets)."""
    st = os.stat(path)
    if stat.S_ISREG(st.st_mode):
        return st.st_size
    if stat.S_ISBLK(st.st_mode):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            buf = bytearray(8)
            fcntl.ioctl(fd, BLKGETSIZE64, buf)
            return struct.unpack("=Q", bytes(buf))[0]
        finally:
            os.close(fd)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, "is a directory, not a file", os.fspath(path))
    kind = ("a character device" if stat.S_ISCHR(st.st_mode)
            else "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode)
            else "a socket" if stat.S_ISSOCK(st.st_mode)
            else "not a regular file")
    raise ValueError(f"{os.fspath(path)}: is {kind}: only regular files and block devices are "
                     f"supported")


def names_device(path):
    """Whether `path` names an NVMe device (nvme://..., any case) rather than
    a file: the library's nvme_target::names_device, which routes it to the
    nvme controller."""
    return path[:7].lower() == "nvme://"


def drop_pages(path):
    """Evicts the file's pages from the page cache: the next reads go to the
    device, as after a reboot or with a file larger than memory (pages mapped
    by a live mapping stay: unmap first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        time.sleep(0.05)  # readahead still in flight lands after the first drop
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
