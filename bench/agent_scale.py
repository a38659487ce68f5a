#!/usr/bin/env python3
"""One agent probing N peers at the default rate: its CPU, memory, scrape time and
fidelity, beside a single-peer `rttlab rr -w 1s` in the same run.

Usage: sudo bench/agent_scale.py [--peers 1000] [--warmup 20] [--measure 60]
                                  [--probes icmp,tcp_rr,udp_rr] [--soak 0 --churn 100]

One `rttlab serve` listens on 0.0.0.0:13866; the N peers are N loopback addresses
(127.0.1.1, 127.0.1.2, …: all of 127/8 is this host), so every peer is a separate
address, TCP and UDP session and ICMP target, answered by one server. The agent
(`rttlab agent --peers-file F`, its own server on 127.0.0.1:14866) probes them all.

Measured, after the warm-up, over the measuring window:
  - the agent's CPU (utime + stime from /proc/PID/stat) as % of one core;
  - its RSS (VmRSS, /proc/PID/status), and VmHWM at the end;
  - GET /metrics: wall time of 10 scrapes (median, max), exposition size;
  - probes sent per second (the counters' increase) against N × probes × 1/s;
  - the median tcp_rr RTT from the agent's histogram (Prometheus's
    histogram_quantile interpolation, 20 buckets a decade) against the median of a
    `rttlab rr -w 1s` run of the same length to one of the peers, run beside it
    (witness: the same server, the same path, another client);
  - the probe loop's lag (rttlab_agent_probe_lag_seconds): median and P99.

--soak S (seconds) instead rewrites the peers file every 10 s, swapping --churn
peers for new addresses, and samples RSS every 30 s: memory must stay flat.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTTLAB = os.path.join(ROOT, "target", "release", "rttlab")
PORT = 13866
METRICS = "127.0.0.1:19812"
RPS = "/sys/class/net/lo/queues/rx-0/rps_cpus"
# With --steer: the server on CPU 1, the clients on CPU 0.
PEER_CPU = []
CLIENT_CPU = []


def addr(i):
    # 127.0.1.1 … : skip .0 and .255 in the last byte.
    return f"127.0.{1 + i // 254}.{1 + i % 254}"


def write_peers(path, ids):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump([{"targets": [f"{addr(i)}:{PORT}" for i in ids], "labels": {"bench": "scale"}}], f)
    os.rename(tmp, path)


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def status(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024  # MiB
    return 0.0


PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def scrape(openmetrics=False):
    """GET /metrics as curl does (text 0.0.4), or as Prometheus does (OpenMetrics)."""
    req = urllib.request.Request(f"http://{METRICS}/metrics")
    if openmetrics:
        req.add_header("Accept", PROMETHEUS_ACCEPT)
    t0 = time.perf_counter()
    body = urllib.request.urlopen(req, timeout=30).read().decode()
    return time.perf_counter() - t0, body


def samples(body, name):
    out = []
    for line in body.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0])) if "{" in line else {}
            out.append((labels, float(line.rsplit(" ", 1)[1])))
    return out


def total(body, name, **match):
    return sum(v for l, v in samples(body, name) if all(l.get(k) == x for k, x in match.items()))


def quantile(q, buckets):
    """histogram_quantile: linear interpolation inside the bucket holding rank q."""
    buckets = sorted(buckets)
    n = buckets[-1][1]
    if n == 0:
        return float("nan")
    rank = q * n
    lo, prev = 0.0, 0.0
    for le, c in buckets:
        if c >= rank:
            if le == float("inf"):
                return lo
            return lo + (le - lo) * (rank - prev) / max(c - prev, 1e-12)
        lo, prev = le, c
    return lo


def merged(body, name, **match):
    acc = {}
    for l, v in samples(body, name + "_bucket"):
        if all(l.get(k) == x for k, x in match.items()):
            le = float("inf") if l["le"] == "+Inf" else float(l["le"])
            acc[le] = acc.get(le, 0.0) + v
    return list(acc.items())


def diff_buckets(a, b):
    da = dict(a)
    return [(le, c - da.get(le, 0.0)) for le, c in b]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", type=int, default=1000)
    ap.add_argument("--warmup", type=float, default=20)
    ap.add_argument("--measure", type=float, default=60)
    ap.add_argument("--probes", default="icmp,tcp_rr,udp_rr")
    ap.add_argument("--buckets", default=None,
                    help="the agent's --buckets (default: its own, 10us:10s:3); the tcp_rr median "
                         "comparison needs finer ones, e.g. 10us:100ms:20")
    ap.add_argument("--steer", action="store_true",
                    help="model peers on other hosts: the clients (agent, lone rr, fping) on CPU "
                         "0, the server on CPU 1, and loopback's receive processing steered to "
                         "CPU 1 by RPS (lo's rps_cpus, restored at exit), so that the peers' "
                         "kernel work is not charged to the agent, as on a real network")
    ap.add_argument("--soak", type=float, default=0)
    ap.add_argument("--churn", type=int, default=100)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rttlab-agent-bench-")
    peers = os.path.join(tmp, "peers.json")
    ids = list(range(a.peers))
    write_peers(peers, ids)
    procs = []
    global PEER_CPU, CLIENT_CPU
    if a.steer:
        old_rps = open(RPS).read().strip()
        PEER_CPU = ["taskset", "-c", "1"]
        CLIENT_CPU = ["taskset", "-c", "0"]
    try:
        if a.steer:
            with open(RPS, "w") as f:
                f.write("2")
        serve = subprocess.Popen(
            PEER_CPU + [RTTLAB, "serve", "-L", f"0.0.0.0:{PORT}", "-q", "--max-tests", str(4 * a.peers + 64),
             "--max-memory", "16GiB", "--max-handshakes", "1024", "--max-handshakes-per-source", "1024"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(serve)
        time.sleep(0.5)
        agent = subprocess.Popen(
            CLIENT_CPU + [RTTLAB, "agent", "--peers-file", peers, "--probes", a.probes, "-L", "127.0.0.1:14866",
             "--metrics-listen", METRICS] + (["--buckets", a.buckets] if a.buckets else []),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append(agent)
        time.sleep(a.warmup)
        if agent.poll() is not None:
            raise SystemExit("the agent exited: " + agent.stderr.read().decode())
        if a.soak:
            soak(a, agent, peers, ids)
            return
        _, body0 = scrape()
        c0, t0 = cpu_s(agent.pid), time.monotonic()
        rr = subprocess.run(
            CLIENT_CPU + [RTTLAB, "rr", "-H", addr(0), "-p", str(PORT), "-w", "1s", "-l", str(int(a.measure)),
             "--json"], capture_output=True, text=True)
        rest = a.measure - (time.monotonic() - t0)
        if rest > 0:
            time.sleep(rest)
        c1, t1 = cpu_s(agent.pid), time.monotonic()
        # The counters at the end of the CPU window (the timed scrapes below come after).
        _, body1 = scrape()
        rss = status(agent.pid, "VmRSS")
        times, om_times = [], []
        for _ in range(10):
            dt, _ = scrape()
            times.append(dt)
            om_times.append(scrape(openmetrics=True)[0])
        hwm = status(agent.pid, "VmHWM")
        elapsed = t1 - t0
        sent = total(body1, "rttlab_probes_sent_total") - total(body0, "rttlab_probes_sent_total")
        nprobes = len(a.probes.split(","))
        lost = total(body1, "rttlab_probes_lost_total") - total(body0, "rttlab_probes_lost_total")
        errors = total(body1, "rttlab_probe_errors_total") - total(body0, "rttlab_probe_errors_total")
        rr_hist = diff_buckets(merged(body0, "rttlab_rtt_seconds", layer="tcp_rr"),
                               merged(body1, "rttlab_rtt_seconds", layer="tcp_rr"))
        lag = diff_buckets(merged(body0, "rttlab_agent_probe_lag_seconds"),
                           merged(body1, "rttlab_agent_probe_lag_seconds"))
        try:
            single = json.loads(rr.stdout)
            single_p50 = single["rtt"]["percentiles_us"]["p50"]
        except Exception as e:  # noqa: BLE001 - report what rr said
            single_p50 = float("nan")
            print("rr failed:", e, rr.stderr[-500:])
        agent_p50 = quantile(0.5, rr_hist) * 1e6
        print(f"buckets {a.buckets or 'default (10us:10s:3)'}")
        print(f"peers {a.peers}, probes {a.probes}, measured {elapsed:.1f} s after {a.warmup:.0f} s warm-up")
        print(f"agent CPU            {100 * (c1 - c0) / elapsed:.2f} % of one core")
        print(f"agent RSS            {rss:.1f} MiB (peak {hwm:.1f} MiB)")
        print(f"GET /metrics         OpenMetrics (as Prometheus asks): median {1e3 * statistics.median(om_times):.1f} ms, "
              f"max {1e3 * max(om_times):.1f} ms; text 0.0.4 (curl): median {1e3 * statistics.median(times):.1f} ms, "
              f"max {1e3 * max(times):.1f} ms; {len(body1) / 1e6:.2f} MB, {body1.count(chr(10))} lines")
        print(f"probes/s             {sent / elapsed:.0f} (asked {a.peers * nprobes}); lost {lost:.0f}, errors {errors:.0f}")
        agent_mean = 1e6 * (total(body1, "rttlab_rtt_seconds_sum", layer="tcp_rr")
                            - total(body0, "rttlab_rtt_seconds_sum", layer="tcp_rr")) / max(
            total(body1, "rttlab_rtt_seconds_count", layer="tcp_rr")
            - total(body0, "rttlab_rtt_seconds_count", layer="tcp_rr"), 1)
        single_mean = single["rtt"]["mean_us"] if single_p50 == single_p50 else float("nan")
        print(f"tcp_rr median        agent {agent_p50:.1f} us over {a.peers} peers; rr -w 1s alone {single_p50:.1f} us "
              f"(ratio {agent_p50 / single_p50:.2f}; interpolated in buckets of {a.buckets or '3 a decade'})")
        print(f"tcp_rr mean          agent {agent_mean:.1f} us; rr -w 1s alone {single_mean:.1f} us "
              f"(ratio {agent_mean / single_mean:.2f}; exact: _sum / _count)")
        print(f"probe lag            median {1e6 * quantile(0.5, lag):.0f} us, P99 {1e6 * quantile(0.99, lag):.0f} us")
        print(f"agent CPU per probe  {1e6 * (c1 - c0) / max(sent, 1):.1f} us")
        agent.terminate()
        agent.wait(timeout=10)
        fping_reference(a, elapsed)
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        if a.steer:
            with open(RPS, "w") as f:
                f.write(old_rps)


def fping_reference(a, seconds):
    """fping echoing the same N addresses once a second each (-l -p 1000, -i so the
    N echoes spread over the second), alone: its CPU per echo, the ICMP third's peer."""
    targets = [addr(i) for i in range(a.peers)]
    spread_ms = max(1, 1000 // a.peers)
    p = subprocess.Popen(CLIENT_CPU + ["fping", "-q", "-l", "-p", "1000", "-i", str(spread_ms)] + targets,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(5)
    c0, t0 = cpu_s(p.pid), time.monotonic()
    time.sleep(min(seconds, 30))
    c1, t1 = cpu_s(p.pid), time.monotonic()
    p.terminate()
    p.wait()
    echoes = a.peers * (t1 - t0) * min(1.0, 1000 / (spread_ms * a.peers))
    print(f"fping, same targets  {100 * (c1 - c0) / (t1 - t0):.2f} % of one core, "
          f"{1e6 * (c1 - c0) / echoes:.1f} us per echo ({echoes / (t1 - t0):.0f} echoes/s)")


def soak(a, agent, peers, ids):
    next_id = len(ids)
    t0 = time.monotonic()
    last_sample = -1e9
    print(f"soak {a.soak:.0f} s, {a.peers} peers, {a.churn} swapped every 10 s")
    print("t_s  rss_MiB  peers_probed")
    while time.monotonic() - t0 < a.soak:
        time.sleep(10)
        gone = ids[: a.churn]
        ids = ids[a.churn:] + list(range(next_id, next_id + a.churn))
        next_id += a.churn
        del gone
        write_peers(peers, ids)
        now = time.monotonic() - t0
        if now - last_sample >= 30:
            last_sample = now
            _, body = scrape()
            print(f"{now:4.0f}  {status(agent.pid, 'VmRSS'):7.1f}  {total(body, 'rttlab_agent_peers'):.0f}", flush=True)


if __name__ == "__main__":
    main()
