#!/usr/bin/env python3
"""rttlab agent under a mixed hostile load on both its ports, with churning peers.

On loopback only, bounded in time (--minutes, default 10) and in connections. One
`rttlab serve` answers for 60 peers (127.0.0.2-61 on one port); the agent probes a
subset of 40 that changes every 10 s (its peers file rewritten, a rename each time).
Meanwhile, from 127.0.0.100-199, attackers loop over:

- the metrics port: a 99 999 999 999-byte Content-Length, 1 MiB heads, connections
  that pipeline 500 scrapes and never read (held 15 s), 200 unfinished heads held
  open, heads trickled a byte a second, wrong basic-auth passwords;
- the probe port: 200 idle connections, Hellos trickled a byte a second, garbage
  frames, frames announcing 200 000 bytes.

A legitimate scraper (plain sockets, HTTP/1.0) scrapes every second and records each
scrape's time and status; the agent's RSS, threads and descriptors are sampled from
/proc every 5 s. The result: every scrape answered or not, the latency's median and
maximum, and the first and last minute's RSS/threads/fds side by side (flat, or not).

    bench/agent_hostile_soak.py [--minutes 10] [--out bench/RESULTS-agent-hostile.md]
"""

import argparse
import base64
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTTLAB = os.path.join(ROOT, "target", "release", "rttlab")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def connect(port, src="127.0.0.1", timeout=2):
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    return s


def footprint(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "Threads:")):
                k, v = line.split(":")
                out[k] = int(v.split()[0])
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


def scrape(port, login):
    """One HTTP/1.0 GET /metrics: (status, seconds)."""
    t0 = time.monotonic()
    try:
        s = connect(port, timeout=5)
        auth = base64.b64encode(login.encode()).decode()
        s.sendall(
            f"GET /metrics HTTP/1.0\r\nHost: x\r\nAuthorization: Basic {auth}\r\n\r\n".encode()
        )
        data = b""
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
        s.close()
        code = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
    except OSError:
        code = 0
    return code, time.monotonic() - t0


def write_peers(path, port, ids):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump([{"targets": [f"127.0.0.{i}:{port}" for i in ids], "labels": {"soak": "1"}}], f)
    os.rename(tmp, path)


def attack_metrics(port, stop, counts):
    """The metrics-port attacks, round after round until `stop`."""
    rnd = random.Random(1)
    held = []
    while not stop.is_set():
        src = f"127.0.0.{100 + rnd.randrange(100)}"
        kind = rnd.randrange(6)
        try:
            if kind == 0:
                s = connect(port, src)
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n")
                s.recv(512)
                s.close()
            elif kind == 1:
                s = connect(port, src)
                s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * (1 << 20))
                s.close()
            elif kind == 2:
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.bind((src, 0))
                s.connect(("127.0.0.1", port))
                s.setblocking(False)
                try:
                    s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 500)
                except OSError:
                    pass
                held.append((time.monotonic() + 15, s))
            elif kind == 3:
                for _ in range(200):
                    s = connect(port, f"127.0.0.{100 + rnd.randrange(100)}")
                    s.send(b"GET /metrics HTTP/1.1\r\nHo")
                    held.append((time.monotonic() + 20, s))
            elif kind == 4:
                s = connect(port, src)
                s.send(b"GET /metrics HTTP/1.1\r\n")
                held.append((time.monotonic() + 30, s))
            else:
                s = connect(port, src)
                bad = base64.b64encode(f"prometheus:guess{rnd.random()}".encode()).decode()
                s.sendall(f"GET /metrics HTTP/1.0\r\nAuthorization: Basic {bad}\r\n\r\n".encode())
                s.recv(512)
                s.close()
            counts["metrics"] += 1
        except OSError:
            counts["metrics_refused"] += 1
        now = time.monotonic()
        keep = []
        for until, s in held:
            if now >= until:
                s.close()
            else:
                keep.append((until, s))
        held = keep[-2000:]
        for _, s in keep[:-2000]:
            s.close()
        # Trickle one byte into each held head.
        for _, s in held[-50:]:
            try:
                s.send(b"x")
            except OSError:
                pass
        time.sleep(0.05)
    for _, s in held:
        s.close()


