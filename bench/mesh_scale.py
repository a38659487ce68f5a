#!/usr/bin/env python3
"""What a mesh by levels costs at 1 000, 10 000 and 100 000 hosts, beside a full mesh
and goldpinger's N², from costs measured in the lab (bench/fleet-costs.json, written by
bench/fleet_lab.sh) and on the wire (below). Prints a markdown table.

    bench/mesh_scale.py [--costs bench/fleet-costs.json] [--per-group 2]
                        [--scrape-s 15] [--interval-s 1]

Per host: peers = (its rack's size − 1) + Σ over outer levels of (sibling groups) · K
(docs/AGENT.md); probes/s = peers · probes / interval; bytes/s = the frames of its
own probes and of those it answers (in a mesh a host is chosen about as often as it
chooses); CPU = the agent's measured cost at that rate, interpolated between
measurements (below, and the lab fleet's from --costs), linear past the last. Series per host = peers · series a
peer; Prometheus ingests every series once a scrape interval (a native histogram is one
sample). Where one server is not enough: Julius Volz's rule of thumb (PromLabs,
"Introduction to Prometheus: efficient implementation"): a large server ingests up to
about 1 M samples/s and holds several million active series; 5 M is taken here.
"""
import argparse
import json
import math
import pathlib

# Frames a probe puts on the wire, both ways, Ethernet + IP + payload: measured with
# tcpdump on loopback, one agent probing another every 100 ms for 10 s (2026-11-30):
# ICMP 10 440 B / 90 probes, TCP_RR 19 046 B / 89 (request, response, the client's
# immediate ACK), UDP_RR 8 900 B / 89.
FRAME_BYTES = {"icmp": 116, "tcp_rr": 214, "udp_rr": 100}
# Series a peer costs in Prometheus with native histograms (a histogram is one series),
# counted in an agent's exposition (2026-11-30): ICMP alone 8 (the RTT histogram, sent,
# lost, late, 4 error reasons); the default three probes against an agent 31 (5
# histograms: icmp, tcp_rr, udp_rr, srtt_client, srtt_server; 26 counters and gauges).
# Without native histograms each histogram is 22 series (20 buckets, _sum, _count).
SERIES = {"icmp": 8, "default": 31}
CLASSIC = {"icmp": 8 + 21, "default": 31 + 5 * 21}
# goldpinger (bloomberg/goldpinger, pkg/goldpinger): every node calls every other
# every --refresh-interval (30 s) and keeps goldpinger_peers_response_time_s per
# (instance, call_type, host_ip, pod_ip): 12 buckets + +Inf, _sum, _count = 15 series
# a pair.
GOLDPINGER_SERIES_PER_PAIR = 15
GOLDPINGER_INTERVAL_S = 30
# One Prometheus server's active series and ingestion (see the docstring).
SERVER_SERIES = 5_000_000
SERVER_SAMPLES_PER_S = 1_000_000
# The agent's CPU (fraction of a core) at a probe rate, measured on this 2-vCPU VM:
# ICMP alone — no peers 0.067 % and 1 000 a second 2.40 % (bench/RESULTS-agent-vs-
# smokeping.md, 2026-11-30), 5 000 a second 6.55–7.34 % (the same file, 7.0 % taken),
# and the lab fleet's own point from --costs; the default three probes — 3 000 a
# second (1 000 peers) 10.9 % (bench/RESULTS-agent.md).
IDLE = 0.00067
ICMP_POINTS = [(1000.0, 0.0240), (5000.0, 0.070)]
DEFAULT_POINTS = [(3000.0, 0.109)]

# (hosts, regions, zones a region, racks a zone, hosts a rack)
FLEETS = [
    (1_000, 1, 5, 5, 40),
    (10_000, 5, 5, 10, 40),
    (100_000, 10, 10, 25, 40),
]


def levelled_peers(regions: int, zones: int, racks: int, rack: int, k: int) -> int:
    """docs/AGENT.md's formula: rack mates, then K of each sibling group a level."""
    return (rack - 1) + (racks - 1) * min(k, rack) + (zones - 1) * min(k, racks * rack) + (
        regions - 1
    ) * min(k, zones * racks * rack)


def servers(series: float, scrape_s: float) -> int:
    """Prometheus servers for `series` scraped every `scrape_s`: by active series and
    by samples a second, whichever needs more."""
    return max(
        math.ceil(series / SERVER_SERIES), math.ceil(series / scrape_s / SERVER_SAMPLES_PER_S)
    )


