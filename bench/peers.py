#!/usr/bin/env python3
"""rttlab's hot paths against the fastest peer doing the same job, in one run,
alternated pair by pair, medians: the table of issue 45 ("At the floor").

    sudo bench/peers.py [--pairs 5] [--seconds 3] [--capture FILE] [--out FILE]

Peers: netperf 2.7 built from its public source into a scratch folder (never
committed): NETPERF_DIR=its src/ with netperf and netserver built, or NETPERF_SRC=a
checkout of github.com/HewlettPackard/netperf, built here into /tmp/peers/netperf
(CFLAGS=-fcommon, which GCC 10 and later need for its common symbols); iputils ping
and tcpdump from Debian; ePPing (xdp-project/bpf-examples, pping/) when EPPING names
its binary. Rows:

- TCP_RR and UDP_RR on loopback at -T 0,0 and -T 0,1: the mean latency each reports
  (rttlab rr -o MEAN_LATENCY, netperf -o MEAN_LATENCY), rttlab/netperf: ≤ 1.00 is the
  goal;
- passive TS on a multi-million-packet capture (bench/big_capture.sh makes one):
  `rttlab passive -r FILE --method ts -q --summary` against `tcpdump -r FILE -w
  /dev/null`, the bare read: wall time rttlab/tcpdump, goal ≤ 1.00, and rttlab's
  packets a second;
- ping flood on loopback, `-f -w 1`: replies in the second, rttlab/iputils, goal ≥ 1.00;
- `rr --anatomy` against plain `rr` (TCP_RR -T 0,0, transactions a second), goal within
  5 % of the kernel's own cost of stamping (0.920 without TX stamps, 0.933 with BPF TX
  stamps, the anatomy issue's measurement);
- rttlab's in-kernel passive engine against ePPing (xdp-project/bpf-examples, pping/,
  built as bench/passive_bpf.py says; EPPING names its folder, /tmp/peers/bpf-examples/pping
  by default) on passive_bpf.py's forwarding path, both timing every sample and printing
  pping's lines: the engine's user-space CPU per line written, rttlab/ePPing, goal ≤ 1.00.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTTLAB = os.path.join(ROOT, "target", "release", "rttlab")
SCRATCH = "/tmp/peers"


def netperf_dir():
    """netperf's src/ with netperf and netserver: NETPERF_DIR, or built from NETPERF_SRC."""
    d = os.environ.get("NETPERF_DIR")
    if d:
        return d
    src = os.environ.get("NETPERF_SRC")
    if not src:
        sys.exit("peers.py: set NETPERF_DIR (a built netperf src/) or NETPERF_SRC (a checkout "
                 "of github.com/HewlettPackard/netperf to build in /tmp/peers/netperf)")
    out = os.path.join(SCRATCH, "netperf")
    if not os.path.exists(os.path.join(out, "src", "netperf")):
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(src, out, ignore=shutil.ignore_patterns(".git"))
        env = dict(os.environ, CFLAGS="-fcommon -O2")
        for step in (["./autogen.sh"] if not os.path.exists(os.path.join(out, "configure")) else []) + \
                [["./configure", "--enable-demo=no"], ["make", "-j2"]]:
            subprocess.run(step if isinstance(step, list) else [step], cwd=out, env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return os.path.join(out, "src")


def alternate(pairs, run, names):
    """Each of `names` run once a pair, the order reversed every other pair."""
    got = {n: [] for n in names}
    for i in range(pairs):
        for n in (names if i % 2 == 0 else names[::-1]):
            got[n].append(run(n))
    return got


def rr_mean(np_dir, test, cpus, secs):
    def run(tool):
        if tool == "rttlab":
            argv = [RTTLAB, "rr", "-H", "127.0.0.1", "-t", test, "-l", str(secs), "-T", cpus,
                    "-o", "MEAN_LATENCY"]
        else:
            argv = [os.path.join(np_dir, "netperf"), "-H", "127.0.0.1", "-p", "12865", "-t", test,
                    "-l", str(secs), "-T", cpus, "-P", "0", "--", "-o", "MEAN_LATENCY"]
        out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=secs + 30).stdout
        return float(out.strip().splitlines()[-1].split(",")[0])
    return run


def passive_vs_bare(capture):
    def run(tool):
        argv = [RTTLAB, "passive", "-r", capture, "--method", "ts", "-q", "--summary"] if tool == "rttlab" \
            else ["tcpdump", "-r", capture, "-w", "/dev/null"]
        t0 = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True, timeout=300)
        return time.perf_counter() - t0
    return run


def packets(capture):
    out = subprocess.run(["tcpdump", "-r", capture, "-w", "/dev/null", "-c", str(10**9)],
                         capture_output=True, text=True).stderr
    m = re.search(r"(\d+) packets? captured", out)
    if m:
        return int(m.group(1))
    return sum(1 for _ in subprocess.run(["tcpdump", "-r", capture, "-nq"], capture_output=True,
                                         text=True).stdout.splitlines())


def flood(tool):
    argv = ([RTTLAB, "ping"] if tool == "rttlab" else ["ping"]) + ["-f", "-w", "1", "-q", "127.0.0.1"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
    return int(re.search(r"(\d+) (packets )?received", out).group(1))


def anatomy(secs):
    def run(which):
        argv = [RTTLAB, "rr", "-H", "127.0.0.1", "-l", str(secs), "-T", "0,0", "--json"]
        if which == "anatomy":
            argv.insert(2, "--anatomy")
        o = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=secs + 30).stdout
        return json.loads(o)["transactions"] / secs
    return run


