#!/usr/bin/env python3
"""The agent's passive layers on a link carrying the replayed test corpus at full rate:
the agent's CPU and memory with the in-kernel engine and with the ring engine, and the
receiving CPUs' time, alternated rounds, medians.

Usage: sudo bench/agent_passive.py [--rounds 3] [--loops 200] [--out FILE]

Two namespaces joined by a veth: tcpreplay (Debian's) in X sends the corpus's four
request/response, bulk-with-loss and short-connection captures (IPv4 and IPv6, 23 408
frames, Linux cooked frames given an Ethernet header and every frame padded to
its IP length) back to back, --loops times, as fast as it can (--topspeed), into Y, where
`rttlab agent --passive-iface` watches every port the captures use, with the corpus's
hosts as its peers. The frames are addressed to the lab's MAC addresses, so Y's kernel
drops each after its ingress hook and the capture: the engines see all of them and
nothing else runs. tcpreplay runs on CPU 0 and Y's receive path on CPU 1 (RPS); the
agent is not pinned.

Per run: frames sent (tcpreplay's count; the engines' rttlab_passive_packets_total is
the witness that each engine saw every one), the agent's CPU time per frame
(/proc/PID/stat utime + stime, less what the same agent spends idle for as long),
its peak RSS (VmHWM), CPU 1's busy time per frame (/proc/stat: wall clock less idle),
the samples each engine timed (rttlab_passive_samples_total) and what it could not keep
(rttlab_passive_dropped_total). The agent probes its peers (ICMP once a second, to
addresses that exist in no namespace: nothing answers, nothing leaves Y).

Needs root, tcpreplay, editcap (wireshark-common), curl, and rttlab built
(cargo build --release).
"""
import argparse
import gzip
import os
import re
import shutil
import signal
import struct
import statistics
import subprocess
import sys
import tempfile
import time

from passive_bpf import cpu_busy  # busy seconds of each CPU, from /proc/stat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTTLAB = os.path.join(ROOT, "target", "release", "rttlab")
X, Y = "rttlab-apb-x", "rttlab-apb-y"
CAPTURES = ["rr-v4-gw.pcap.gz", "rr-v6-gw.pcapng.gz", "bulk-loss-gw.pcap.gz", "crr-gw.pcapng.gz"]
PORTS = "12866,44159,5001,44489,37239"
PEERS = ["198.18.0.1", "198.18.0.2", "[2001:2::1]", "[2001:2::2]"]
METRICS_PORT = 19812


def sh(*a, **kw):
    return subprocess.run(a, check=True, capture_output=True, text=True, **kw)


def setup():
    teardown()
    for n in (X, Y):
        sh("ip", "netns", "add", n)
    sh("ip", "link", "add", "rx", "netns", X, "type", "veth", "peer", "name", "ry", "netns", Y)
    sh("ip", "-n", X, "link", "set", "rx", "up")
    sh("ip", "-n", Y, "link", "set", "ry", "up")
    sh("ip", "-n", Y, "link", "set", "lo", "up")
    sh("ip", "-n", Y, "addr", "add", "192.0.2.1/30", "dev", "ry")
    sh("ip", "netns", "exec", Y, "sh", "-c", "echo 2 > /sys/class/net/ry/queues/rx-0/rps_cpus")


def teardown():
    for n in (X, Y):
        subprocess.run(["ip", "netns", "del", n], capture_output=True)


def pcap_frames(path):
    """(link type, frame) of each packet of a pcap file (µs or ns, either byte order)."""
    data = open(path, "rb").read()
    magic = struct.unpack("<I", data[:4])[0]
    order = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    link = struct.unpack(order + "I", data[20:24])[0]
    at = 24
    while at + 16 <= len(data):
        incl = struct.unpack(order + "I", data[at + 8:at + 12])[0]
        yield link, data[at + 16:at + 16 + incl]
        at += 16 + incl


