#!/usr/bin/env python3
"""Store and load of 32 MiB chunks through two builds of Maru, in turns,
on each kind of pool, beside plain copies (bench/store_load.c).

    bench/store-load.py OLD_BUILD NEW_BUILD [--rounds R] [--chunks N]

For each pool kind -- a file in /dev/shm (4 KiB pages), a file on a
tmpfs mounted huge=always, a file on hugetlbfs (2 MiB pages; root, and
enough free huge pages: vm.nr_hugepages) -- and each round, each build
(going first every other round) formats a 2 GiB pool with its own
maructl, starts its own maru-server, and runs the client built against
its own libmaru_direct twice: filling chunks with memcpy into
maru_chunk_data(), and with maru_write_from_batch(). N chunks are kept,
so past ~60 every create evicts. The tmpfs and hugetlbfs mounts are made
here, on directories of their own, and unmounted at the end; nothing
else of the system is changed. Prints a Markdown table of medians over
the rounds; ratios are a copy's time over the path's (1.00: as fast).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
POOL = 2 << 30
COLUMNS = [("create", "create_ms", "{:.3f}"), ("fill", "fill_ms", "{:.2f}"),
           ("seal", "seal_ms", "{:.3f}"), ("store ÷ memcpy hot", "store_vs_memcpy_hot", "{:.2f}"),
           ("store ÷ memcpy to uncached", "store_vs_memcpy_to_uncached", "{:.2f}"),
           ("open", "open_ms", "{:.3f}"), ("copy out", "copy_out_ms", "{:.2f}"),
           ("load ÷ memcpy hot", "load_vs_memcpy_hot", "{:.2f}"),
           ("load ÷ memcpy from uncached", "load_vs_memcpy_from_uncached", "{:.2f}"),
           ("memcpy hot / to / from uncached", None, None)]


def free_huge_pages() -> int:
    for line in open("/proc/meminfo"):
        if line.startswith("HugePages_Free:"):
            return int(line.split()[1])
    return 0


def build_client(build: Path, out: Path) -> None:
    lib = build / "libmaru_direct"
    subprocess.run(["cc", "-O2", "-o", str(out), str(REPO / "bench" / "store_load.c"),
                    f"-I{REPO / 'libmaru_direct'}", f"-L{lib}", f"-Wl,-rpath,{lib}",
                    "-lmaru_direct"], check=True)


def run_one(build: Path, client: Path, pool: str, work: Path, chunks: int,
            fill: str) -> Optional[Dict]:
    """Formats `pool` with the build's maructl, serves it with its server,
    runs the client; None if this build cannot format such a pool."""
    fmt = subprocess.run([str(build / "tools" / "maructl"), "mkpool", pool, "--size", str(POOL),
                          "--force"], capture_output=True, text=True)
    if fmt.returncode != 0:
        if os.path.exists(pool):
            os.unlink(pool)
        return None
    db, sock = work / "db", work / "s.sock"
    subprocess.run(["rm", "-rf", str(db)], check=True)
    log = open(work / "server.log", "w")
    server = subprocess.Popen([str(build / "src" / "meta" / "maru-server"), "--pool", pool,
                               "--db", str(db), "--listen", f"unix://{sock}", "--log-level",
                               "warn"], stdout=log, stderr=log)
    try:
        for _ in range(400):
            if sock.exists():
                break
            time.sleep(0.025)
        out = subprocess.run([str(client), f"unix://{sock}", str(chunks), "32", fill],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    finally:
        server.terminate()
        server.wait()
        log.close()
        for p in (pool, pool + ".index"):
            if os.path.exists(p):
                os.unlink(p)


def row(kind: str, name: str, fill: str, runs: List[Dict]) -> str:
    if not runs:
        return f"| {kind} | {name} | {fill} | " + " | ".join("—" for _ in COLUMNS) + " |"
    cells = []
    for _, key, fmt in COLUMNS:
        if key is None:
            m = [statistics.median(r[k] for r in runs)
                 for k in ("memcpy_hot_ms", "memcpy_to_uncached_ms", "memcpy_from_uncached_ms")]
            cells.append(" / ".join(f"{v:.2f}" for v in m))
        else:
            cells.append(fmt.format(statistics.median(r[key] for r in runs)))
    return f"| {kind} | {name} | {fill} | " + " | ".join(cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunks", type=int, default=80)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="maru-store-load."))
    mounts: List[Path] = []
    kinds = {"/dev/shm (4 KiB pages)": f"/dev/shm/maru-store-load-{os.getpid()}.pool"}
    try:
        if os.geteuid() == 0:
            for name, fstype, opts in (("huge", "tmpfs", "huge=always,size=3g"),
                                       ("hugetlb", "hugetlbfs", "pagesize=2M")):
                if fstype == "hugetlbfs" and free_huge_pages() < POOL // (2 << 20) + 8:
                    print(f"(no hugetlbfs row: {free_huge_pages()} free huge pages)")
                    continue
                point = work / name
                point.mkdir()
                subprocess.run(["mount", "-t", fstype, "-o", opts, "maru-bench", str(point)],
                               check=True)
                mounts.append(point)
                label = ("tmpfs huge=always (2 MiB pages)" if fstype == "tmpfs"
                         else "hugetlbfs (2 MiB pages)")
                kinds[label] = str(point / "pool")
        builds = {"old": args.old.resolve(), "new": args.new.resolve()}
        clients = {}
        for name, build in builds.items():
            clients[name] = work / f"client-{name}"
            build_client(build, clients[name])
        results: Dict[tuple, List[Dict]] = {}
        for r in range(args.rounds):
            for kind, pool in kinds.items():
                order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
                for name in order:
                    for fill in ("memcpy", "write_from"):
                        got = run_one(builds[name], clients[name], pool, work, args.chunks, fill)
                        results.setdefault((kind, name, fill), [])
                        if got:
                            results[(kind, name, fill)].append(got)
        print(f"Made by `bench/store-load.py {args.old} {args.new} --rounds {args.rounds} "
              f"--chunks {args.chunks}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
              f"load average {os.getloadavg()[0]:.2f}. Medians of {args.rounds} rounds, each "
              f"the median of {args.chunks} chunks of 32 MiB; times in ms.\n")
        print("| pool | build | fill | " + " | ".join(c for c, _, _ in COLUMNS) + " |")
        print("|" + "---|" * (3 + len(COLUMNS)))
        for kind in kinds:
            for name in ("old", "new"):
                for fill in ("memcpy", "write_from"):
                    print(row(kind, name, fill, results.get((kind, name, fill), [])))
    finally:
        for point in mounts:
            subprocess.run(["umount", "-l", str(point)])
        subprocess.run(["rm", "-rf", str(work)])


if __name__ == "__main__":
    main()
