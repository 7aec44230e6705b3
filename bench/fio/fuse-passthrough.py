#!/usr/bin/env python3
"""What FUSE passthrough (kernel 6.9+) would give one fio job of 4 KiB
random reads, beside tmpfs and beside a daemon that serves every READ.

A minimal FUSE daemon on raw /dev/fuse (libfuse 3.14 cannot ask for
passthrough) serves one file, /data, backed by a 256 MiB file on tmpfs:
with FUSE_PASSTHROUGH the kernel reads the backing file itself and the
daemon sees no READ; without it, each READ comes to the daemon (pread).
Root only (the backing file is registered with FUSE_DEV_IOC_BACKING_OPEN).

    bench/fio/fuse-passthrough.py [ROUNDS]

Prints, per round, tmpfs IOPS and each mode's IOPS and ratio to it.
Passthrough maps a FUSE file onto a whole backing file, offset for offset:
a Maru chunk is a range of the pool file, so maru-fuse cannot use it as
the kernel offers it (docs/filesystem.md, "Small reads").
"""
import ctypes
import errno
import json
import os
import struct
import subprocess
import sys
import tempfile
import time


def serve(mnt: str, backing: str, mode: str) -> None:
    """Mounts at `mnt` and serves until unmounted."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/dev/fuse", os.O_RDWR)
    opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other".encode()
    if libc.mount(b"ptfs", mnt.encode(), b"fuse.ptfs", 0, opts) != 0:
        raise OSError(ctypes.get_errno(), "mount")
    bfd = os.open(backing, os.O_RDWR)
    size = os.fstat(bfd).st_size
    backing_id = 0

    def attr(ino):
        mode_ = 0o40755 if ino == 1 else 0o100644
        sz = 0 if ino == 1 else size
        return struct.pack("<QQQQQQIIIIIIIIII", ino, sz, (sz + 511) // 512, 0, 0, 0, 0, 0, 0,
                           mode_, 1, 0, 0, 0, 4096, 0)

    def reply(unique, err=0, body=b""):
        os.write(fd, struct.pack("<IiQ", 16 + len(body), -err, unique) + body)

    while True:
        try:
            buf = os.read(fd, 1 << 21)
        except OSError as e:
            if e.errno in (errno.ENODEV,):
                break
            if e.errno == errno.EINTR:
                continue
            raise
        ln, op, unique, nodeid = struct.unpack_from("<IIQQ", buf, 0)
        arg = buf[40:ln]
        if op == 26:  # INIT
            major, minor, ra, flags, flags2 = struct.unpack_from("<IIIII", arg, 0)
            want = (1 << 0) | (1 << 5) | (1 << 22) | (1 << 30)  # ASYNC_READ BIG_WRITES MAX_PAGES INIT_EXT
            want2 = (1 << 5) if mode == "passthrough" else 0  # PASSTHROUGH (bit 37)
            body = struct.pack("<IIIIHHIIHHIIH", 7, 45, ra, flags & want, 16, 12, 1 << 20, 1, 256, 0,
                               flags2 & want2, 1 if mode == "passthrough" else 0, 0) + b"\0" * 22
            reply(unique, 0, body)
            if mode == "passthrough":
                arg_map = struct.pack("<iIQ", bfd, 0, 0)
                m = ctypes.create_string_buffer(arg_map)
                backing_id = libc.ioctl(fd, 0x4010E501, m)
                if backing_id < 0:
                    raise OSError(ctypes.get_errno(), "FUSE_DEV_IOC_BACKING_OPEN")
        elif op == 1:  # LOOKUP
            name = arg.split(b"\0")[0]
            if nodeid == 1 and name == b"data":
                reply(unique, 0, struct.pack("<QQQQII", 2, 0, 3600, 3600, 0, 0) + attr(2))
            else:
                reply(unique, errno.ENOENT)
        elif op == 3:  # GETATTR
            reply(unique, 0, struct.pack("<QII", 3600, 0, 0) + attr(nodeid))
        elif op == 14:  # OPEN
            if mode == "passthrough":
                reply(unique, 0, struct.pack("<QIi", 0, 1 << 7, backing_id))  # FOPEN_PASSTHROUGH
            else:
                reply(unique, 0, struct.pack("<QIi", 0, 1 << 0, 0))  # FOPEN_DIRECT_IO
        elif op == 15:  # READ
            fh, off, n = struct.unpack_from("<QQI", arg, 0)
            reply(unique, 0, os.pread(bfd, n, off))
        elif op in (18, 29):  # RELEASE, RELEASEDIR
            reply(unique)
        elif op == 27:  # OPENDIR
            reply(unique, 0, struct.pack("<QIi", 0, 0, 0))
        elif op in (2, 42):  # FORGET: no reply
            pass
        elif op == 38:  # DESTROY
            reply(unique)
            break
        else:
            reply(unique, errno.ENOSYS)


def fio_iops(path: str) -> float:
    out = subprocess.run(["fio", "--name=r", f"--filename={path}", "--rw=randread", "--bs=4k",
                          "--ioengine=psync", "--size=256M", "--runtime=5", "--time_based",
                          "--invalidate=1", "--output-format=json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["jobs"][0]["read"]["iops"]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    tmp = tempfile.mkdtemp(prefix="maru-passthrough.", dir="/dev/shm")
    mnt = tempfile.mkdtemp(prefix="maru-passthrough-mnt.")
    data = os.path.join(tmp, "data")
    try:
        with open(data, "wb") as f:
            for _ in range(256):
                f.write(os.urandom(1 << 20))
        print("| round | tmpfs | passthrough (×tmpfs) | daemon serves READ (×tmpfs) |")
        print("|---|---|---|---|")
        for r in range(1, rounds + 1):
            cells = []
            base = fio_iops(data)
            for mode in ("passthrough", "daemon"):
                daemon = subprocess.Popen([sys.executable, __file__, "--serve", mnt, data, mode])
                for _ in range(100):
                    if os.path.ismount(mnt):
                        break
                    time.sleep(0.05)
                iops = fio_iops(os.path.join(mnt, "data"))
                subprocess.run(["umount", mnt], check=True)
                daemon.wait()
                cells.append(f"{iops:.0f} IOPS ({iops / base:.3f}×)")
            print(f"| {r} | {base:.0f} IOPS | {cells[0]} | {cells[1]} |")
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["umount", "-l", mnt])
        os.rmdir(mnt)
        os.unlink(data)
        os.rmdir(tmp)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        serve(*sys.argv[2:])
    else:
        main()
