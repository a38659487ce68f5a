#!/usr/bin/env python3
"""Whole-program benchmark: rttlab rr's -c/-C (CPU utilisation, service demand) against
netperf's on the same path, with the kernel's counters as the witness for both.

Alternates netperf and rttlab run by run on loopback at fixed CPU placements (-T 0,0
and -T 0,1) for TCP_RR and UDP_RR. Each run asks the tool for THROUGHPUT,
LOCAL_CPU_UTIL, REMOTE_CPU_UTIL, LOCAL_SD and REMOTE_SD. Beside it, this script reads
/proc/stat itself just before the client starts and just after it exits, and computes
the busy share of all CPUs the way proc(5) defines it (user+nice+system+irq+softirq+
steal over that plus idle+iowait): the witness. Its window is a little wider than the
tool's (process start-up and the control connection), so it reads a little lower on a
loaded run; a tool whose figure is far from it, or whose service demand is not
util × CPUs / transactions per second, is wrong.

On one host both ends share the machine, so netperf's -c and -C (both system-wide,
method "S") read the same number, and so do rttlab's.

Needs netperf built from its public source (never committed; NETPERF_DIR=its src/).
Usage: NETPERF_DIR=/path/to/netperf/src bench/rr_cpu.py [--runs 5] [--seconds 5]
"""
import argparse, os, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTTLAB = os.path.join(ROOT, "target", "release", "rttlab")
NP = os.environ.get("NETPERF_DIR", "")
SELECT = "THROUGHPUT,LOCAL_CPU_UTIL,REMOTE_CPU_UTIL,LOCAL_SD,REMOTE_SD"


def proc_stat():
    """(busy, total) jiffies of all CPUs, and the number of CPUs."""
    lines = open("/proc/stat").read().splitlines()
    v = [int(x) for x in lines[0].split()[1:]]
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
    cpus = sum(1 for l in lines if l.startswith("cpu") and l[3:4].isdigit())
    return busy, busy + v[3] + v[4], cpus


def run(tool, test, cpus, secs):
    if tool == "rttlab":
        argv = [RTTLAB, "rr", "-H", "127.0.0.1", "-t", test, "-l", str(secs), "-T", cpus, "-c", "-C", "-o", SELECT]
    else:
        argv = [os.path.join(NP, "netperf"), "-H", "127.0.0.1", "-p", "12865", "-t", test, "-l", str(secs), "-T", cpus,
                "-c", "-C", "-P", "0", "--", "-o", SELECT]
    b0, t0, n = proc_stat()
    start = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True)
    wall = time.monotonic() - start
    b1, t1, _ = proc_stat()
    if p.returncode != 0:
        sys.exit(f"{tool} failed: {p.stderr.strip()}")
    tps, lu, ru, lsd, rsd = map(float, p.stdout.strip().splitlines()[-1].split(","))
    witness = 100.0 * (b1 - b0) / (t1 - t0)
    # How much of the wall time the kernel's tick accounting covered (1.0 when no tick
    # was lost): the busy ticks and netperf's util × CPUs × elapsed differ by this.
    covered = (t1 - t0) / os.sysconf("SC_CLK_TCK") / (n * wall)
    # The service demand the tool's own util and rate imply (netperf's definition:
    # util × CPUs / transactions per second, in µs of CPU per transaction).
    implied = lu / 100.0 * n / tps * 1e6
    return dict(tps=tps, lu=lu, ru=ru, lsd=lsd, rsd=rsd, witness=witness, implied=implied, wall=wall, covered=covered)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "RESULTS-rr-cpu.md"))
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
        for test in ("TCP_RR", "UDP_RR"):
            for cpus in ("0,0", "0,1"):
                got = {"netperf": [], "rttlab": []}
                for _ in range(a.runs):
                    for tool in ("netperf", "rttlab"):
                        got[tool].append(run(tool, test, cpus, a.seconds))
                for tool in ("netperf", "rttlab"):
                    med = {k: statistics.median(r[k] for r in got[tool]) for k in got[tool][0]}
                    # Per run: how far the tool's util is from the witness, and its SD from
                    # the SD its own util and rate imply.
                    dev = statistics.median(abs(r["lu"] - r["witness"]) for r in got[tool])
                    sd_err = max(abs(r["lsd"] / r["implied"] - 1) for r in got[tool]) * 100
                    rows.append((test, cpus, tool, med, dev, sd_err))
    finally:
        for p in servers:
            p.kill(); p.wait()
    with open(a.out, "w") as f:
        f.write("# rttlab rr -c/-C against netperf -c/-C\n\n")
        f.write(f"Recorded by `bench/rr_cpu.py --runs {a.runs} --seconds {a.seconds}` on {time.strftime('%Y-%m-%d')}, "
                f"kernel {os.uname().release}, {os.cpu_count()} vCPUs, on loopback. netperf 2.7.x built from its public source. "
                "Medians of the alternating runs. `witness %` is the busy share of all CPUs from /proc/stat read by this script "
                "just before the client started and just after it exited; `|util − witness|` is the median per-run distance; "
                "`SD vs util×CPUs/rate` is the largest per-run relative difference between the reported LOCAL_SD and the one "
                "the tool's own util and transaction rate imply (netperf's definition of service demand); `ticks/wall` is the share "
                "of the client's wall time × CPUs that /proc/stat's ticks covered (below 1 when the kernel's tick accounting "
                "lost time, as it does on this VM under cross-CPU wake-ups: busy ticks ÷ transactions then reads lower than "
                "netperf's service demand).\n\n")
        f.write("| test | -T | tool | trans/s | LOCAL_CPU_UTIL % | REMOTE_CPU_UTIL % | witness % | \\|util − witness\\| | "
                "LOCAL_SD µs/tran | REMOTE_SD µs/tran | SD vs util×CPUs/rate % | ticks/wall | SD ratio rttlab/netperf |\n")
        f.write("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
        for i, (test, cpus, tool, m, dev, sd_err) in enumerate(rows):
            ratio = ""
            if tool == "rttlab":
                ratio = f"{m['lsd'] / rows[i - 1][3]['lsd']:.3f}"
            f.write(f"| {test} | {cpus} | {tool} | {m['tps']:.0f} | {m['lu']:.2f} | {m['ru']:.2f} | {m['witness']:.2f} | "
                    f"{dev:.2f} | {m['lsd']:.2f} | {m['rsd']:.2f} | {sd_err:.2f} | {m['covered']:.3f} | {ratio} |\n")
    print(open(a.out).read())


if __name__ == "__main__":
    main()
