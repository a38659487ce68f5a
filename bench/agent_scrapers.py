#!/usr/bin/env python3
"""What many scrapers cost the agent against one: its CPU while K clients scrape a
large exposition, back to back or once a second each, K = 1 and K = 12 alternated.

Usage: bench/agent_scrapers.py [--peers 2000] [--seconds 10] [--pairs 3]
                               [--bin target/release/rttlab] [--old OLD_BIN]
                               [--mode back-to-back] [--mode 1/s]

The agent probes N peers on 127.0.0.0/8 at a port nothing listens on, once a minute
(TCP_RR: its exposition holds every peer's series, 3.5 KB each: 7 MB at 2000). Each
scraper is a keep-alive HTTP/1.1 client (Python's http.client) reading /metrics
whole: "back-to-back" asks again as soon as it has read an answer, "1/s" once a
second (the K scrapers spread evenly over the second). Witness: the agent's CPU
(utime + stime, /proc/PID/stat) over the window, as a share of one core; scrapes
answered and bytes read counted by the clients. Runs alternate K = 1 and K = 12 (and
the builds, with --old); medians of --pairs runs each, and the ratio K=12 / K=1.
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICKS = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def peers_file(path, n):
    targets = [f"127.{1 + i // 250}.0.{1 + i % 250}:9" for i in range(n)]
    with open(path, "w") as f:
        json.dump([{"targets": targets, "labels": {}}], f)


def start_agent(binary, peers, metrics_port):
    p = subprocess.Popen(
        [binary, "agent", "--peers-file", peers, "-L", f"127.0.0.1:{free_port()}",
         "--metrics-listen", f"127.0.0.1:{metrics_port}", "--probes", "tcp_rr",
         "--interval", "60s"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while time.time() - t0 < 20:
        try:
            socket.create_connection(("127.0.0.1", metrics_port), timeout=1).close()
            return p
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise SystemExit("the agent did not listen within 20 s")


def scraper(port, every, offset, until, tally, lock):
    time.sleep(offset)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    scrapes = nbytes = 0
    next_at = time.time()
    while time.time() < until:
        try:
            conn.request("GET", "/metrics")
            r = conn.getresponse()
            body = r.read()
            if r.status == 200:
                scrapes += 1
                nbytes += len(body)
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        if every:
            next_at += every
            time.sleep(max(0.0, next_at - time.time()))
    with lock:
        tally[0] += scrapes
        tally[1] += nbytes


def one_run(binary, peers, k, every, seconds):
    port = free_port()
    agent = start_agent(binary, peers, port)
    try:
        # Warm: the first exposition (and the peers' series) exist.
        urllib_get(port)
        time.sleep(1)
        tally, lock = [0, 0], threading.Lock()
        c0, t0 = cpu_seconds(agent.pid), time.time()
        until = t0 + seconds
        threads = [threading.Thread(target=scraper,
                                    args=(port, every, (every or 0) * i / k, until, tally, lock))
                   for i in range(k)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        core = (cpu_seconds(agent.pid) - c0) / (time.time() - t0)
        return core, tally[0], tally[1]
    finally:
        agent.kill()
        agent.wait()


def urllib_get(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    return conn.getresponse().read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "rttlab"))
    ap.add_argument("--old")
    ap.add_argument("--mode", action="append", choices=["back-to-back", "1/s"],
                    help="only these modes (default: both)")
    a = ap.parse_args()
    modes = [m for m in (("back-to-back", None), ("1/s", 1.0)) if not a.mode or m[0] in a.mode]
    builds = [("new", a.bin)] + ([("old", a.old)] if a.old else [])
    with tempfile.TemporaryDirectory() as d:
        peers = os.path.join(d, "peers.json")
        peers_file(peers, a.peers)
        results = {}
        for mode, every in modes:
            for _ in range(a.pairs):
                for name, binary in builds:
                    for k in (1, 12):
                        r = one_run(binary, peers, k, every, a.seconds)
                        results.setdefault((mode, name, k), []).append(r)
                        print(f"{mode} {name} K={k}: {r[0]:.3f} core, {r[1]} scrapes, "
                              f"{r[2] / 1e6:.0f} MB", flush=True)
        print()
        print("| scrapers | build | K=1 core (range) | K=12 core (range) | K=12 / K=1 | scrapes K=1 / K=12 |")
        print("|---|---|---:|---:|---:|---:|")
        for mode, _ in modes:
            for name, _ in builds:
                one = results[(mode, name, 1)]
                twelve = results[(mode, name, 12)]
                m1 = statistics.median(r[0] for r in one)
                m12 = statistics.median(r[0] for r in twelve)
                s1 = statistics.median(r[1] for r in one)
                s12 = statistics.median(r[1] for r in twelve)
                rng = lambda rs: f"{min(r[0] for r in rs):.3f}–{max(r[0] for r in rs):.3f}"
                print(f"| {mode} | {name} | {m1:.3f} ({rng(one)}) | {m12:.3f} ({rng(twelve)}) "
                      f"| {m12 / m1:.2f} | {s1:.0f} / {s12:.0f} |")


if __name__ == "__main__":
    main()
