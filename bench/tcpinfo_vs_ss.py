#!/usr/bin/env python3
"""rttlab tcpinfo against ss -tin on the same socket set: N loopback connections
(2N sockets), both tools dumping every socket with its tcp_info, alternated, medians
of wall time. Also a dump filtered to one port (rttlab filters in the kernel).
Usage: bench/tcpinfo_vs_ss.py [--pairs 5000] [--runs 15]"""
import argparse, os, resource, socket, statistics, subprocess, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTTLAB = os.path.join(ROOT, "target", "release", "rttlab")


def timeit(argv):
    t = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t, p.stdout.count(b"\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=15)
    a = ap.parse_args()
    need = 2 * a.pairs + 100
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if need > hard:
        raise SystemExit(f"{2 * a.pairs} sockets need RLIMIT_NOFILE {need}; the hard limit is {hard} (lower --pairs or raise it)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    lst = socket.socket(); lst.bind(("127.0.0.1", 0)); lst.listen(4096)
    port = lst.getsockname()[1]
    keep = []
    for _ in range(a.pairs):
        c = socket.create_connection(("127.0.0.1", port)); s, _ = lst.accept()
        keep += [c, s]
    one = keep[0].getsockname()[1]
    cases = {
        "all sockets, ss -tin": ["ss", "-tin"],
        "all sockets, rttlab tcpinfo --csv": [RTTLAB, "tcpinfo", "--csv"],
        "all sockets, rttlab tcpinfo --json": [RTTLAB, "tcpinfo", "--json"],
        "one port, ss -tin sport = :P": ["ss", "-tin", "sport", "=", f":{one}"],
        "one port, rttlab tcpinfo --sport P --csv": [RTTLAB, "tcpinfo", "--sport", str(one), "--csv"],
    }
    res = {k: [] for k in cases}
    lines = {}
    for _ in range(a.runs):
        for k, argv in cases.items():
            t, n = timeit(argv)
            res[k].append(t); lines[k] = n
    out = os.path.join(ROOT, "bench", "RESULTS-tcpinfo.md")
    with open(out, "w") as f:
        f.write(f"# rttlab tcpinfo against ss -tin\n\nRecorded by `bench/tcpinfo_vs_ss.py --pairs {a.pairs} --runs {a.runs}` on {time.strftime('%Y-%m-%d')}, "
                f"kernel {os.uname().release}: {a.pairs} loopback connections ({2 * a.pairs} established sockets, plus the listener), every tool run "
                f"{a.runs} times, alternating; wall time of the whole command, medians.\n\n")
        f.write("| case | median ms | output lines | ratio to ss |\n|---|---:|---:|---:|\n")
        base = {"all": statistics.median(res["all sockets, ss -tin"]), "one": statistics.median(res["one port, ss -tin sport = :P"])}
        for k, v in res.items():
            m = statistics.median(v)
            f.write(f"| {k} | {m * 1e3:.1f} | {lines[k]} | {m / base['all' if k.startswith('all') else 'one']:.2f} |\n")
    print(open(out).read())


if __name__ == "__main__":
    main()
