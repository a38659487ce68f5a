#!/usr/bin/env python3
"""The agent's ICMP probing against smokeping_prober's: CPU per probe at N targets,
one echo a second each, on the same loopback targets, alternated, medians.

Usage: sudo bench/agent_vs_smokeping.py --prober PATH [--sizes 10,100,1000,5000]
                                         [--pairs 3] [--warmup 10] [--measure 30]
                                         [--idle 60]

PATH is smokeping_prober built from its public source in a scratch folder (never
committed), e.g. `git clone https://github.com/SuperQ/smokeping_prober /tmp/sp && cd
/tmp/sp && go build`; Debian's 0.6.1 (/usr/bin/prometheus-smokeping-prober) is its
old one-raw-socket-per-target design and not the current peer.

The N targets are loopback addresses (127.0.1.1, 127.0.1.2, …): every one a separate
ICMP target, answered by this host's kernel. Each pair runs the two tools one after
the other (which goes first alternates), each alone: `rttlab agent --probes icmp
--peers-file F` and `smokeping_prober HOST…` (its defaults: privileged, 1 s). After
the warm-up, over the measuring window: CPU (utime + stime of /proc/PID/stat) and the
echoes sent (the agent's rttlab_probes_sent_total{layer="icmp"}, smokeping_prober's
smokeping_requests_total, both read from their own /metrics at the window's ends). The
cost is CPU seconds per echo sent; the ratio is the agent's over smokeping_prober's,
per pair, and the table gives the medians. `--idle S` also measures an agent with no
peer at all (its probe server and endpoint only) over S seconds: % of one core.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTTLAB = os.path.join(ROOT, "target", "release", "rttlab")
AGENT_METRICS = "127.0.0.1:19812"
PROBER_METRICS = "127.0.0.1:19374"


def addr(i):
    return f"127.0.{1 + i // 254}.{1 + i % 254}"


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def metric_sum(endpoint, name, match=""):
    text = urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=30).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in "{ ") and match in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_up(endpoint, proc, limit=60):
    t0 = time.time()
    while time.time() - t0 < limit:
        if proc.poll() is not None:
            raise SystemExit(f"exited: {proc.args[0]} ({proc.returncode})")
        try:
            urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=5).read()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{endpoint} never answered")


def measure(proc, endpoint, counter, match, warmup, window, n):
    # smokeping_prober sets up its pingers before it serves: minutes at 5 000.
    wait_up(endpoint, proc, limit=60 + 0.2 * n)
    time.sleep(warmup)
    c0, n0, t0 = cpu_s(proc.pid), metric_sum(endpoint, counter, match), time.time()
    time.sleep(window)
    c1, n1, t1 = cpu_s(proc.pid), metric_sum(endpoint, counter, match), time.time()
    return {"cpu_s": c1 - c0, "probes": n1 - n0, "wall_s": t1 - t0}


def stop(proc):
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_agent(n, warmup, window, tmp):
    peers = os.path.join(tmp, "peers.json")
    with open(peers, "w") as f:
        json.dump([{"targets": [f"{addr(i)}:7" for i in range(n)]}], f)
    proc = subprocess.Popen(
        [RTTLAB, "agent", "--probes", "icmp", "--peers-file", peers, "--max-peers",
         str(max(n, 1)), "--metrics-listen", AGENT_METRICS, "-L", "127.0.0.1:19866"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "RTTLAB_STATE_DIR": tmp})
    try:
        return measure(proc, AGENT_METRICS, "rttlab_probes_sent_total", 'layer="icmp"',
                       warmup, window, n)
    finally:
        stop(proc)


def run_prober(prober, n, warmup, window):
    proc = subprocess.Popen(
        [prober, f"--web.listen-address={PROBER_METRICS}"] + [addr(i) for i in range(n)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return measure(proc, PROBER_METRICS, "smokeping_requests_total", "", warmup, window, n)
    finally:
        stop(proc)


def per_probe_us(r):
    return 1e6 * r["cpu_s"] / r["probes"] if r["probes"] else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prober", required=True)
    ap.add_argument("--sizes", default="10,100,1000,5000")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=10)
    ap.add_argument("--measure", type=float, default=30)
    ap.add_argument("--idle", type=float, default=0)
    a = ap.parse_args()
    version = subprocess.run([a.prober, "--version"], capture_output=True, text=True)
    said = (version.stdout + version.stderr).splitlines()[0]
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    print(f"rttlab {rev}; {a.prober}: {said}")
    print(f"{a.pairs} alternated pairs per size, warm-up {a.warmup:g} s, window {a.measure:g} s\n")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(x) for x in a.sizes.split(",")]:
            ratios, ours, theirs = [], [], []
            for k in range(a.pairs):
                order = ["agent", "prober"] if k % 2 == 0 else ["prober", "agent"]
                got = {}
                for who in order:
                    got[who] = (run_agent(n, a.warmup, a.measure, tmp) if who == "agent"
                                else run_prober(a.prober, n, a.warmup, a.measure))
                o, t = per_probe_us(got["agent"]), per_probe_us(got["prober"])
                ours.append(got["agent"])
                theirs.append(got["prober"])
                ratios.append(o / t)
                print(f"N={n} pair {k + 1}: agent {o:.2f} µs/echo "
                      f"({got['agent']['probes'] / got['agent']['wall_s']:.0f}/s, "
                      f"{100 * got['agent']['cpu_s'] / got['agent']['wall_s']:.2f} % of a core); "
                      f"smokeping_prober {t:.2f} µs/echo "
                      f"({got['prober']['probes'] / got['prober']['wall_s']:.0f}/s, "
                      f"{100 * got['prober']['cpu_s'] / got['prober']['wall_s']:.2f} %); "
                      f"ratio {o / t:.3f}", flush=True)
            rows.append((n, statistics.median(per_probe_us(r) for r in ours),
                         statistics.median(per_probe_us(r) for r in theirs),
                         statistics.median(ratios), min(ratios), max(ratios),
                         statistics.median(100 * r["cpu_s"] / r["wall_s"] for r in ours),
                         statistics.median(100 * r["cpu_s"] / r["wall_s"] for r in theirs)))
        print("\n| targets | agent µs CPU/echo | smokeping_prober µs CPU/echo | ratio (median, range) "
              "| agent % of a core | smokeping_prober % |")
        print("|---|---|---|---|---|---|")
        for n, o, t, r, lo, hi, oc, tc in rows:
            print(f"| {n} | {o:.2f} | {t:.2f} | **{r:.3f}** ({lo:.3f}–{hi:.3f}) | {oc:.2f} | {tc:.2f} |")
        if a.idle:
            idle = run_agent(0, a.warmup, a.idle, tmp)
            print(f"\nAgent with no peer: {100 * idle['cpu_s'] / idle['wall_s']:.3f} % of one core "
                  f"over {idle['wall_s']:.0f} s ({idle['cpu_s'] * 1e3:.0f} ms of CPU)")


if __name__ == "__main__":
    main()