def interpolate(points: list, rate: float) -> float:
    """The piecewise-linear curve through `points` (rate, CPU), from (0, IDLE), at
    `rate`; past the last point, the last segment's slope."""
    pts = [(0.0, IDLE)] + sorted(points)
    for (r0, c0), (r1, c1) in zip(pts, pts[1:]):
        if rate <= r1:
            return c0 + (c1 - c0) * (rate - r0) / (r1 - r0)
    (r0, c0), (r1, c1) = pts[-2], pts[-1]
    return c1 + (c1 - c0) * (rate - r1) / (r1 - r0)


def load_costs(path: str) -> dict:
    """bench/fleet-costs.json, checked: one line naming what is wrong, exit 2."""
    try:
        costs = json.loads(pathlib.Path(path).read_text())
        for key in ("agents", "run_s", "agents_cpu_s", "probes_sent"):
            if not isinstance(costs.get(key), (int, float)) or not costs[key] > 0:
                raise ValueError(f"{key} must be a positive number, not {costs.get(key)!r}")
        return costs
    except (OSError, ValueError, AttributeError) as e:
        raise SystemExit(f"mesh_scale.py: {path}: {e} (write it with bench/fleet_lab.sh)")


def positive(cast):
    def parse(text: str):
        v = cast(text)
        if not v > 0:
            raise argparse.ArgumentTypeError(f"{text}: must be above 0")
        return v

    return parse


def fmt(x: float) -> str:
    for unit, d in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= d:
            return f"{x / d:.3g} {unit}"
    return f"{x:.3g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--costs", default=str(pathlib.Path(__file__).with_name("fleet-costs.json")))
    ap.add_argument("--per-group", type=positive(int), default=2)
    ap.add_argument("--scrape-s", type=positive(float), default=15.0)
    ap.add_argument("--interval-s", type=positive(float), default=1.0)
    a = ap.parse_args()
    costs = load_costs(a.costs)
    lab_rate = costs["probes_sent"] / costs["run_s"] / costs["agents"]
    lab_cpu = costs["agents_cpu_s"] / costs["run_s"] / costs["agents"]
    curves = {"icmp": ICMP_POINTS + [(lab_rate, lab_cpu)], "default": DEFAULT_POINTS}

    def cpu(probes: str, rate: float) -> str:
        return f"{interpolate(curves[probes], rate) * 100:.3g} %"

    print(
        f"Measured in the lab ({costs.get('shape', '?')}, {costs['agents']} agents, "
        f"{costs['run_s']:.0f} s): {costs['agents_cpu_s'] / costs['probes_sent'] * 1e6:.0f} µs "
        f"of CPU a probe at {lab_rate:.0f} ICMP probes/s an agent ({lab_cpu * 100:.2f} % of a "
        f"core). Prometheus: {costs.get('prometheus_head_series', float('nan')):.0f} head series "
        f"in {costs.get('prometheus_rss_bytes', float('nan')) / 2**20:.0f} MiB.\n"
    )
    print(
        "| hosts | mesh | probes | peers/host | probes/s/host | bytes/s/host | CPU/host "
        "| series/host | series in all | samples/s ingested | Prometheus servers |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for hosts, regions, zones, racks, rack in FLEETS:
        plans = [
            (
                f"levels K={a.per_group} ({regions}×{zones}×{racks}×{rack})",
                levelled_peers(regions, zones, racks, rack, a.per_group),
            ),
            ("full", hosts - 1),
        ]
        for name, peers in plans:
            for probes in ("icmp", "default"):
                layers = ["icmp"] if probes == "icmp" else ["icmp", "tcp_rr", "udp_rr"]
                rate = peers * len(layers) / a.interval_s
                wire = 2 * peers * sum(FRAME_BYTES[x] for x in layers) / a.interval_s
                series = peers * SERIES[probes]
                total = series * hosts
                print(
                    f"| {hosts:,} | {name} | {probes} | {peers:,} | {fmt(rate)} | {fmt(wire)}B "
                    f"| {cpu(probes, rate)} | {fmt(series)} | {fmt(total)} "
                    f"| {fmt(total / a.scrape_s)} | {servers(total, a.scrape_s):,} |"
                )
        peers = hosts - 1
        total = hosts * peers * GOLDPINGER_SERIES_PER_PAIR
        print(
            f"| {hosts:,} | goldpinger N² | HTTP | {peers:,} | {fmt(peers / GOLDPINGER_INTERVAL_S)} "
            f"| – | – | {fmt(peers * GOLDPINGER_SERIES_PER_PAIR)} | {fmt(total)} "
            f"| {fmt(total / a.scrape_s)} | {servers(total, a.scrape_s):,} |"
        )
    print(
        f"\nPer host with classic histograms instead of native: {CLASSIC['icmp']} series a "
        f"peer (ICMP) and {CLASSIC['default']} (default probes). Scrape every "
        f"{a.scrape_s:g} s, probe every {a.interval_s:g} s, K = {a.per_group}."
    )


if __name__ == "__main__":
    main()
