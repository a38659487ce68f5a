#!/usr/bin/env python3
"""Generate the passive-RTT test corpus from real Linux TCP traffic in a lab.

Run as root from the repository root:  sudo python3 tests/corpus/generate.py
Needs: tcpdump, dumpcap and tshark (apt-get install tcpdump tshark), nftables, and
pping built locally (PPING=/path/to/pping; pping is not packaged and its code is
never committed: build it from github.com/pollere/pping with libtins-dev).

It builds `rttlab lab up --name corpus` (a ⇄ r ⇄ b, 1 ms each way), runs traffic
between a and b, captures it on the router (a gateway that sees both directions) and
on host a (an end host), and writes gzip-compressed captures plus, for each, what the
peers report on it:
  NAME.pping.txt    pping -m (TS samples, pping's rules)
  NAME.pping-text.txt.gz  pping's text lines (TZ=UTC), gzip
  NAME.tshark.txt   tshark's tcp.analysis.ack_rtt per frame (seq/ACK samples)
On r the emulator transmits through PACKET_QDISC_BYPASS, which capture taps do not
see, so r's captures take each frame as it arrives: on both interfaces (`-i any`,
Linux cooked, or pcapng with one interface block per interface).
The captures:
  rr-v4-gw.pcap.gz       TCP_RR over IPv4, timestamps on, captured on r (µs pcap, Linux cooked v1)
  rr-v4-host.pcap.gz     the same traffic captured on a (the end host: local samples)
  rr-v6-gw.pcapng.gz     TCP_RR over IPv6, captured on r's two interfaces (pcapng, 2 IDBs)
                         (32-byte messages: libtins, under pping, drops IPv6 packets
                         that the snap length cut)
  bulk-loss-gw.pcap.gz   bulk transfer through 3 % random loss (nftables on b), ns pcap
  rr-fast-gw.pcap.gz     TCP_RR with no emulated delay (RTT ~0.1–0.3 ms)
  crr-gw.pcapng.gz       2000 short connections (TCP_CRR), pcapng
"""
import gzip
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "corpus")
RTTLAB = os.path.join(ROOT, "target", "release", "rttlab")
PPING = os.environ.get("PPING", "/tmp/peers/pping/pping")
LAB = "corpus"
NS = {n: f"rttlab-lab-{LAB}-{n}" for n in "arb"}
SNAP = "128"


def sh(*args, **kw):
    return subprocess.run(args, check=True, **kw)


def ns(node, *args, **kw):
    return sh("ip", "netns", "exec", NS[node], *args, **kw)


def bg(node, *args, out=subprocess.DEVNULL):
    return subprocess.Popen(["ip", "netns", "exec", NS[node], *args], stdout=out, stderr=subprocess.DEVNULL)


def capture(node, ifaces, path, nano=False):
    """Start a capture; returns the process."""
    if path.endswith(".pcapng"):
        args = ["dumpcap", "-q", "-s", SNAP, "-w", path]
        for i in ifaces:
            args += ["-i", i]
        args += ["-f", "tcp"]
    else:
        args = ["tcpdump", "-U", "-s", SNAP, "-i", ifaces[0], "-w", path]
        if ifaces[0] == "any":
            # Cooked v1: libtins (pping) cannot read v2.
            args += ["-y", "LINUX_SLL"]
        if nano:
            args += ["--time-stamp-precision", "nano"]
        args += ["tcp"]
    p = bg(node, *args)
    time.sleep(1.0)
    return p


def stop(p, path=None):
    time.sleep(0.5)
    p.terminate()
    p.wait()
    if path and path.endswith(".pcapng"):
        # dumpcap writes each interface's frames in batches; sort them by time, as
        # one capture point would have seen them.
        sh("reordercap", path, path + ".sorted", stdout=subprocess.DEVNULL)
        os.replace(path + ".sorted", path)


def a_addr(v6=False):
    info = subprocess.run([RTTLAB, "lab", "list", "--json"], capture_output=True, text=True, check=True).stdout
    import json
    for line in info.splitlines():
        v = json.loads(line)
        if v["info"]["name"] == LAB:
            return v["info"]["b"]["ipv6" if v6 else "ipv4"]
    raise SystemExit("lab not found")


def peers(name):
    path = os.path.join(OUT, name)
    raw = os.path.join("/tmp", name[:-3])
    with gzip.open(path, "rb") as src, open(raw, "wb") as dst:
        shutil.copyfileobj(src, dst)
    with open(os.path.join(OUT, name.split(".")[0] + ".pping.txt"), "w") as f:
        sh(PPING, "-r", raw, "-q", "-m", stdout=f)
    text = os.path.join("/tmp", name.split(".")[0] + ".pping-text.txt")
    with open(text, "w") as f:
        sh(PPING, "-r", raw, "-q", stdout=f, env=dict(os.environ, TZ="UTC"))
    gz(text)
    shutil.move(text + ".gz", os.path.join(OUT, os.path.basename(text) + ".gz"))
    with open(os.path.join(OUT, name.split(".")[0] + ".tshark.txt"), "w") as f:
        sh("tshark", "-r", raw, "-n", "-Y", "tcp.analysis.ack_rtt", "-T", "fields",
           "-E", "separator=/t", "-e", "frame.number", "-e", "frame.time_epoch",
           "-e", "tcp.analysis.ack_rtt", stdout=f, stderr=subprocess.DEVNULL)
    os.unlink(raw)


