#!/usr/bin/env python3
"""What `rttlab explain` costs the service it watches, measured side by side.

Each pair runs the same load twice, once with `rttlab explain --port P` attached to
the server's port and once without, in alternating order, and the table gives the
medians over the pairs:

- latency at a fixed rate below saturation: `rttlab rr --rate R` (open loop, TCP_RR)
  against `rttlab serve` on loopback, explain watching serve's data port: the P50 and
  P99 the client sees, with and without, and the difference (µs);
- throughput at saturation: redis-benchmark (Debian's) against redis-server, one
  client (`-c 1`, closed loop: every added µs shows) and 50 clients, requests/s with
  and without, and the ratio;
- the kernel's own cost per event of each program (`kernel.bpf_stats_enabled`: the
  run_time_ns and run_cnt the kernel keeps per program, read from explain's
  descriptors in /proc/PID/fdinfo), over one redis-benchmark run.

With `--side client` explain watches the same traffic from the client's end
(`--to P`: rr's and redis-benchmark's sockets), which adds a program on every packet
the host sends (`net_dev_start_xmit`).

Needs root. Usage:

    bench/explain_overhead.py [--bin target/release/rttlab] [--pairs 5] [--side client]
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import time

REDIS_PORT = 16479
SERVE_PORT = 12991
DATA_PORT = 13601


def start(cmd, **kw):
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)


SELECT = {"server": "--port", "client": "--to"}


def explain(binary, port, side):
    """explain attached to `port` (its server's side or its clients'), once it says
    it is watching."""
    p = subprocess.Popen(
        [binary, "explain", SELECT[side], str(port), "-i", "60", "-l", "600"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = p.stderr.readline()
    assert "watching" in line, line
    return p


def stop(p):
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def rr_latency(binary, rate, seconds):
    out = subprocess.run(
        [binary, "rr", "-H", "127.0.0.1", "-p", str(SERVE_PORT), "-P", str(DATA_PORT),
         "--rate", f"{rate}/s", "-l", str(seconds), "--json"],
        check=True, capture_output=True, text=True,
    ).stdout
    p = json.loads(out)["rtt"]["percentiles_us"]
    return p["p50"], p["p99"]


def redis_rps(clients, n):
    out = subprocess.run(
        ["redis-benchmark", "-p", str(REDIS_PORT), "-t", "ping_inline", "-n", str(n),
         "-c", str(clients), "--csv"],
        check=True, capture_output=True, text=True,
    ).stdout
    row = [l for l in out.splitlines() if l.startswith('"PING_INLINE"')][0]
    return float(row.split(",")[1].strip('"'))


def prog_stats(pid):
    """(name, run_time_ns, run_cnt) of every BPF program descriptor of `pid`."""
    stats = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            info = open(f"/proc/{pid}/fdinfo/{fd}").read()
        except OSError:
            continue
        if "prog_type" not in info:
            continue
        kv = dict(re.findall(r"^(\w+):\s+(\S+)", info, re.M))
        stats.append((kv.get("prog_tag"), int(kv.get("run_time_ns", 0)), int(kv.get("run_cnt", 0))))
    return stats


def pairs(n, run_both):
    """`run_both(with_explain)` n times each, alternating which goes first."""
    with_, without = [], []
    for i in range(n):
        order = (True, False) if i % 2 == 0 else (False, True)
        for w in order:
            (with_ if w else without).append(run_both(w))
    return with_, without


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/rttlab")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--side", choices=sorted(SELECT), default="server")
    a = ap.parse_args()
    binary = os.path.abspath(a.bin)
    redis = start(["redis-server", "--port", str(REDIS_PORT), "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no"])
    serve = start([binary, "serve", "-p", str(SERVE_PORT), "--data-ports",
                   f"{DATA_PORT}-{DATA_PORT}"])
    time.sleep(1)
    rows = []
    try:
        def latency(w):
            e = explain(binary, DATA_PORT, a.side) if w else None
            try:
                return rr_latency(binary, a.rate, a.seconds)
            finally:
                if e:
                    stop(e)

        w, wo = pairs(a.pairs, latency)
        for i, name in enumerate(["P50", "P99"]):
            mw = statistics.median(x[i] for x in w)
            mo = statistics.median(x[i] for x in wo)
            rows.append((f"rr TCP_RR --rate {a.rate}/s, client {name}", mo, mw, "µs",
                         f"{mw - mo:+.1f} µs", [x[i] for x in wo], [x[i] for x in w]))

        for clients, n in [(1, 100_000), (50, 200_000)]:
            def throughput(w):
                e = explain(binary, REDIS_PORT, a.side) if w else None
                try:
                    return redis_rps(clients, n)
                finally:
                    if e:
                        stop(e)

            w, wo = pairs(a.pairs, throughput)
            mw, mo = statistics.median(w), statistics.median(wo)
            rows.append((f"redis-benchmark ping_inline -c {clients} -n {n}", mo, mw,
                         "requests/s", f"{mw / mo:.3f}", wo, w))

        # The kernel's cost per event, over one run at one client.
        subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=1"], check=True)
        try:
            e = explain(binary, REDIS_PORT, a.side)
            before = prog_stats(e.pid)
            redis_rps(1, 100_000)
            after = prog_stats(e.pid)
            stop(e)
        finally:
            subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=0"], check=True)
    finally:
        for p in (redis, serve):
            p.kill()
            p.wait()

    print("| job | without explain (median) | with explain (median) | unit | with − without, or with/without |")
    print("|---|---:|---:|---|---:|")
    for job, mo, mw, unit, d, wo, w in rows:
        print(f"| {job} | {mo:.1f} ({min(wo):.1f}–{max(wo):.1f}) | {mw:.1f} ({min(w):.1f}–{max(w):.1f}) | {unit} | {d} |")
    print()
    print("| program (tag) | events | ns per event |")
    print("|---|---:|---:|")
    total_ns = total_n = 0
    for (tag, t1, n1), (_, t0, n0) in zip(sorted(after), sorted(before)):
        n, t = n1 - n0, t1 - t0
        total_ns, total_n = total_ns + t, total_n + n
        print(f"| {tag} | {n} | {t / n if n else 0:.0f} |")
    print(f"| all | {total_n} | {total_ns / total_n if total_n else 0:.0f} |")
    print(f"\n{total_ns / 100_000:.0f} ns of BPF per redis transaction (100 000 PINGs, one client)")


if __name__ == "__main__":
    main()
