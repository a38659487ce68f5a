#!/usr/bin/env python3
"""Whole-program benchmark: rttlab rr against netperf and sockperf on the same path.

Alternates the tools run by run (so drift and noise hit all of them alike) on
loopback and on a veth pair between two network namespaces, at fixed CPU placements
(-T 0,0: both ends on vCPU 0; -T 0,1: different vCPUs), for TCP_RR and UDP_RR with
14-byte requests and responses (sockperf's minimum). Reports medians over the
alternations and the ratio rttlab/peer. Client CPU per transaction comes from the
client process's own rusage (wait4), the same way for every tool.

Then pacing: the wait between a response and the next request (-w 1ms), measured from
packets captured on loopback with nanosecond timestamps (tcpdump), for sleep, hybrid
and spin pacing.

Needs root (namespaces), sockperf (Debian), netperf built from its public source
(never committed; pass its directory with NETPERF_DIR), tcpdump.
Usage: NETPERF_DIR=/path/to/netperf/src bench/rr_peers.py [--runs 5] [--seconds 3]
"""
import argparse, json, os, re, shutil, statistics, struct, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTTLAB = os.path.join(ROOT, "target", "release", "rttlab")
NP = os.environ.get("NETPERF_DIR", "")
NS_A, NS_B = "rttlab-bench-a", "rttlab-bench-b"
A4, B4 = "198.18.210.1", "198.18.210.2"


def sh(*a, check=True):
    return subprocess.run(a, check=check, capture_output=True, text=True)


def in_ns(ns, argv):
    return (["ip", "netns", "exec", ns] if ns else []) + argv


def netns_up():
    netns_down()
    sh("ip", "netns", "add", NS_A); sh("ip", "netns", "add", NS_B)
    sh("ip", "link", "add", "rtbench-a", "netns", NS_A, "type", "veth", "peer", "name", "rtbench-b", "netns", NS_B)
    for ns, dev, ip in ((NS_A, "rtbench-a", A4), (NS_B, "rtbench-b", B4)):
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "addr", "add", ip + "/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
    for _ in range(100):
        if sh("ip", "netns", "exec", NS_A, "ping", "-c1", "-W1", B4, check=False).returncode == 0:
            return
        time.sleep(0.05)


def netns_down():
    for ns in (NS_A, NS_B):
        sh("ip", "netns", "del", ns, check=False)


def timed(argv, rss=False):
    """Run argv under GNU time: (stdout, stderr, cpu seconds[, max RSS KiB])."""
    tf = tempfile.NamedTemporaryFile(delete=False)
    tf.close()
    p = subprocess.run(["/usr/bin/time", "-f", "%U %S %M", "-o", tf.name] + argv, capture_output=True, text=True)
    u, s, m = open(tf.name).read().split()[-3:]
    os.unlink(tf.name)
    if rss:
        return p.stdout, float(u) + float(s), int(m)
    return p.stdout, p.stderr, float(u) + float(s), p.returncode