def gz(path):
    with open(path, "rb") as src, gzip.GzipFile(path + ".gz", "wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    os.unlink(path)
    return os.path.basename(path) + ".gz"


def main():
    if os.geteuid() != 0:
        raise SystemExit("run as root: the corpus is captured in network namespaces")
    if not os.path.exists(PPING):
        raise SystemExit(f"pping not found at {PPING}; set PPING=/path/to/pping")
    sh("cargo", "build", "--release", "--quiet", cwd=ROOT)
    subprocess.run([RTTLAB, "lab", "down", "--name", LAB], capture_output=True)
    sh(RTTLAB, "lab", "up", "--name", LAB, "--delay", "1ms", stdout=subprocess.DEVNULL)
    made = []
    try:
        time.sleep(2.5)  # DAD/MLD settle
        b4, b6 = a_addr(False), a_addr(True)
        server = bg("b", RTTLAB, "serve")
        time.sleep(0.5)

        # TCP_RR IPv4, on the gateway and on host a at once.
        gw = os.path.join(OUT, "rr-v4-gw.pcap")
        host = os.path.join(OUT, "rr-v4-host.pcap")
        p1, p2 = capture("r", ["any"], gw), capture("a", ["eth0"], host)
        ns("a", RTTLAB, "rr", "-H", b4, "-r", "1,2", "-n", "600", "-w", "1ms", stdout=subprocess.DEVNULL)
        stop(p1), stop(p2)
        made += [gz(gw), gz(host)]

        # TCP_RR IPv6 on both router interfaces (pcapng, two interfaces).
        v6 = os.path.join(OUT, "rr-v6-gw.pcapng")
        p = capture("r", ["to-a", "to-b"], v6)
        ns("a", RTTLAB, "rr", "-H", b6, "-r", "32,32", "-n", "300", "-w", "2ms", stdout=subprocess.DEVNULL)
        stop(p, v6)
        made.append(gz(v6))

        # Bulk through 3 % random loss of a→b data at b's input.
        sh("ip", "netns", "exec", NS["b"], "nft", "-f", "-", input=(
            "table inet rttlab_corpus {\n chain input {\n  type filter hook input priority 0;\n"
            "  tcp dport 5001 numgen random mod 100 < 3 drop\n }\n}\n").encode())
        bulk = os.path.join(OUT, "bulk-loss-gw.pcap")
        p = capture("r", ["any"], bulk, nano=True)
        sink = bg("b", "python3", "-c",
                  "import socket;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
                  "s.bind(('0.0.0.0',5001));s.listen();c,_=s.accept()\nwhile c.recv(65536):pass")
        time.sleep(0.5)
        ns("a", "python3", "-c",
           f"import socket;s=socket.create_connection(('{b4}',5001));"
           "s.setsockopt(socket.IPPROTO_TCP,socket.TCP_CONGESTION,b'cubic');"
           "s.sendall(b'x'*1500000);s.close()")
        sink.wait(timeout=30)
        stop(p)
        ns("b", "nft", "delete", "table", "inet", "rttlab_corpus")
        made.append(gz(bulk))

        # Sub-millisecond RTTs (no emulated delay): seed 000's sampler artifact.
        sh(RTTLAB, "lab", "set", "--name", LAB, "--delay", "0ms", stdout=subprocess.DEVNULL)
        fast = os.path.join(OUT, "rr-fast-gw.pcap")
        p = capture("r", ["any"], fast)
        ns("a", RTTLAB, "rr", "-H", b4, "-r", "1,2", "-n", "1000", "-w", "1ms", stdout=subprocess.DEVNULL)
        stop(p)
        made.append(gz(fast))
        sh(RTTLAB, "lab", "set", "--name", LAB, "--delay", "1ms", stdout=subprocess.DEVNULL)

        # Thousands of short connections.
        crr = os.path.join(OUT, "crr-gw.pcapng")
        p = capture("r", ["to-a", "to-b"], crr)
        ns("a", RTTLAB, "rr", "-t", "TCP_CRR", "-H", b4, "-n", "2000", stdout=subprocess.DEVNULL)
        stop(p, crr)
        made.append(gz(crr))
        server.terminate()
    finally:
        subprocess.run([RTTLAB, "lab", "down", "--name", LAB], capture_output=True)
    for m in made:
        peers(m)
    for m in made:
        print(m, os.path.getsize(os.path.join(OUT, m)), "bytes")


if __name__ == "__main__":
    main()