def attack_probe(port, stop, counts):
    """The probe-port attacks."""
    rnd = random.Random(2)
    held = []
    while not stop.is_set():
        src = f"127.0.0.{100 + rnd.randrange(100)}"
        kind = rnd.randrange(4)
        try:
            if kind == 0:
                for _ in range(50):
                    held.append((time.monotonic() + 20, connect(port, f"127.0.0.{100 + rnd.randrange(100)}")))
            elif kind == 1:
                s = connect(port, src)
                s.send(b"\x00\x00\x00\x40{")
                held.append((time.monotonic() + 20, s))
            elif kind == 2:
                s = connect(port, src)
                s.sendall(bytes(rnd.randrange(256) for _ in range(300)))
                s.close()
            else:
                s = connect(port, src)
                s.send((200000).to_bytes(4, "big") + b"{")
                held.append((time.monotonic() + 20, s))
            counts["probe"] += 1
        except OSError:
            counts["probe_refused"] += 1
        now = time.monotonic()
        keep = [(u, s) for u, s in held if u > now]
        for u, s in held:
            if u <= now:
                s.close()
        held = keep[-400:]
        for _, s in held[-20:]:
            try:
                s.send(b"x")
            except OSError:
                pass
        time.sleep(0.05)
    for _, s in held:
        s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "RESULTS-agent-hostile.md"))
    args = ap.parse_args()
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (16384, 16384))
    tmp = tempfile.mkdtemp(prefix="rttlab-soak-")
    serve_port, probe_port, metrics_port = free_port(), free_port(), free_port()
    serve = subprocess.Popen(
        [RTTLAB, "serve", "-L", f"0.0.0.0:{serve_port}", "-q"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    # Basic auth on, as exporters are deployed; the hash is htpasswd's bcrypt.
    login = "prometheus:soak"
    web = os.path.join(tmp, "web.yml")
    try:
        h = subprocess.run(["htpasswd", "-nbBC", "8", "", "soak"], capture_output=True,
                           text=True, check=True).stdout.strip().lstrip(":")
    except (OSError, subprocess.CalledProcessError):
        sys.exit("htpasswd is needed for the bcrypt hash: apt-get install apache2-utils")
    with open(web, "w") as f:
        f.write(f"basic_auth_users:\n  prometheus: '{h}'\n")
    extra = ["--web-config", web]
    peers = os.path.join(tmp, "peers.json")
    rnd = random.Random(3)
    write_peers(peers, serve_port, rnd.sample(range(2, 62), 40))
    time.sleep(0.5)
    agent = subprocess.Popen(
        [RTTLAB, "agent", "--peers-file", peers, "--probes", "icmp,tcp_rr,udp_rr",
         "-L", f"127.0.0.1:{probe_port}", "--metrics-listen", f"127.0.0.1:{metrics_port}"] + extra,
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "agent.log"), "w"),
    )
    time.sleep(2)
    stop = threading.Event()
    counts = {"metrics": 0, "metrics_refused": 0, "probe": 0, "probe_refused": 0}
    attackers = [
        threading.Thread(target=attack_metrics, args=(metrics_port, stop, counts)),
        threading.Thread(target=attack_probe, args=(probe_port, stop, counts)),
    ]
    for t in attackers:
        t.start()
    scrapes, marks = [], []
    t_end = time.monotonic() + args.minutes * 60
    next_churn = next_mark = time.monotonic()
    try:
        while time.monotonic() < t_end:
            if agent.poll() is not None:
                print("the agent exited", file=sys.stderr)
                break
            scrapes.append(scrape(metrics_port, login))
            now = time.monotonic()
            if now >= next_churn:
                write_peers(peers, serve_port, rnd.sample(range(2, 62), 40))
                next_churn = now + 10
            if now >= next_mark:
                marks.append((now, footprint(agent.pid)))
                next_mark = now + 5
            time.sleep(max(0.0, 1 - (time.monotonic() - now)))
    finally:
        stop.set()
        for t in attackers:
            t.join()
        alive = agent.poll() is None
        agent.terminate()
        agent.wait(10)
        serve.terminate()
        serve.wait(10)
    ok = [t for c, t in scrapes if c == 200]
    minute = lambda sel: [m for t, m in marks if sel(t)]
    first = minute(lambda t: t - marks[0][0] < 60)
    last = minute(lambda t: marks[-1][0] - t < 60)
    med = lambda xs, k: statistics.median(x[k] for x in xs)
    rows = [
        ("RSS (KiB)", med(first, "VmRSS"), med(last, "VmRSS"), max(m["VmRSS"] for _, m in marks)),
        ("threads", med(first, "Threads"), med(last, "Threads"), max(m["Threads"] for _, m in marks)),
        ("descriptors", med(first, "fds"), med(last, "fds"), max(m["fds"] for _, m in marks)),
    ]
    report = [
        "# rttlab agent under a mixed hostile load (bench/agent_hostile_soak.py)",
        "",
        f"{args.minutes:g} minutes on loopback; 40 of 60 peers probed (icmp, tcp_rr, udp_rr), "
        "the set changed every 10 s; basic auth on (bcrypt cost 8).",
        f"Attack rounds: metrics port {counts['metrics']} ({counts['metrics_refused']} refused at connect), "
        f"probe port {counts['probe']} ({counts['probe_refused']} refused at connect).",
        f"Agent alive at the end: {'yes' if alive else 'NO'}.",
        "",
        f"Scrapes: {len(ok)} of {len(scrapes)} answered 200; "
        f"median {statistics.median(ok) * 1e3:.1f} ms, max {max(ok) * 1e3:.1f} ms."
        if ok else f"Scrapes: 0 of {len(scrapes)} answered.",
        "",
        "| agent | first minute (median) | last minute (median) | max |",
        "|---|---|---|---|",
    ] + [f"| {n} | {a:.0f} | {b:.0f} | {c:.0f} |" for n, a, b, c in rows]
    report += [
        "",
        "Minute by minute (medians of the 5 s samples):",
        "",
        "| minute | RSS (KiB) | threads | descriptors |",
        "|---|---|---|---|",
    ]
    t_first = marks[0][0]
    for k in range(int((marks[-1][0] - t_first) // 60) + 1):
        m = [x for t, x in marks if k <= (t - t_first) / 60 < k + 1]
        if m:
            report.append(f"| {k + 1} | {med(m, 'VmRSS'):.0f} | {med(m, 'Threads'):.0f} | {med(m, 'fds'):.0f} |")
    text = "\n".join(report) + "\n"
    print(text)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
