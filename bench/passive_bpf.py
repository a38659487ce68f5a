#!/usr/bin/env python3
"""The in-kernel passive engine, per packet, against ePPing and the ring engine, on a
forwarding path: CPU per packet where the packets are, in the engines' user space,
and in their programs alone. Alternated rounds, medians.

Usage: sudo bench/passive_bpf.py [--rounds 5] [--packets 1000000] [--rate 250000]
                                 [--flows 1024] [--epping DIR] [--out FILE]

Three namespaces: A sends through a veth to B, which forwards to C (a blackhole route
there). The engines watch B's interface from A (ingress and egress). bench/tcp_blast.c
(built here with cc) sends from A, pinned to CPU 0: --flows conversations of small
TCP segments with timestamps and their ACKs, each closing a TS and a seq/ACK loop,
paced at --rate frames/s (0: as fast as one CPU sends). B's receive path runs on
CPU 1 alone (RPS on its interface): the "one core" the engines' programs share with
forwarding. Every engine's user space runs on CPU 0 with the sender.

Per run: frames forwarded (C's counter: the witness that nothing was lost), CPU 1's
busy time per frame (/proc/stat: its idle time is measured, not sampled), the
engine's user space per frame (/proc/PID/task/*/schedstat: run time in ns), samples
written. A second pass turns on kernel.bpf_stats_enabled and reads the programs' own
run time per frame (bpftool prog show: run_time_ns / run_cnt) — the stamps cost
tens of ns, so that pass is kept apart.

ePPing (xdp-project/bpf-examples, pping/) is not packaged: build it (see the issue's
notes) and give its folder in --epping; it runs from there, with -I tc (the same hook
as rttlab's), -l (time every packet, as rttlab does; without it ePPing asks the FIB
whether each packet is local) and -c 0 (its map-cleanup iterators are tracing
programs; the benchmark's flows need no cleanup). Its code is never committed.
Without CAP_SYS_RESOURCE (containers) ePPing's first step, raising RLIMIT_MEMLOCK to
infinity, fails and it exits; since Linux 5.11 BPF memory is charged to the memory cgroup,
not that limit, so in the scratch build drop the `return EXIT_FAILURE;` after its "Could not
set rlimit to infinity" message and it runs unchanged otherwise.
Needs root, cc, bpftool, and rttlab built (cargo build --release).
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTTLAB = os.path.join(ROOT, "target", "release", "rttlab")
A, B, C = "rttlab-pbpf-a", "rttlab-pbpf-b", "rttlab-pbpf-c"
OUT = "/dev/shm/rttlab-pbpf.out"
PROGRAMS = {"rttlab_ingress", "rttlab_egress", "pping_tc_ingress", "pping_tc_egress"}


def sh(*a, **kw):
    return subprocess.run(a, check=True, capture_output=True, text=True, **kw)


def setup():
    for n in (A, B, C):
        subprocess.run(["ip", "netns", "del", n], capture_output=True)
        sh("ip", "netns", "add", n)
    sh("ip", "link", "add", "lva", "netns", A, "type", "veth", "peer", "name", "lvb", "netns", B)
    sh("ip", "link", "add", "lbc", "netns", B, "type", "veth", "peer", "name", "lvc", "netns", C)
    sh("ip", "-n", A, "link", "set", "lva", "address", "02:72:74:00:00:01", "up")
    sh("ip", "-n", B, "link", "set", "lvb", "address", "02:72:74:00:00:02", "up")
    sh("ip", "-n", B, "link", "set", "lbc", "up")
    sh("ip", "-n", C, "link", "set", "lvc", "address", "02:72:74:00:00:03", "up")
    sh("ip", "-n", B, "addr", "add", "192.0.2.1/30", "dev", "lbc")
    sh("ip", "-n", C, "addr", "add", "192.0.2.2/30", "dev", "lvc")
    sh("ip", "-n", B, "neigh", "add", "192.0.2.2", "lladdr", "02:72:74:00:00:03", "dev", "lbc",
       "nud", "permanent")
    sh("ip", "-n", B, "route", "add", "198.18.0.0/15", "via", "192.0.2.2")
    sh("ip", "-n", C, "route", "add", "blackhole", "198.18.0.0/15")
    sh("ip", "netns", "exec", B, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    # B's receive path on CPU 1 only, whichever CPU sends.
    sh("ip", "netns", "exec", B, "sh", "-c", "echo 2 > /sys/class/net/lvb/queues/rx-0/rps_cpus")


def teardown():
    for n in (A, B, C):
        subprocess.run(["ip", "netns", "del", n], capture_output=True)


def forwarded():
    out = sh("ip", "-n", C, "-s", "link", "show", "lvc").stdout.splitlines()
    return int(out[3].split()[1])


def cpu_busy():
    """Busy seconds of each CPU so far, as the wall clock less its idle and iowait time:
    the kernel measures those (nohz), where user, system and softirq time are sampled
    a tick at a time (USER_HZ 100)."""
    now = time.monotonic()
    busy = {}
    for line in open("/proc/stat"):
        m = re.match(r"cpu(\d+) (.*)", line)
        if m:
            v = [int(x) for x in m.group(2).split()]
            busy[int(m.group(1))] = now - (v[3] + v[4]) / 100.0
    return busy


def runtime_ns(pid):
    """Run time of every thread of `pid` so far (schedstat's first field, ns)."""
    total = 0
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                total += int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        pass
    return total


def programs():
    """(run time ns, runs) of the engines' tc programs now loaded (bpf_stats)."""
    import json
    t = n = 0
    for p in json.loads(sh("bpftool", "prog", "show", "-j").stdout):
        if p.get("name") in PROGRAMS:
            t += p.get("run_time_ns", 0)
            n += p.get("run_cnt", 0)
    return t, n


def attached(names):
    import json
    return any(p.get("name") in names for p in json.loads(sh("bpftool", "prog", "show", "-j").stdout))


def configs(epping):
    r = ["taskset", "-c", "0", RTTLAB, "passive", "-i", "lvb", "--netns", B]
    pping_rule = ["--method", "ts", "--ts-rule", "pping"]
    out = [
        ("no program", None, None),
        ("ring engine, every sample", r + ["--engine", "ring"], None),
        ("ring engine, 100 ms", r + ["--engine", "ring", "--rate-limit", "100ms"], None),
        ("ring engine, aggregated, 100 ms",
         r + ["--engine", "ring", "--rate-limit", "100ms", "--aggregate", "1s"], None),
        ("rttlab bpf, every sample", r + ["--engine", "bpf", "--rate-limit", "0"], "rttlab_ingress"),
        ("rttlab bpf, 100 ms", r + ["--engine", "bpf", "--rate-limit", "100ms"], "rttlab_ingress"),
        ("rttlab bpf, ePPing's rule, every sample", r + ["--engine", "bpf", "--rate-limit", "0"] + pping_rule,
         "rttlab_ingress"),
        ("rttlab bpf, ePPing's rule, 100 ms", r + ["--engine", "bpf", "--rate-limit", "100ms"] + pping_rule,
         "rttlab_ingress"),
        ("rttlab bpf, aggregated, 100 ms",
         r + ["--engine", "bpf", "--rate-limit", "100ms", "--aggregate", "1s"], "rttlab_ingress"),
    ]
    if epping:
        e = ["ip", "netns", "exec", B, "taskset", "-c", "0", "./pping", "-i", "lvb", "-I", "tc", "-l", "-c", "0"]
        out += [
            ("ePPing, every sample", e + ["-r", "0"], "pping_tc_ingress"),
            ("ePPing, 100 ms", e, "pping_tc_ingress"),
            ("ePPing, aggregated, 100 ms", e + ["-a", "1"], "pping_tc_ingress"),
        ]
    return out


def run(cfg, a, blast, epping, stats):
    name, argv, prog = cfg
    engine = None
    if argv:
        cwd = epping if argv[0] == "ip" else ROOT
        engine = subprocess.Popen(argv, cwd=cwd, stdout=open(OUT, "w"), stderr=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        while prog and not attached({prog}):
            if engine.poll() is not None or time.monotonic() - t0 > 20:
                raise SystemExit(f"{name}: never attached: {engine.stderr.read()}")
            time.sleep(0.1)
        time.sleep(1.0)
    f0, c0, p0 = forwarded(), cpu_busy(), programs() if stats else None
    u0 = runtime_ns(engine.pid) if engine else 0
    w0 = time.monotonic()
    sent = sh("ip", "netns", "exec", A, "taskset", "-c", "0", blast, "lva", str(a.packets), str(a.flows),
              "30", str(a.rate)).stdout
    time.sleep(0.3)
    wall = time.monotonic() - w0
    f1, c1, p1 = forwarded(), cpu_busy(), programs() if stats else None
    u1 = runtime_ns(engine.pid) if engine else 0
    err = ""
    if engine:
        engine.send_signal(signal.SIGINT)
        try:
            err = engine.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            engine.kill()
            err = engine.communicate()[1]
    frames = int(re.search(r"sent (\d+)", sent).group(1))
    lines = sum(1 for _ in open(OUT)) if argv else 0
    dropped = re.search(r"kernel: \d+ packets to the capture socket, (\d+) dropped", err)
    lost = re.search(r"(\d+) samples or flows lost", err)
    row = {
        "frames": frames,
        "forwarded": f1 - f0,
        "rate": frames / (wall - 0.3),
        "cpu1_ns": (c1[1] - c0[1]) * 1e9 / frames,
        "cpus_ns": (sum(c1.values()) - sum(c0.values())) * 1e9 / frames,
        "user_ns": (u1 - u0) / frames,
        "lines": lines,
        "ring_dropped": int(dropped.group(1)) if dropped else 0,
        "lost": int(lost.group(1)) if lost else 0,
    }
    if stats and p1[1] > p0[1]:
        row["prog_ns"] = (p1[0] - p0[0]) / (p1[1] - p0[1])
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--stats-rounds", type=int, default=3)
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=250_000)
    ap.add_argument("--flows", type=int, default=1024)
    ap.add_argument("--epping", default=os.environ.get("EPPING", "/tmp/peers/bpf-examples/pping"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "RESULTS-passive-bpf.md"))
    a = ap.parse_args()
    epping = a.epping if os.path.exists(os.path.join(a.epping, "pping_kern.o")) else None
    if not epping:
        print(f"no ePPing in {a.epping}: its rows are left out", file=sys.stderr)
    work = tempfile.mkdtemp()
    blast = os.path.join(work, "tcp_blast")
    sh("cc", "-O2", "-Wall", "-o", blast, os.path.join(ROOT, "bench", "tcp_blast.c"))
    cfgs = configs(epping)
    rows = {c[0]: [] for c in cfgs}
    progs = {c[0]: [] for c in cfgs if c[2]}
    stats_was = open("/proc/sys/kernel/bpf_stats_enabled").read().strip()
    setup()
    try:
        for k in range(a.rounds):
            order = cfgs[k % len(cfgs):] + cfgs[:k % len(cfgs)]
            for c in order:
                rows[c[0]].append(run(c, a, blast, epping, False))
                print(f"round {k + 1} {c[0]}: {rows[c[0]][-1]}", file=sys.stderr)
        sh("sysctl", "-qw", "kernel.bpf_stats_enabled=1")
        for k in range(a.stats_rounds):
            for c in [c for c in cfgs if c[2]]:
                progs[c[0]].append(run(c, a, blast, epping, True)["prog_ns"])
                print(f"stats {k + 1} {c[0]}: {progs[c[0]][-1]:.0f} ns", file=sys.stderr)
    finally:
        sh("sysctl", "-qw", f"kernel.bpf_stats_enabled={stats_was}")
        teardown()
        shutil.rmtree(work, ignore_errors=True)
        if os.path.exists(OUT):
            os.unlink(OUT)
    report(a, rows, progs, epping)


NOTES = [
    "- *Program per frame* is the kernel's own account of the tc programs (kernel.bpf_stats_enabled, "
    "run_time_ns / run_cnt over both hooks, a pass of its own); the CPU columns are the whole receive "
    "path, forwarding included, so their ratios are diluted by what every configuration pays. "
    "*CPU 1 above no program* subtracts that.",
    "- One core at 1 M frames/s: the programs alone reach it (the first goal line); this VM's veth "
    "forwarding, a few µs a frame with no program at all, does not, so the rate a core carries is "
    "bounded here by the path, not by the engine.",
    "- The in-kernel engine's user space works per sample, not per packet: every line printed is "
    "formatted there, so with the same output its cost falls with the sampling (every sample, then "
    "100 ms), and with `--aggregate` nothing per sample reaches it. The ring engine reads every frame "
    "whatever it prints.",
    "- ePPing runs with `-c 0`: its map-cleanup programs are BPF iterators this machine refuses "
    "(EPERM), and the benchmark's flows need no cleanup. Aggregated, it reads its maps less often "
    "than rttlab (which also sweeps its maps), so its user space is lower there; both are a few ns a frame.",
]


def med(rows, key):
    return statistics.median(r[key] for r in rows)


def report(a, rows, progs, epping):
    kernel = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    out = [
        "# The in-kernel passive engine per packet, against ePPing and the ring engine",
        "",
        f"Recorded by `sudo bench/passive_bpf.py --rounds {a.rounds} --packets {a.packets} --rate {a.rate} "
        f"--flows {a.flows}` on {time.strftime('%Y-%m-%d')}, kernel {kernel}, 2 vCPUs. "
        f"{a.flows} conversations of 8-byte segments and their ACKs, all with timestamps, "
        f"paced at {a.rate:,} frames/s through a veth into namespace B, which forwards them; the engines "
        "watch B's interface. B's receive path (and so every program) runs on CPU 1 alone; the sender and the "
        "engines' user space on CPU 0. Medians of alternated rounds.",
        "",
        "| engine | forwarded / sent | CPU 1 per frame | both CPUs per frame | engine's user space per frame "
        "| program per frame | lines written |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, rs in rows.items():
        fw = f"{sum(r['forwarded'] for r in rs):,} / {sum(r['frames'] for r in rs):,}"
        prog = f"{statistics.median(progs[name]):.0f} ns" if progs.get(name) else "–"
        extra = ""
        if any(r["ring_dropped"] for r in rs):
            extra = f" ({sum(r['ring_dropped'] for r in rs):,} frames dropped by the ring)"
        if any(r["lost"] for r in rs):
            extra += f" ({sum(r['lost'] for r in rs):,} samples lost: ring buffer full)"
        out.append(
            f"| {name} | {fw} | {med(rs, 'cpu1_ns'):.0f} ns | {med(rs, 'cpus_ns'):.0f} ns | "
            f"{med(rs, 'user_ns'):.0f} ns | {prog} | {med(rs, 'lines'):,.0f}{extra} |"
        )
    base = med(rows["no program"], "cpu1_ns")
    out += ["", "## Goals", ""]

    def ratio(x, y, key):
        return med(rows[x], key) / med(rows[y], key)

    def prog_ratio(x, y):
        return statistics.median(progs[x]) / statistics.median(progs[y])

    on = "rttlab bpf, 100 ms"
    prog_on = statistics.median(progs[on])
    out.append(
        f"- **One core, sampling on.** The program's own cost, {prog_on:.0f} ns a frame, is "
        f"{1e9 / prog_on / 1e6:.2f} M frames/s of one core; with this VM's forwarding around it "
        f"(no program: {base:.0f} ns a frame on CPU 1) the core forwards and times "
        f"{1e9 / med(rows[on], 'cpu1_ns') / 1e3:.0f} k frames/s "
        f"(no program: {1e9 / base / 1e3:.0f} k)."
    )
    if epping:
        pairs = [
            ("rttlab bpf, 100 ms", "ePPing, 100 ms"),
            ("rttlab bpf, ePPing's rule, 100 ms", "ePPing, 100 ms"),
            ("rttlab bpf, every sample", "ePPing, every sample"),
            ("rttlab bpf, ePPing's rule, every sample", "ePPing, every sample"),
            ("rttlab bpf, aggregated, 100 ms", "ePPing, aggregated, 100 ms"),
        ]
        out.append("- **Against ePPing, same frames** (rttlab / ePPing; below 1 is cheaper):")
        out.append("")
        out.append("  | rttlab | ePPing | CPU 1 per frame | CPU 1 above no program | program per frame "
                   "| user space per frame |")
        out.append("  |---|---|---:|---:|---:|---:|")
        for x, y in pairs:
            above = (med(rows[x], "cpu1_ns") - base) / max(1.0, med(rows[y], "cpu1_ns") - base)
            out.append(
                f"  | {x} | {y} | {ratio(x, y, 'cpu1_ns'):.2f} | {above:.2f} | {prog_ratio(x, y):.2f} "
                f"| {ratio(x, y, 'user_ns'):.2f} |"
            )
        out.append("")
    out.append("- **User space against the ring engine**, the same options (below 0.1: a tenth):")
    out.append("")
    out.append("  | options | in-kernel engine | ring engine | ratio |")
    out.append("  |---|---:|---:|---:|")
    for opts in ("every sample", "100 ms", "aggregated, 100 ms"):
        x, y = f"rttlab bpf, {opts}", f"ring engine, {opts}"
        out.append(
            f"  | {opts} | {med(rows[x], 'user_ns'):.0f} ns | {med(rows[y], 'user_ns'):.0f} ns "
            f"| {ratio(x, y, 'user_ns'):.3f} |"
        )
    out += ["", "## Reading", ""] + NOTES
    if epping:
        rev = subprocess.run(["git", "-C", epping, "rev-parse", "HEAD"], capture_output=True,
                             text=True).stdout.strip() or "unknown"
        out += ["", f"ePPing: xdp-project/bpf-examples {rev}, `pping/`, built locally with one change "
                "(its failure to raise RLIMIT_MEMLOCK made a warning: Linux 5.11 and later do not charge BPF "
                "to it), run as `pping -i lvb -I tc -l -c 0` (`-r 0` for every sample, `-a 1` aggregated)."]
    text = "\n".join(out) + "\n"
    print(text)
    with open(a.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
