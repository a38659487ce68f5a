#!/usr/bin/env python3
"""Fidelity of the lab's link emulator, measured from packets captured on both sides of
the router (tcpdump in host a and host b, nanosecond stamps), never from the emulator's
own log.

  delay   one-way delay error = (stamp at b − stamp at a) − configured delay
          − serialisation (frame bytes × 8 ÷ rate), ICMP echo requests and replies,
          sleep and busy-poll modes, no rate limit and 10 Mbit/s
  loss    requests seen at a vs at b, 10 % Bernoulli, against the 99 % binomial interval
  rate    frame bytes per second arriving at b from a 15 Mbit/s UDP flood into 10 Mbit/s
  blackout  a 100 ms blackout scheduled 1 s ahead in a 10 kpps UDP stream: the gap at b,
          in a's stamps, against the window `lab set` reported
  forwarding  iperf3 UDP through an unimpaired lab: 1472-byte and 18-byte payloads

Usage: sudo python3 bench/lab_fidelity.py [--quick] > bench/RESULTS-lab.md
Needs: tcpdump, iperf3, ping; a release build (cargo build --release).
"""
import json
import math
import os
import statistics
import struct
import subprocess
import sys
import time

RTTLAB = os.path.join(os.path.dirname(__file__), "..", "target", "release", "rttlab")
TMP = "/tmp/rttlab-fidelity"
NAME = "fidelity"
QUICK = "--quick" in sys.argv


def lab(*args, check=True):
    return subprocess.run([RTTLAB, "lab", *args], capture_output=True, text=True, check=check)


def up(*imp):
    lab("down", "--name", NAME, check=False)
    lab("up", "--name", NAME, *imp)
    time.sleep(2.5)  # the hosts' IPv6 start-up chatter


def down():
    lab("down", "--name", NAME, check=False)


def exec_(node, *cmd, **kw):
    return subprocess.run([RTTLAB, "lab", "exec", "--name", NAME, node, "--", *cmd], **kw)