def epping_per_line(pairs, epping):
    """User-space CPU per printed line, rttlab's in-kernel engine and ePPing, every sample,
    on bench/passive_bpf.py's path (its set-up, sender and runs; 500 000 frames a run)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import passive_bpf as pb
    cfgs = {c[0]: c for c in pb.configs(epping)}
    names = {"rttlab": "rttlab bpf, every sample", "ePPing": "ePPing, every sample"}
    opts = argparse.Namespace(packets=500_000, flows=1024, rate=250_000)
    work = os.path.join(SCRATCH, "blast")
    os.makedirs(work, exist_ok=True)
    blast = os.path.join(work, "tcp_blast")
    pb.sh("cc", "-O2", "-Wall", "-o", blast, os.path.join(ROOT, "bench", "tcp_blast.c"))
    pb.setup()
    try:
        def run(tool):
            r = pb.run(cfgs[names[tool]], opts, blast, epping, False)
            if r["lines"] == 0 or r["forwarded"] < r["frames"]:
                raise SystemExit(f"peers.py: {tool} wrote {r['lines']} lines, forwarded "
                                 f"{r['forwarded']} of {r['frames']} frames")
            return r["user_ns"] * r["frames"] / r["lines"]
        return alternate(pairs, run, ["rttlab", "ePPing"])
    finally:
        pb.teardown()
        if os.path.exists(pb.OUT):
            os.unlink(pb.OUT)


def row(job, peer, unit, got, a, b, goal, better_low=True):
    ma, mb = statistics.median(got[a]), statistics.median(got[b])
    ratios = [x / y for x, y in zip(got[a], got[b])]
    ratio = ma / mb
    met = ratio <= goal if better_low else ratio >= goal
    return (f"| {job} | {peer} | {ma:.4g} / {mb:.4g} {unit} | **{ratio:.3f}** "
            f"({min(ratios):.3f}–{max(ratios):.3f}) | {'≤' if better_low else '≥'} {goal:.2f}: "
            f"{'met' if met else 'not met'} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--capture", default=os.path.join(ROOT, "target", "against", "big.pcap"))
    ap.add_argument("--out", help="also write the table here (markdown)")
    a = ap.parse_args()
    if a.pairs < 1 or a.seconds < 1:
        sys.exit("peers.py: --pairs and --seconds must be at least 1")
    if not os.path.exists(RTTLAB):
        sys.exit(f"peers.py: no {RTTLAB}: cargo build --release first")
    if not os.path.exists(a.capture):
        sys.exit(f"peers.py: no capture {a.capture}: SNAPLEN=128 bench/big_capture.sh {a.capture} {RTTLAB}")
    np_dir = netperf_dir()
    servers = [subprocess.Popen([RTTLAB, "serve", "-q", "--listen", "127.0.0.1:12866"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
               subprocess.Popen([os.path.join(np_dir, "netserver"), "-D", "-p", "12865", "-L", "127.0.0.1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    time.sleep(1.0)
    load = os.getloadavg()
    rows = []
    try:
        for test in ("TCP_RR", "UDP_RR"):
            for cpus in ("0,0", "0,1"):
                got = alternate(a.pairs, rr_mean(np_dir, test, cpus, a.seconds), ["rttlab", "netperf"])
                rows.append(row(f"{test} mean latency, loopback, -T {cpus}", "netperf 2.7 (source)", "µs",
                                got, "rttlab", "netperf", 1.0))
        got = alternate(a.pairs, passive_vs_bare(a.capture), ["rttlab", "tcpdump"])
        n = packets(a.capture)
        rows.append(row(f"passive TS, {n / 1e6:.2f} M packets "
                        f"({n / statistics.median(got['rttlab']) / 1e6:.1f} M packets/s)",
                        "tcpdump -r -w /dev/null", "s", got, "rttlab", "tcpdump", 1.0))
        got = alternate(a.pairs, flood, ["rttlab", "iputils"])
        rows.append(row("ping -f -w 1, loopback: replies", "iputils ping", "replies", got, "rttlab", "iputils",
                        1.0, better_low=False))
        got = alternate(a.pairs, anatomy(a.seconds), ["anatomy", "plain"])
        rows.append(row("rr --anatomy / rr, TCP_RR -T 0,0", "the kernel's stamping: 0.920–0.933", "transactions/s",
                        got, "anatomy", "plain", 0.920 * 0.95, better_low=False))
    finally:
        for p in servers:
            p.kill()
            p.wait()
    epping = os.environ.get("EPPING", os.path.join(SCRATCH, "bpf-examples", "pping"))
    if os.path.exists(os.path.join(epping, "pping_kern.o")):
        got = epping_per_line(a.pairs, epping)
        rows.append(row("in-kernel passive, every sample, pping's lines: user space a line",
                        "ePPing (source)", "ns", got, "rttlab", "ePPing", 1.0))
    else:
        rows.append(f"| in-kernel passive, user space a line | ePPing | not measured: no ePPing in {epping} "
                    "(build pping/ of xdp-project/bpf-examples, see bench/passive_bpf.py) | | |")
    text = "\n".join([
        f"`bench/peers.py --pairs {a.pairs} --seconds {a.seconds}` on {time.strftime('%Y-%m-%d %H:%M')}, "
        f"kernel {os.uname().release}, {os.cpu_count()} vCPUs, load average {load[0]:.2f} before; "
        "rttlab first in even pairs, the peer first in odd ones; medians, and the range of the "
        "pairs' ratios.",
        "",
        "| job | peer | rttlab / peer (medians) | ratio | goal |",
        "|---|---|---|---|---|",
        *rows,
    ])
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