class Servers:
    def __init__(self, ns, host, rcpu):
        self.procs = []
        pin = ["taskset", "-c", str(rcpu)]
        self.procs.append(subprocess.Popen(in_ns(ns, [RTTLAB, "serve", "-q", "--listen", f"{host}:12866"]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.procs.append(subprocess.Popen(in_ns(ns, [os.path.join(NP, "netserver"), "-D", "-p", "12865", "-L", host]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.procs.append(subprocess.Popen(in_ns(ns, pin + ["sockperf", "server", "-i", host, "-p", "11111", "--tcp"]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.procs.append(subprocess.Popen(in_ns(ns, pin + ["sockperf", "server", "-i", host, "-p", "11112"]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.0)

    def stop(self):
        for p in self.procs:
            p.kill(); p.wait()


def rttlab(ns, host, test, lcpu, rcpu, secs):
    out, err, cpu, rc = timed(in_ns(ns, [RTTLAB, "rr", "-H", host, "-t", test, "-r", "14,14", "-l", str(secs), "-T", f"{lcpu},{rcpu}",
                                         "-o", "MEAN_LATENCY,P99_LATENCY,THROUGHPUT,TRANSACTIONS"]))
    mean, p99, tps, n = map(float, out.strip().splitlines()[-1].split(","))
    return mean, p99, tps, cpu / n * 1e6


def netperf(ns, host, test, lcpu, rcpu, secs):
    out, err, cpu, rc = timed(in_ns(ns, [os.path.join(NP, "netperf"), "-H", host, "-p", "12865", "-t", test, "-l", str(secs), "-T", f"{lcpu},{rcpu}", "-P", "0", "--",
                                         "-r", "14,14", "-o", "MEAN_LATENCY,P99_LATENCY,THROUGHPUT,ELAPSED_TIME"]))
    mean, p99, tps, el = map(float, out.strip().splitlines()[-1].split(","))
    return mean, p99, tps, cpu / (tps * el) * 1e6


def sockperf(ns, host, test, lcpu, rcpu, secs):
    argv = ["taskset", "-c", str(lcpu), "sockperf", "ping-pong", "-i", host, "-t", str(secs), "-m", "14", "--full-rtt"]
    argv += ["--tcp", "-p", "11111"] if test == "TCP_RR" else ["-p", "11112"]
    out, err, cpu, rc = timed(in_ns(ns, argv))
    text = out + err
    mean = float(re.search(r"avg-rtt=([\d.]+)", text).group(1))
    p99 = float(re.search(r"percentile 99\.000 =\s+([\d.]+)", text).group(1))
    m = re.search(r"\[Total Run\] RunTime=([\d.]+) sec; Warm up time=(\d+) msec; SentMessages=(\d+)", text)
    total_s, n = float(m.group(1)), int(m.group(3))
    v = re.search(r"\[Valid Duration\] RunTime=([\d.]+) sec; SentMessages=(\d+)", text)
    return mean, p99, int(v.group(2)) / float(v.group(1)), cpu / n * 1e6


TOOLS = {"rttlab": rttlab, "netperf": netperf, "sockperf": sockperf}


def read_pcap(path):
    """(ts_ns, src_port, payload_len) of TCP/IPv4 packets in a nanosecond pcap on lo."""
    data = open(path, "rb").read()
    magic = struct.unpack("<I", data[:4])[0]
    assert magic == 0xA1B23C4D, "expected a nanosecond pcap"
    link = struct.unpack("<I", data[20:24])[0]
    off, out = 24, []
    while off + 16 <= len(data):
        s, ns, incl, _ = struct.unpack("<IIII", data[off:off + 16])
        pkt = data[off + 16: off + 16 + incl]
        off += 16 + incl
        l2 = 14 if link == 1 else 16 if link == 113 else 0
        ip = pkt[l2:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 15) * 4
        tot = struct.unpack(">H", ip[2:4])[0]
        tcp = ip[ihl:]
        doff = (tcp[12] >> 4) * 4
        out.append((s * 10**9 + ns, struct.unpack(">H", tcp[0:2])[0], tot - ihl - doff))
    return out


def pacing(n=2000, wait_us=1000):
    """Wait error per pace mode: on the wire (next request − previous response − wait,
    which includes the client's wake-up on the response) and in-process (intended send
    time → just before send(), rttlab's own pacing_error)."""
    rows = []
    serve = subprocess.Popen([RTTLAB, "serve", "-q", "--listen", "127.0.0.1:12866"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        for pace in ("sleep", "hybrid", "spin"):
            for cpus in ("0,0", "0,1"):
                pcap = tempfile.mktemp(suffix=".pcap")
                td = subprocess.Popen(["tcpdump", "-Z", "root", "--immediate-mode", "-i", "lo", "-s", "96", "--time-stamp-precision=nano", "-w", pcap, "tcp port 20002"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1.0)
                out = subprocess.run([RTTLAB, "rr", "-H", "127.0.0.1", "-P", "20002", "-n", str(n), "-w", f"{wait_us}us", "--pace", pace, "-T", cpus,
                                      "--json"], capture_output=True, text=True).stdout
                time.sleep(0.5)
                td.terminate(); td.wait()
                pk = [p for p in read_pcap(pcap) if p[2] > 0]
                os.unlink(pcap)
                errs = []
                for a, b in zip(pk, pk[1:]):
                    if a[1] == 20002 and b[1] != 20002:  # response, then the next request
                        errs.append((b[0] - a[0]) / 1e3 - wait_us)
                errs.sort()
                q = lambda f: errs[min(len(errs) - 1, int(f * len(errs)))]
                j = json.loads(out)
                pe = j["pacing_error"]["percentiles_us"]
                lat = j["rtt"]["percentiles_us"]
                rows.append((pace, cpus, len(errs), q(0.5), q(0.99), pe["p50"], pe["p99"], j["rtt"]["mean_us"], lat["p99"]))
    finally:
        serve.kill(); serve.wait()
    return rows


def unpinned_10ms(n=500):
    """Reported latency at -w 10ms with both ends unpinned, per pace mode: a spinning
    client owns a vCPU and pushes the server onto the other one."""
    rows = []
    serve = subprocess.Popen([RTTLAB, "serve", "-q", "--listen", "127.0.0.1:12866"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        for pace in ("sleep", "hybrid", "spin"):
            j = json.loads(subprocess.run([RTTLAB, "rr", "-H", "127.0.0.1", "-n", str(n), "-w", "10ms", "--pace", pace, "--json"], capture_output=True, text=True).stdout)
            lat = j["rtt"]["percentiles_us"]
            rows.append((pace, j["rtt"]["mean_us"], lat["p50"], lat["p99"], " ".join(map(str, j["local_placement"]["ran_on_cpus"])),
                         " ".join(map(str, j["remote_placement"]["ran_on_cpus"]))))
    finally:
        serve.kill(); serve.wait()
    return rows


def memory():
    """Max RSS of the client for a short and a long run: histograms, not sample lists."""
    out = []
    for secs in (2, 30):
        _, _, kib = timed([RTTLAB, "rr", "-l", str(secs), "-T", "0,0", "-o", "TRANSACTIONS"], rss=True)
        out.append((secs, kib))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "RESULTS-rr.md"))
    a = ap.parse_args()
    if not NP or not os.path.exists(os.path.join(NP, "netperf")):
        sys.exit("set NETPERF_DIR to the directory holding netperf and netserver (built from netperf's public source)")
    for t in ("sockperf", "tcpdump", "/usr/bin/time"):
        if not shutil.which(t):
            sys.exit(f"{t} is missing: apt-get install sockperf tcpdump time")
    results = {}
    netns_up()
    try:
        for path, ns_c, ns_s, host in (("loopback", None, None, "127.0.0.1"), ("veth", NS_A, NS_B, B4)):
            for lcpu, rcpu in ((0, 0), (0, 1)):
                srv = Servers(ns_s, host, rcpu)
                try:
                    for test in ("TCP_RR", "UDP_RR"):
                        for r in range(a.runs):
                            for tool, fn in TOOLS.items():
                                try:
                                    v = fn(ns_c, host, test, lcpu, rcpu, a.seconds)
                                except Exception as e:  # a failed run is reported, not fatal
                                    print(f"{tool} {path} {test} -T {lcpu},{rcpu}: {e}", file=sys.stderr)
                                    continue
                                results.setdefault((path, f"{lcpu},{rcpu}", test, tool), []).append(v)
                                print(path, lcpu, rcpu, test, tool, ["%.2f" % x for x in v], file=sys.stderr)
                finally:
                    srv.stop()
    finally:
        netns_down()
    pace_rows = pacing()
    slow_rows = unpinned_10ms()
    mem_rows = memory()
    kern = os.uname().release
    with open(a.out, "w") as f:
        f.write(f"# rttlab rr against netperf and sockperf\n\nRecorded by `bench/rr_peers.py --runs {a.runs} --seconds {a.seconds}` on {time.strftime('%Y-%m-%d')}, "
                f"kernel {kern}, {os.cpu_count()} vCPUs. netperf 2.7.x built from its public source (--enable-histogram --enable-burst --enable-intervals), "
                f"sockperf 3.7 from Debian. Request and response 14 bytes (sockperf's minimum). Medians of {a.runs} alternating runs of {a.seconds} s; "
                "client CPU is user+system time of the client process (GNU time) per transaction, the same for every tool.\n\n")
        f.write("| path | -T | test | tool | mean µs | P99 µs | trans/s | client CPU µs/trans | mean ratio rttlab/tool | P99 ratio | trans/s ratio | CPU ratio |\n")
        f.write("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
        for (path, cpus, test, tool), vals in sorted(results.items()):
            med = [statistics.median(x) for x in zip(*vals)]
            ours = results.get((path, cpus, test, "rttlab"))
            if ours and tool != "rttlab":
                om = [statistics.median(x) for x in zip(*ours)]
                ratio = f"{om[0]/med[0]:.3f} | {om[1]/med[1]:.3f} | {om[2]/med[2]:.3f} | {om[3]/med[3]:.3f}"
            else:
                ratio = " | | | "
            f.write(f"| {path} | {cpus} | {test} | {tool} | {med[0]:.2f} | {med[1]:.2f} | {med[2]:.0f} | {med[3]:.2f} | {ratio} |\n")
        f.write("\n## Pacing: `-w 1ms`\n\nWire error = (next request − previous response) − 1 ms, from a tcpdump capture on lo "
                "with nanosecond timestamps; it includes the client's wake-up when the response arrives, which is not the pacing's doing. "
                "Pacing error = intended send time → just before send(), rttlab's own `pacing_error`. 2000 transactions per row; "
                "the latency columns are what rttlab reports for the same run.\n\n")
        f.write("| pace | -T | waits | wire error P50 µs | wire error P99 µs | pacing error P50 µs | pacing error P99 µs | reported mean µs | reported P99 µs |\n"
                "|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
        for row in pace_rows:
            f.write("| %s | %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n" % row)
        f.write("\n## `-w 10ms`, both ends unpinned\n\nThe reported round trip per pace mode (500 transactions). netperf's spin build reports "
                "179 µs here (issue 2) because the spinning client owns a vCPU and the server must run on the other, halted one.\n\n")
        f.write("| pace | mean µs | P50 µs | P99 µs | client ran on | server ran on |\n|---|---:|---:|---:|---|---|\n")
        for row in slow_rows:
            f.write("| %s | %.2f | %.2f | %.2f | %s | %s |\n" % row)
        f.write("\n## Memory\n\nMax RSS of the client (GNU time), TCP_RR on loopback at -T 0,0:\n\n| run | max RSS KiB |\n|---|---:|\n")
        for secs, kib in mem_rows:
            f.write(f"| {secs} s | {kib} |\n")
    print(open(a.out).read())


if __name__ == "__main__":
    main()