class Capture:
    """tcpdump on eth0 of hosts a and b."""

    def __init__(self, filt):
        os.makedirs(TMP, exist_ok=True)
        self.files = {n: f"{TMP}/{n}.pcap" for n in "ab"}
        self.procs = [
            subprocess.Popen(
                [RTTLAB, "lab", "exec", "--name", NAME, n, "--", "tcpdump", "-i", "eth0", "-w",
                 self.files[n], "--immediate-mode", "-Z", "root", "--time-stamp-precision", "nano",
                 "-B", "65536", filt],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for n in "ab"
        ]
        time.sleep(1.0)

    def stop(self):
        time.sleep(0.5)
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait()
        return {n: read_pcap(f) for n, f in self.files.items()}


def read_pcap(path):
    """[(stamp_s, frame_bytes)] from a nanosecond pcap."""
    d = open(path, "rb").read()
    out, off = [], 24
    while off + 16 <= len(d):
        s, ns, cl, ol = struct.unpack("<IIII", d[off:off + 16])
        out.append((s + ns * 1e-9, d[off + 16:off + 16 + cl]))
        off += 16 + cl
    return out


def icmp_key(f):
    if f[12:14] != b"\x08\x00":
        return None
    ihl = (f[14] & 15) * 4
    icmp = f[14 + ihl:]
    return (icmp[0], struct.unpack(">HH", icmp[4:8]))


def udp_seq(f):
    if f[12:14] != b"\x08\x00" or f[23] != 17:
        return None
    ihl = (f[14] & 15) * 4
    return struct.unpack(">I", f[14 + ihl + 8:14 + ihl + 12])[0]


def steal():
    """(steal, total) jiffies of all CPUs so far (/proc/stat): the hypervisor's share."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return f[7], sum(f)


def steal_since(s0):
    s1 = steal()
    return 100.0 * (s1[0] - s0[0]) / max(1, s1[1] - s0[1])


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p / 100))]


def delay(mode, rate):
    d_ms = 10
    imp = ["--delay", f"{d_ms}ms"] + (["--rate", rate] if rate else []) + ["--emulator", mode]
    up(*imp)
    cap = Capture("icmp")
    n = 300 if QUICK else 1000
    s0 = steal()
    exec_("a", "ping", "-4", "-q", "-c", str(n), "-i", "0.005", "b", stdout=subprocess.DEVNULL)
    st = steal_since(s0)
    pk = cap.stop()
    down()
    bps = {"10mbit": 10e6}.get(rate)
    errs = {"a2b": [], "b2a": []}
    ta = {icmp_key(f): (t, len(f)) for t, f in pk["a"] if icmp_key(f)}
    tb = {icmp_key(f): (t, len(f)) for t, f in pk["b"] if icmp_key(f)}
    for k, (t_a, ln) in ta.items():
        if k in tb:
            ser = ln * 8 / bps if bps else 0.0
            if k[0] == 8:
                errs["a2b"].append((tb[k][0] - t_a - d_ms / 1e3 - ser) * 1e6)
            else:
                errs["b2a"].append((t_a - tb[k][0] - d_ms / 1e3 - ser) * 1e6)
    rows = []
    for dname, e in errs.items():
        rows.append((mode, rate or "none", dname, len(e), statistics.median(e), pct(e, 99), max(e), st))
    return rows


def loss():
    up("--loss", "10%")
    cap = Capture("icmp[icmptype] == 8")
    n = 2000 if QUICK else 5000
    exec_("a", "ping", "-4", "-q", "-c", str(n), "-i", "0.002", "-W", "1", "b", stdout=subprocess.DEVNULL)
    pk = cap.stop()
    down()
    sent, got = len(pk["a"]), len(pk["b"])
    p = 0.1
    sigma = math.sqrt(sent * p * (1 - p))
    lo, hi = sent * p - 2.576 * sigma, sent * p + 2.576 * sigma
    lost = sent - got
    return sent, lost, lo, hi


UDP_SENDER = """
import socket, struct, sys, time
dst, rate_pps, secs, size = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
t0 = time.perf_counter(); i = 0; pad = bytes(size - 4)
while True:
    due = t0 + i / rate_pps
    now = time.perf_counter()
    if now - t0 > secs: break
    if now < due: continue
    s.sendto(struct.pack('>I', i) + pad, (dst, 9)); i += 1
"""


def rate_check():
    up("--rate", "10mbit", "--queue", "1000p")
    cap = Capture("udp")
    # 1472-byte payloads (1514-byte frames) at 1250/s = 15 Mbit/s for 3 s.
    exec_("a", "python3", "-c", UDP_SENDER, "198.18.0.2", "1250", "3", "1472")
    pk = cap.stop()
    down()
    b = [(t, len(f)) for t, f in pk["b"] if udp_seq(f) is not None]
    t0 = b[0][0]
    win = [(t, ln) for t, ln in b if 0.5 <= t - t0 <= 2.5]
    bits = sum(ln for _, ln in win[1:]) * 8
    return bits / (win[-1][0] - win[0][0])


def blackout():
    up()
    cap = Capture("udp")
    sender = subprocess.Popen([RTTLAB, "lab", "exec", "--name", NAME, "a", "--", "python3", "-c", UDP_SENDER,
                               "198.18.0.2", "10000", "2.5", "64"])
    time.sleep(0.5)
    out = lab("set", "--name", NAME, "--blackout", "100ms", "--at", "+1s").stdout
    sender.wait()
    pk = cap.stop()
    down()
    words = out.split()
    start = int(words[words.index("from") + 1]) * 1e-9
    end = int(words[words.index("to") + 1]) * 1e-9
    got = {udp_seq(f) for _, f in pk["b"]}
    sent = [(t, udp_seq(f)) for t, f in pk["a"] if udp_seq(f) is not None]
    lost = [t for t, s in sent if s not in got]
    kept_before = max(t for t, s in sent if s in got and t < start + 0.05)
    kept_after = min(t for t, s in sent if s in got and t > start + 0.05)
    m_start = (kept_before + min(lost)) / 2
    m_end = (max(lost) + kept_after) / 2
    return (m_start - start) * 1e3, (m_end - m_start) * 1e3, len(lost), (end - start) * 1e3


def if_counter(node, name):
    out = exec_(node, "cat", f"/sys/class/net/eth0/statistics/{name}", capture_output=True, text=True).stdout
    return int(out)


def forwarding(payload):
    """Frames per second the router delivers into b's interface (b's own rx_packets
    counter) while iperf3 in a floods UDP; a's tx_packets says what was offered."""
    up()
    srv = subprocess.Popen([RTTLAB, "lab", "exec", "--name", NAME, "b", "--", "iperf3", "-s", "-1"],
                           stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    a0, b0, t0 = if_counter("a", "tx_packets"), if_counter("b", "rx_packets"), time.time()
    exec_("a", "iperf3", "-c", "b", "-4", "-u", "-b", "0", "-l", str(payload), "-t", "3" if QUICK else "5",
          stdout=subprocess.DEVNULL)
    a1, b1, t1 = if_counter("a", "tx_packets"), if_counter("b", "rx_packets"), time.time()
    st = json.loads(lab("list", "--json").stdout.splitlines()[0])
    srv.wait()
    down()
    secs = t1 - t0
    frame = max(payload + 42, 60)
    delivered = (b1 - b0) / secs
    return (a1 - a0) / secs, delivered, delivered * frame * 8 / 1e6, st["a2b"]["counters"]["ring_drops"]


def main():
    print("# Lab emulator fidelity\n")
    print(f"Host: {os.uname().release}, {os.cpu_count()} vCPUs; `{' '.join(sys.argv)}`; "
          f"{time.strftime('%Y-%m-%d %H:%M')}. Measured from tcpdump captures on eth0 of hosts a and b.\n")
    print("## One-way delay error (µs; 10 ms configured; ICMP echo every 5 ms)\n")
    print("The last column is the hypervisor's steal time during the run (/proc/stat): "
          "above a few per cent, the tails are the host's, not the emulator's.\n")
    print("| mode | rate | dir | n | median | P99 | max | steal % |\n|---|---|---|---|---|---|---|---|")
    for mode in ["poll", "sleep"]:
        for rate in [None, "10mbit"]:
            for r in delay(mode, rate):
                print("| %s | %s | %s | %d | %.1f | %.1f | %.1f | %.0f |" % r)
    sent, lost, lo, hi = loss()
    print(f"\n## Loss (10 % configured)\n\n{lost} of {sent} echo requests lost "
          f"({100 * lost / sent:.2f} %); 99 % binomial interval {lo:.0f}–{hi:.0f}: "
          f"{'inside' if lo <= lost <= hi else 'OUTSIDE'}.\n")
    r = rate_check()
    print(f"## Rate (10 Mbit/s configured, 15 Mbit/s offered)\n\n{r / 1e6:.3f} Mbit/s of frames at b "
          f"({100 * (r / 10e6 - 1):+.2f} %).\n")
    s_err, length, n_lost, asked = blackout()
    print(f"## Blackout ({asked:.0f} ms asked, 1 s ahead, 10 kpps UDP)\n\nstart error {s_err:+.3f} ms, "
          f"measured length {length:.3f} ms, {n_lost} packets lost (100 µs spacing: resolution ±0.1 ms).\n")
    print("## Forwarding (iperf3 UDP, no impairment, one direction)\n")
    print("Counted by the hosts' own interface counters (a: tx_packets, b: rx_packets); the "
          "emulator's receive-ring drops say what the kernel dropped before the emulator saw it.\n")
    print("| payload B | frames/s offered by a | frames/s into b | Mbit/s of frames into b | ring drops |\n|---|---|---|---|---|")
    for payload in [1472, 18]:
        offered, delivered, mbit, drops = forwarding(payload)
        print(f"| {payload} | {offered:.0f} | {delivered:.0f} | {mbit:.0f} | {drops} |")


if __name__ == "__main__":
    main()
