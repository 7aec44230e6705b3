"""The original Maru's metadata server over TCP, timed as maru-bench times ours.

Runs against a running original server (``python -m maru_server``, from a
checkout of the original on PYTHONPATH) with its own RPC client:
``lookup_kv`` of one registered key (p50 over one process), then the
lookups per second summed over N processes, each its own client. The key's
region is not from the original's resource manager (not built here), so
the server does the lookup of the key and of its region, and answers
without a handle: the message and the Python work of a hit, less the
serialisation of the handle.

    PYTHONPATH=ORIGINAL /usr/bin/python3 bench/original_lookup.py tcp://127.0.0.1:PORT \
        --seconds 3 --processes 4
"""

import argparse
import multiprocessing
import statistics
import time


def client(url):
    from maru_handler.rpc_client import RpcClient

    c = RpcClient(url)
    c.connect()
    return c


def latency(url, seconds):
    c = client(url)
    c.register_kv("bench/key", 1, 0, 4096)
    times = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter_ns()
        c.lookup_kv("bench/key")
        times.append((time.perf_counter_ns() - t0) / 1000.0)
    c.close()
    times.sort()
    return statistics.median(times), times[len(times) * 99 // 100]


def worker(url, seconds, start, out):
    c = client(url)
    while time.monotonic() < start:
        time.sleep(0.001)
    n = 0
    end = start + seconds
    while time.monotonic() < end:
        c.lookup_kv("bench/key")
        n += 1
    c.close()
    out.put(n / seconds)


def rate(url, seconds, processes):
    out = multiprocessing.Queue()
    start = time.monotonic() + 1.0
    ps = [multiprocessing.Process(target=worker, args=(url, seconds, start, out))
          for _ in range(processes)]
    for p in ps:
        p.start()
    total = sum(out.get() for _ in ps)
    for p in ps:
        p.join()
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--processes", type=int, default=4)
    a = ap.parse_args()
    p50, p99 = latency(a.url, a.seconds)
    print(f"original 1-key lookup p50 {p50:.1f} us p99 {p99:.1f} us")
    print(f"original {a.processes} processes {rate(a.url, a.seconds, a.processes):.0f} ops/s")


if __name__ == "__main__":
    main()
