#!/usr/bin/env python3
"""Two rttlab builds side by side on the hot paths, alternated, medians: the passive
file engine (TS and seq/ACK), rr's transaction loop (TCP_RR, with and without
--anatomy, and UDP_RR, -T 0,0 on loopback), ping's probe loop (-i 0 on one CPU), and
the agent's CPU per probe (TCP and UDP, and ICMP), and the lab's emulator (TCP_RR
from host a to host b of each build's own lab, every frame through the emulator).

    bench/hot_paths.py OLD_BINARY NEW_BINARY [--pairs 7] [--capture BIG.pcap]

bench/against.sh COMMIT builds COMMIT beside HEAD and runs this on both, with a
capture of 2.6 M packets from bench/big_capture.sh.

Loopback only, every run bounded: passive reads tests/corpus/crr-gw.pcapng.gz (20
reads a sample) and, with --capture, the big capture (3 reads a sample); rr
runs 3 s against a server of its own build (the control protocol's version may
differ); the agent probes 200 loopback peers (127.0.1.1-200, its own build's
`serve`) at tcp_rr and udp_rr, then at icmp, every 100 ms, its CPU (utime + stime, /proc) over 10 s divided by the
probes its own counter says it sent. Each pair runs old and new in turn, the order
alternating; the ratio is new/old of the medians (above 1: new is slower for
passive and agent, faster for rr and ping).
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def alternate(pairs, run):
    res = {"old": [], "new": []}
    for pair in range(pairs):
        for b in (["old", "new"] if pair % 2 == 0 else ["new", "old"]):
            res[b].append(run(b))
    return res


def line(name, unit, res, digits=2):
    m = {b: statistics.median(v) for b, v in res.items()}
    rng = {b: f"{min(v):.{digits}f}–{max(v):.{digits}f}" for b, v in res.items()}
    return (f"| {name} | {m['old']:.{digits}f} ({rng['old']}) | {m['new']:.{digits}f} ({rng['new']}) "
            f"| {unit} | {m['new'] / m['old']:.3f} |")


def same_summary(old, new):
    """The two builds' passive summaries agree: line for line, word for word, except
    where one writes a percentile its flow's samples cannot resolve as what it needs
    ("n<100"), and the other (a build before that rule) as a number."""
    a, b = old.decode().splitlines(), new.decode().splitlines()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        wx, wy = x.split(), y.split()
        if len(wx) != len(wy):
            return False
        if any(u != v and not (u.startswith("n<") or v.startswith("n<")) for u, v in zip(wx, wy)):
            return False
    return True


def lab_rr(rttlab, name):
    """TCP_RR transactions/s from host a to host b of a fresh lab of this build."""
    lab = lambda *args: subprocess.run([rttlab, "lab", *args, "--name", name],  # noqa: E731
                                       capture_output=True, text=True, timeout=60)
    lab("down")
    lab("up")
    srv = subprocess.Popen([rttlab, "lab", "exec", "--name", name, "b", "--", rttlab, "serve", "-q"],
                           stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)
        o = subprocess.run([rttlab, "lab", "exec", "--name", name, "a", "--", rttlab, "rr", "-H", "b",
                            "-l", "3", "--json"], capture_output=True, text=True, timeout=60)
        return json.loads(o.stdout)["transactions"] / 3
    finally:
        srv.kill()
        srv.wait()
        lab("down")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--capture", help="a large capture (bench/big_capture.sh) read by both engines too")
    ap.add_argument("--only", action="append", choices=["passive", "rr", "ping", "agent", "lab"],
                    help="run only these paths (repeatable; default: all)")
    a = ap.parse_args()
    bins = {"old": a.old, "new": a.new}
    tmp = tempfile.mkdtemp(prefix="rttlab-hot-")
    cap = os.path.join(tmp, "crr.pcapng")
    with gzip.open(os.path.join(ROOT, "tests", "corpus", "crr-gw.pcapng.gz")) as f, open(cap, "wb") as g:
        g.write(f.read())
    rows = []
    captures = [("crr-gw", cap, 20)]
    if a.capture:
        captures.append((os.path.basename(a.capture), a.capture, 3))
    want = lambda path: not a.only or path in a.only  # noqa: E731
    for name, path, reads in captures if want("passive") else []:
        for method in ["ts", "seq"]:
            outs = {}

            def passive(b):
                cmd = [bins[b], "passive", "-r", path, "--method", method, "-q", "--summary"]
                t0 = time.perf_counter()
                for _ in range(reads):
                    o = subprocess.run(cmd, capture_output=True)
                outs[b] = o.stdout
                return (time.perf_counter() - t0) / reads * 1e3

            rows.append(line(f"passive -r {name} --method {method}", "ms a run", alternate(a.pairs, passive)))
            assert same_summary(outs["old"], outs["new"]), f"passive -r {name} --method {method}: outputs differ"
    # Each build against a server of its own: the control protocol's version may differ.
    ports = {"old": 15866, "new": 15876}
    srvs = [subprocess.Popen([bins[b], "serve", "--listen", f"0.0.0.0:{ports[b]}", "-q", "--max-tests", "1000"],
                             stderr=subprocess.DEVNULL) for b in bins]
    time.sleep(1)
    try:
        for name, extra in [("TCP_RR", []), ("TCP_RR --anatomy", ["--anatomy"]), ("UDP_RR", ["-t", "UDP_RR"])] \
                if want("rr") else []:
            def rr(b):
                o = subprocess.run([bins[b], "rr", "-H", "127.0.0.1", "-p", str(ports[b]), "-l", "3", "-T", "0,0",
                                    "--json"] + extra, capture_output=True, text=True, timeout=60)
                return json.loads(o.stdout)["transactions"] / 3

            flag = next((x for x in extra if x.startswith("--")), None)
            if flag and flag not in subprocess.run([a.old, "rr", "--help"], capture_output=True, text=True).stdout:
                rows.append(f"| rr {name} -T 0,0 -l 3 | (the old build has no {flag}) | | | |")
                continue
            rows.append(line(f"rr {name} -T 0,0 -l 3", "transactions/s", alternate(a.pairs, rr), 0))

        def ping(b):
            o = subprocess.run(["taskset", "-c", "0", bins[b], "ping", "127.0.0.1", "-i", "0", "-c", "20000",
                                "-q", "--json"], capture_output=True, text=True, timeout=60)
            d = json.loads(o.stdout)
            return d["received"] / d["elapsed_s"]

        if want("ping"):
            rows.append(line("ping 127.0.0.1 -i 0 -c 20000 (one CPU)", "replies/s", alternate(a.pairs, ping), 0))
        peers = {}
        for b in bins:
            peers[b] = os.path.join(tmp, f"peers-{b}.json")
            with open(peers[b], "w") as f:
                json.dump([{"targets": [f"127.0.1.{i}:{ports[b]}" for i in range(1, 201)]}], f)
        hz = os.sysconf("SC_CLK_TCK")

        def cpu(pid):
            f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / hz

        def sent():
            body = urllib.request.urlopen("http://127.0.0.1:16901/metrics", timeout=10).read().decode()
            return sum(float(l.rsplit(" ", 1)[1]) for l in body.splitlines()
                       if l.startswith("rttlab_probes_sent_total{"))

        def agent(b, probes="tcp_rr,udp_rr"):
            p = subprocess.Popen([bins[b], "agent", "--peers-file", peers[b], "--probes", probes,
                                  "--interval", "100ms", "-L", "127.0.0.1:16900",
                                  "--metrics-listen", "127.0.0.1:16901"], stderr=subprocess.DEVNULL)
            try:
                time.sleep(4)
                c0, s0 = cpu(p.pid), sent()
                time.sleep(10)
                c1, s1 = cpu(p.pid), sent()
            finally:
                p.terminate()
                p.wait()
            time.sleep(1)
            return (c1 - c0) / (s1 - s0) * 1e6

        agent_row = "agent, 200 peers × tcp_rr,udp_rr every 100 ms"
        if not want("agent"):
            pass
        elif subprocess.run([a.old, "agent", "--help"], capture_output=True).returncode == 0:
            rows.append(line(agent_row, "µs CPU a probe", alternate(a.pairs, agent)))
            rows.append(line("agent, 200 peers × icmp every 100 ms", "µs CPU a probe",
                             alternate(a.pairs, lambda b: agent(b, "icmp"))))
        else:
            rows.append(f"| {agent_row} | (the old build has no agent) | | | |")
    finally:
        for srv in srvs:
            srv.kill()
    if want("lab"):
        rows.append(line("lab rr a→b -l 3 (sleep mode, no impairment)", "transactions/s",
                         alternate(a.pairs, lambda b: lab_rr(bins[b], f"hot{b}")), 0))
    print("| path | old median (range) | new median (range) | unit | new/old |")
    print("|---|---:|---:|---|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
