#!/usr/bin/env python3
"""Whole-program benchmark: what `rr --anatomy` costs (issue 14, item 7).

Alternates, run by run, on loopback with both ends on CPU 0 (-T 0,0, where a
transaction is shortest and the stamps' cost weighs most), then on two CPUs (-T 0,1):
netperf TCP_RR, rttlab rr
without --anatomy and rttlab rr --anatomy, each with 1-byte requests and 40-byte
responses (--anatomy's responses carry the server's stamps, so every tool sends the
same bytes). Then the same for UDP_RR. Reports medians of the runs' transactions/s and
mean round trip, and the ratios anatomy/plain (targets: ≥ 0.90 of the transactions/s,
mean within 5 %).

Needs netperf built from its public source (never committed; NETPERF_DIR=its src/).
Usage: NETPERF_DIR=/path/to/netperf/src bench/anatomy_overhead.py [--runs 7] [--seconds 3]
"""
import argparse, os, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTTLAB = os.path.join(ROOT, "target", "release", "rttlab")
NP = os.environ.get("NETPERF_DIR", "")


def rttlab(test, secs, anatomy, cpus):
    argv = [RTTLAB, "rr", "-H", "127.0.0.1", "-t", test, "-r", "1,40", "-l", str(secs), "-T", cpus,
            "-o", "THROUGHPUT,MEAN_LATENCY"]
    if anatomy:
        argv.insert(2, "--anatomy")
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return tuple(map(float, out.strip().splitlines()[-1].split(",")))


def netperf(test, secs, cpus):
    argv = [os.path.join(NP, "netperf"), "-H", "127.0.0.1", "-p", "12865", "-t", test, "-l", str(secs), "-T", cpus,
            "-P", "0", "--", "-r", "1,40", "-o", "THROUGHPUT,MEAN_LATENCY"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return tuple(map(float, out.strip().splitlines()[-1].split(",")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "RESULTS-anatomy.md"))
    a = ap.parse_args()
    if not NP or not os.path.exists(os.path.join(NP, "netperf")):
        sys.exit("set NETPERF_DIR to a directory holding netperf and netserver (built from its public source)")
    servers = [
        subprocess.Popen([RTTLAB, "serve", "-q", "--listen", "127.0.0.1:12866"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([os.path.join(NP, "netserver"), "-D", "-p", "12865", "-L", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    time.sleep(1.0)
    rows = []
    try:
        for cpus in ("0,0", "0,1"):
            for test in ("TCP_RR", "UDP_RR"):
                got = {"netperf": [], "rttlab": [], "rttlab --anatomy": []}
                for _ in range(a.runs):
                    got["netperf"].append(netperf(test, a.seconds, cpus))
                    got["rttlab"].append(rttlab(test, a.seconds, False, cpus))
                    got["rttlab --anatomy"].append(rttlab(test, a.seconds, True, cpus))
                med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in got.items()}
                rows.append((f"{test} -T {cpus}", med))
    finally:
        for p in servers:
            p.kill(); p.wait()
    with open(a.out, "w") as f:
        f.write("# What `rr --anatomy` costs\n\n")
        f.write(f"Recorded by `bench/anatomy_overhead.py --runs {a.runs} --seconds {a.seconds}` on {time.strftime('%Y-%m-%d')}, "
                f"kernel {os.uname().release}, {os.cpu_count()} vCPUs. Loopback, -T 0,0 and 0,1, `-r 1,40` for every tool "
                "(--anatomy's responses carry the server's stamps in 40 bytes). Medians of alternating runs; netperf 2.7.x "
                "built from its public source.\n\n")
        f.write("| test | tool | trans/s | mean µs | trans/s vs rttlab | mean vs rttlab |\n|---|---|---:|---:|---:|---:|\n")
        for test, med in rows:
            base = med["rttlab"]
            for tool, (tps, mean) in med.items():
                f.write(f"| {test} | {tool} | {tps:.0f} | {mean:.2f} | {tps / base[0]:.3f} | {mean / base[1]:.3f} |\n")
        f.write("\nTargets (issue 14): --anatomy keeps ≥ 0.90 of the transactions/s and the mean round trip within 5 % of a run without it.\n")
        f.write("\nWhere the cost is (measured with `perf stat -a -e context-switches,syscalls:sys_enter_recvmsg,...` over 100 000 UDP_RR "
                "transactions at -T 0,0): the same 2 context switches a transaction with and without --anatomy, and 6 system calls "
                "instead of 4 — the two error-queue reads that fetch the TX stamps (each end reads until the stamps due have come, "
                "never once more to find the queue empty) — plus the kernel's queuing of each TX stamp (a socket buffer put on "
                "the error queue, and its wake-up). That is 3–5 µs a transaction: a large share of a 15–20 µs transaction on one "
                "vCPU, a few per cent of one that crosses CPUs or a network. What else --anatomy does per transaction is "
                "cheap beside it: three `getcpu` calls (vDSO, no system call) for the migration events, and a histogram and "
                "a round-trip band to add to.\n")
        f.write("\nTried and not kept: reading each end's error queue with one `recvmmsg` (4 entries) instead of a `recvmsg` a "
                "stamp, which takes TCP_RR's SND and ACK stamps in one system call. Alternated five times with the build "
                "without it (TCP_RR and UDP_RR --anatomy at -T 0,0, 3 s each) it moved TCP_RR by +0.9 % and UDP_RR by -2.9 % "
                "of the transactions/s (medians): no win, so the code stays simple. `perf record -a` over the same runs "
                "finds the cost spread over the stamping machinery (skb allocation and freeing for each stamp, put_cmsg, "
                "the recvmsg path, the clock reads), with no one place to cut. What the cheapest other way (the kernel's BPF "
                "timestamping) would cost, and what the anatomy costs without any TX stamp: "
                "[RESULTS-anatomy-ceiling.md](RESULTS-anatomy-ceiling.md).\n")
    print(open(a.out).read())


if __name__ == "__main__":
    main()