def corpus(tmp):
    """The four captures as one Ethernet pcap, each after the other: Linux cooked
    frames given an Ethernet header, and every frame padded to its IP length (the
    captures kept 128 bytes of each), so the kernel takes them as sent."""
    out = os.path.join(tmp, "corpus.pcap")
    n = 0
    with open(out, "wb") as w:
        w.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for name in CAPTURES:
            raw = os.path.join(tmp, name[:-3])
            with gzip.open(os.path.join(ROOT, "tests", "corpus", name)) as src, open(raw, "wb") as dst:
                shutil.copyfileobj(src, dst)
            if raw.endswith(".pcapng"):
                sh("editcap", "-F", "pcap", raw, raw + ".pcap")
                raw += ".pcap"
            for link, f in pcap_frames(raw):
                if link == 113:  # Linux cooked v1: the protocol at 14, the packet at 16
                    f = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01" + f[14:16] + f[16:]
                elif link != 1:
                    raise SystemExit(f"{name}: link type {link}")
                proto = struct.unpack(">H", f[12:14])[0]
                if proto == 0x0800:
                    want = 14 + struct.unpack(">H", f[16:18])[0]
                elif proto == 0x86DD:
                    want = 14 + 40 + struct.unpack(">H", f[18:20])[0]
                else:
                    continue
                f = f + bytes(max(0, min(want, 1514) - len(f)))
                n += 1
                w.write(struct.pack("<IIII", n // 1000000, n % 1000000, len(f), len(f)) + f)
    return out, n


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def hwm_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def scrape():
    body = sh("ip", "netns", "exec", Y, "curl", "-sf", f"http://127.0.0.1:{METRICS_PORT}/metrics").stdout
    out = {}
    for line in body.splitlines():
        m = re.match(r"(rttlab_passive_[a-z_]+)(\{[^}]*\})? ([0-9.e+]+)$", line)
        if m:
            key = m.group(1) + (m.group(2) or "")
            out[key] = float(m.group(3))
    return out


def total(metrics, name):
    return sum(v for k, v in metrics.items() if k.split("{")[0] == name)


def run(engine, pcap, loops, tmp):
    peers = os.path.join(tmp, "peers.json")
    with open(peers, "w") as f:
        f.write('[{"targets": [%s]}]' % ",".join(f'"{p}:12866"' for p in PEERS))
    agent = subprocess.Popen(
        ["ip", "netns", "exec", Y, RTTLAB, "agent", "--peers-file", peers, "--probes", "icmp",
         "--interval", "1s", "--metrics-listen", f"127.0.0.1:{METRICS_PORT}",
         "--listen", "127.0.0.1:19813",
         "--passive-iface", "ry", "--passive-port", PORTS, "--passive-engine", engine,
         "--passive-rate-limit", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, RTTLAB_STATE_DIR=os.path.join(tmp, "state")))
    try:
        return measure(agent, engine, pcap, loops)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def measure(agent, engine, pcap, loops):
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20:
        try:
            m = scrape()
            if any(k.startswith("rttlab_passive_engine_info") for k in m):
                break
        except subprocess.CalledProcessError:
            pass
        if agent.poll() is not None:
            raise SystemExit(f"agent {engine} ended: {agent.stderr.read()}")
        time.sleep(0.2)
    else:
        raise SystemExit(f"agent {engine}: no metrics")
    pid = agent.pid  # ip netns exec execs the agent in its place
    # The agent at rest for as long as the replay will take: its own cost of probing.
    idle0 = cpu_s(pid)
    time.sleep(2.0)
    idle_rate = (cpu_s(pid) - idle0) / 2.0
    m0, a0, c0, w0 = scrape(), cpu_s(pid), cpu_busy(), time.monotonic()
    out = sh("ip", "netns", "exec", X, "taskset", "-c", "0", "tcpreplay", "-i", "rx", "--topspeed",
             f"--loop={loops}", "--preload-pcap", pcap).stdout
    wall = time.monotonic() - w0
    time.sleep(1.5)  # the ring engine drains, the in-kernel engine's counters are read
    m1, a1, c1 = scrape(), cpu_s(pid), cpu_busy()
    hwm = hwm_kib(pid)
    agent.send_signal(signal.SIGTERM)
    try:
        err = agent.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:
        agent.kill()
        err = agent.communicate()[1]
    sent = int(re.search(r"Actual: (\d+) packets", out).group(1))
    seen = total(m1, "rttlab_passive_packets_total") - total(m0, "rttlab_passive_packets_total")
    agent_s = (a1 - a0) - idle_rate * (wall + 1.5)
    return {
        "sent": sent,
        "seen": seen,
        "rate": sent / wall,
        "agent_ns": max(agent_s, 0.0) * 1e9 / sent,
        "cpu1_ns": (c1[1] - c0[1]) * 1e9 / sent,
        "hwm_mib": hwm / 1024,
        "samples": total(m1, "rttlab_passive_samples_total") - total(m0, "rttlab_passive_samples_total"),
        "dropped": total(m1, "rttlab_passive_dropped_total") - total(m0, "rttlab_passive_dropped_total"),
        "engine": [k for k in m1 if k.startswith("rttlab_passive_engine_info")],
        "err": err.strip().splitlines()[-3:],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--loops", type=int, default=200)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "RESULTS-agent-passive.md"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (namespaces, the in-kernel engine)")
    for tool in ("tcpreplay", "editcap", "curl"):
        if not shutil.which(tool):
            raise SystemExit(f"needs {tool}")
    tmp = tempfile.mkdtemp(prefix="rttlab-apb-")
    rows = {"bpf": [], "ring": []}
    try:
        setup()
        pcap, n_frames = corpus(tmp)
        for r in range(a.rounds):
            for engine in (("bpf", "ring") if r % 2 == 0 else ("ring", "bpf")):
                row = run(engine, pcap, a.loops, tmp)
                rows[engine].append(row)
                print(f"round {r + 1} {engine}: {row['sent']} frames at {row['rate'] / 1e3:.0f} k/s, "
                      f"seen {row['seen']:.0f}, agent {row['agent_ns']:.0f} ns/frame, "
                      f"CPU1 {row['cpu1_ns']:.0f} ns/frame, RSS {row['hwm_mib']:.1f} MiB, "
                      f"samples {row['samples']:.0f}, dropped {row['dropped']:.0f}", file=sys.stderr)
    finally:
        teardown()
        shutil.rmtree(tmp, ignore_errors=True)
    med = {e: {k: statistics.median(x[k] for x in v) for k in
               ("sent", "seen", "rate", "agent_ns", "cpu1_ns", "hwm_mib", "samples", "dropped")}
           for e, v in rows.items()}
    kernel = open("/proc/sys/kernel/osrelease").read().strip()
    lines = [
        "# The agent's passive layers: in-kernel engine against the ring",
        "",
        f"`sudo bench/agent_passive.py --rounds {a.rounds} --loops {a.loops}` on Linux {kernel}, "
        f"{os.cpu_count()} vCPUs, {time.strftime('%Y-%m-%d')}: the test corpus's four captures "
        f"({n_frames} frames) replayed back to back by tcpreplay --topspeed into a veth watched by "
        "`rttlab agent --passive-iface` (every port of the captures, their hosts as peers, "
        "`--passive-rate-limit 0`: every TSval and segment timed). Medians of "
        f"{a.rounds} alternated rounds a engine.",
        "",
        "| engine | frames sent | seen by the engine | replay rate (k frames/s) | agent CPU (ns/frame) "
        "| receiving CPU (ns/frame) | agent peak RSS (MiB) | samples | dropped for room |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in ("bpf", "ring"):
        m = med[e]
        lines.append(f"| {e} | {m['sent']:.0f} | {m['seen']:.0f} | {m['rate'] / 1e3:.0f} | {m['agent_ns']:.1f} "
                     f"| {m['cpu1_ns']:.0f} | {m['hwm_mib']:.1f} | {m['samples']:.0f} | {m['dropped']:.0f} |")
    ratio = med["bpf"]["agent_ns"] / med["ring"]["agent_ns"] if med["ring"]["agent_ns"] else float("nan")
    lines += [
        "",
        f"The agent's own CPU a frame with the in-kernel engine is {ratio:.3f}× the ring engine's "
        "(the in-kernel engine's work is in the receiving CPU's softirq, its column; the "
        "ring's is both there, copying each frame into the ring, and in the agent).",
        "",
        "Per round:",
        "",
        "| round | engine | frames | rate (k/s) | agent ns/frame | CPU1 ns/frame | RSS MiB | samples |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e, v in rows.items():
        for i, x in enumerate(v):
            lines.append(f"| {i + 1} | {e} | {x['sent']} | {x['rate'] / 1e3:.0f} | {x['agent_ns']:.1f} "
                         f"| {x['cpu1_ns']:.0f} | {x['hwm_mib']:.1f} | {x['samples']:.0f} |")
    open(a.out, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
