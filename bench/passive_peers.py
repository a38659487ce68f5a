#!/usr/bin/env python3
"""rttlab passive against pping, tcptrace, tshark and tcpdump on one multi-million-packet
capture, from the page cache, alternated, medians of wall time and of peak RSS.

Usage: sudo bench/passive_peers.py [--capture FILE] [--seconds 18] [--runs 5]

Without --capture it first records one (not committed): a lab (`rttlab lab up
--emulator poll`, no impairment) carrying two iperf3 bulk streams, a TCP_RR stream and a
TCP_CRR stream at once, captured on the router with snap length 128 (tcpdump -i any,
Linux cooked v1 so that every peer can read it).
pping is not packaged: build it from github.com/pollere/pping (libtins-dev) and give
its path in PPING (default /tmp/peers/pping/pping); its code is never committed.
tshark runs once (it is ~100× slower); the others --runs times each.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTTLAB = os.path.join(ROOT, "target", "release", "rttlab")
PPING = os.environ.get("PPING", "/tmp/peers/pping/pping")
LAB = "pbench"


def ns(node, *args, **kw):
    return subprocess.Popen(["ip", "netns", "exec", f"rttlab-lab-{LAB}-{node}", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)


def record(path, seconds):
    subprocess.run([RTTLAB, "lab", "down", "--name", LAB], capture_output=True)
    subprocess.run([RTTLAB, "lab", "up", "--name", LAB, "--emulator", "poll"], check=True, stdout=subprocess.DEVNULL)
    try:
        time.sleep(2.5)
        dump = ns("r", "tcpdump", "-s", "128", "-y", "LINUX_SLL", "-i", "any", "-w", path, "tcp")
        srv = [ns("b", "iperf3", "-s", "-1"), ns("b", RTTLAB, "serve")]
        time.sleep(1.0)
        load = [
            ns("a", "iperf3", "-c", "198.18.0.2", "-t", str(seconds), "-P", "2", "-C", "cubic"),
            ns("a", RTTLAB, "rr", "-H", "198.18.0.2", "-l", str(seconds), "-r", "64,512"),
            ns("a", RTTLAB, "rr", "-t", "TCP_CRR", "-H", "198.18.0.2", "-l", str(seconds)),
        ]
        for p in load:
            p.wait(timeout=seconds + 30)
        time.sleep(0.5)
        dump.terminate()
        dump.wait()
        for p in srv:
            p.terminate()
    finally:
        subprocess.run([RTTLAB, "lab", "down", "--name", LAB], capture_output=True)


def run(argv):
    """Wall seconds of one run, output discarded."""
    t = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"{argv[0]} failed: {p.stderr.decode()[-300:]}")
    return wall


def peak_rss(argv):
    out = subprocess.run(["/usr/bin/time", "-f", "%M", *argv], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    return int(out.stderr.strip().splitlines()[-1])


def steal_pct(seconds=2.0):
    def read():
        return [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    a = read(); time.sleep(seconds); b = read()
    d = [y - x for x, y in zip(a, b)]
    return 100.0 * d[7] / max(1, sum(d))


def targets(med, rss, packets):
    """Issue 3's speed and memory targets, each against this run's numbers."""
    ts = med["rttlab passive --method ts -q"]
    both = med["rttlab passive --method both -q"]
    ours = [k for k in rss if k.startswith("rttlab")]
    rows = [
        ("TS engine ≥ 10 M packets/s", f"{packets / ts / 1e6:.1f} M/s", packets / ts >= 10e6),
        ("both engines ≥ 6 M packets/s", f"{packets / both / 1e6:.1f} M/s", packets / both >= 6e6),
        ("faster than `tcpdump -r` reading", f"{med['tcpdump -r FILE -w /dev/null (reading only)'] / ts:.1f}×",
         med["tcpdump -r FILE -w /dev/null (reading only)"] > ts),
        ("peak RSS < 32 MiB (every rttlab row)", f"max {max(rss[k] for k in ours) / 1024:.1f} MiB",
         max(rss[k] for k in ours) < 32 * 1024),
    ]
    if "pping -r FILE -m -q (TS)" in med:
        r = med["pping -r FILE -m -q (TS)"] / ts
        rows.append(("≥ 15× pping", f"{r:.1f}×", r >= 15))
    r = med["tcptrace -n -r -l (seq/ACK RTT)"] / ts
    rows.append(("≥ 3.5× tcptrace", f"{r:.1f}×", r >= 3.5))
    out = "\n## Against issue 3's targets\n\n| target | this run | met |\n|---|---:|---|\n"
    for name, value, ok in rows:
        out += f"| {name} | {value} | {'yes' if ok else 'no'} |\n"
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--capture")
    ap.add_argument("--seconds", type=int, default=18)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    cap = a.capture or "/tmp/rttlab-bench/mixed.pcap"
    if not os.path.exists(cap):
        os.makedirs(os.path.dirname(cap), exist_ok=True)
        record(cap, a.seconds)
    packets = int(subprocess.run(["capinfos", "-c", "-M", cap], capture_output=True, text=True)
                  .stdout.split()[-1])
    size = os.path.getsize(cap)
    with open(cap, "rb") as f:  # page cache
        while f.read(1 << 24):
            pass
    cases = {
        "tcpdump -r FILE -w /dev/null (reading only)": ["tcpdump", "-r", cap, "-w", "/dev/null"],
        "rttlab passive --method ts -q": [RTTLAB, "passive", "-r", cap, "--method", "ts", "-q"],
        "rttlab passive --method ts (lines to /dev/null)": [RTTLAB, "passive", "-r", cap, "--method", "ts"],
        "rttlab passive --method both -q": [RTTLAB, "passive", "-r", cap, "--method", "both", "-q"],
        "rttlab passive --method both --summary -q": [RTTLAB, "passive", "-r", cap, "--method", "both", "--summary", "-q"],
        "pping -r FILE -m -q (TS)": [PPING, "-r", cap, "-m", "-q"],
        "tcptrace -n -r -l (seq/ACK RTT)": ["tcptrace", "-n", "-r", "-l", cap],
    }
    if not os.path.exists(PPING):
        del cases["pping -r FILE -m -q (TS)"]
    walls = {k: [] for k in cases}
    steal = [steal_pct()]
    # The same TS run back to back before any peer has run: a second measure of the
    # one row the absolute target is about, showing the host's run-to-run spread
    # (0.35-0.60 s for the same binary on this VM within minutes).
    alone = statistics.median(run(cases["rttlab passive --method ts -q"]) for _ in range(a.runs))
    for _ in range(a.runs):
        for k, argv in cases.items():
            walls[k].append(run(argv))
        steal.append(steal_pct(0.5))
    rss = {k: peak_rss(argv) for k, argv in cases.items()}
    tshark = ["tshark", "-r", cap, "-n", "-Y", "tcp.analysis.ack_rtt", "-T", "fields", "-e", "tcp.analysis.ack_rtt"]
    if shutil.which("tshark"):
        walls["tshark -Y tcp.analysis.ack_rtt (seq/ACK)"] = [run(tshark)]
        rss["tshark -Y tcp.analysis.ack_rtt (seq/ACK)"] = peak_rss(tshark)
    med = {k: statistics.median(v) for k, v in walls.items()}
    ours_ts = med["rttlab passive --method ts -q"]
    out = os.path.join(ROOT, "bench", "RESULTS-passive.md")
    with open(out, "w") as f:
        f.write("# rttlab passive against pping, tcptrace, tshark and tcpdump\n\n")
        f.write(f"Recorded by `sudo bench/passive_peers.py --runs {a.runs}` on {time.strftime('%Y-%m-%d')}, kernel "
                f"{os.uname().release}, 2 vCPUs: one capture of {packets:,} packets ({size / 2**20:.0f} MiB, snap "
                f"length 128, Linux cooked v1) of two iperf3 bulk streams, TCP_RR and TCP_CRR through the lab, read "
                f"from the page cache. Wall time of the whole command (output to /dev/null), median of {a.runs} "
                f"alternated runs (tshark: one run); peak RSS from a separate run. Hypervisor steal during the runs: "
                f"median {statistics.median(steal):.0f} % (max {max(steal):.0f} %).\n\n")
        f.write("| tool | median s | M packets/s | rttlab ts is × faster | peak RSS MiB |\n|---|---:|---:|---:|---:|\n")
        for k, m in med.items():
            f.write(f"| {k} | {m:.3f} | {packets / m / 1e6:.2f} | {m / ours_ts:.1f} | {rss[k] / 1024:.1f} |\n")
        f.write(f"\nThe TS row alone, {a.runs} runs back to back before the peers: median {alone:.3f} s "
                f"({packets / alone / 1e6:.1f} M packets/s).\n")
        f.write(targets(med, rss, packets))
        f.write("\nThe issue's numbers were taken when `tcpdump -r` read 8 M packets/s; this run's "
                f"{packets / med['tcpdump -r FILE -w /dev/null (reading only)'] / 1e6:.1f} M/s says how fast "
                "the machine was meanwhile, so the ratios (against tcpdump, pping, tcptrace) are the "
                "comparable figures; the absolute rates move with the host.\n")
    print(open(out).read())


if __name__ == "__main__":
    main()
