#!/usr/bin/env python3
"""What a mesh by levels costs at 1 000, 10 000 and 100 000 hosts, beside a full mesh
and goldpinger's N², from costs measured in the lab (bench/fleet-costs.json, written by
bench/fleet_lab.sh) and on the wire (below). Prints a markdown table.

    bench/mesh_scale.py [--costs bench/fleet-costs.json] [--per-group 2]
                        [--scrape-s 15] [--interval-s 1]

Per host: peers = (its rack's size − 1) + Σ over outer levels of (sibling groups) · K
(docs/AGENT.md); probes/s = peers · probes / interval; bytes/s = the probes' frames;
CPU = a fixed part + a part a probe, the line through two measurements: the lab fleet's
(its agents' CPU over their probes, at their rate) and one agent at 1 000 ICMP probes a
second (bench/RESULTS-agent-vs-smokeping.md). Series per host = peers · series a
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
# One agent probing 1 000 loopback targets by ICMP once a second: 24.00 µs of CPU an
# echo (bench/RESULTS-agent-vs-smokeping.md, 2026-11-30, median of 3).
BUSY_RATE, BUSY_CPU_PER_PROBE = 1000.0, 24.0e-6

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


def fmt(x: float) -> str:
    for unit, d in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= d:
            return f"{x / d:.3g} {unit}"
    return f"{x:.3g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--costs", default=str(pathlib.Path(__file__).with_name("fleet-costs.json")))
    ap.add_argument("--per-group", type=int, default=2)
    ap.add_argument("--scrape-s", type=float, default=15.0)
    ap.add_argument("--interval-s", type=float, default=1.0)
    a = ap.parse_args()
    costs = json.loads(pathlib.Path(a.costs).read_text())
    lab_rate = costs["probes_sent"] / costs["run_s"] / costs["agents"]
    lab_cpu = costs["agents_cpu_s"] / costs["run_s"] / costs["agents"]
    per_probe = (BUSY_RATE * BUSY_CPU_PER_PROBE - lab_cpu) / (BUSY_RATE - lab_rate)
    fixed = lab_cpu - per_probe * lab_rate

    def cpu(rate: float) -> str:
        return f"{(fixed + per_probe * rate) * 100:.3g} %"

    print(
        f"Measured in the lab ({costs['shape']}, {costs['agents']} agents, "
        f"{costs['run_s']:.0f} s): {costs['cpu_s_per_probe'] * 1e6:.0f} µs of CPU a probe at "
        f"{lab_rate:.0f} probes/s an agent ({lab_cpu * 100:.2f} % of a core); with 24 µs a "
        f"probe at 1 000/s, an agent costs {fixed * 100:.2f} % of a core + "
        f"{per_probe * 1e6:.1f} µs a probe. Prometheus: {costs['prometheus_head_series']:.0f} "
        f"head series in {costs['prometheus_rss_bytes'] / 2**20:.0f} MiB.\n"
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
                wire = peers * sum(FRAME_BYTES[x] for x in layers) / a.interval_s
                series = peers * SERIES[probes]
                total = series * hosts
                print(
                    f"| {hosts:,} | {name} | {probes} | {peers:,} | {fmt(rate)} | {fmt(wire)}B "
                    f"| {cpu(rate)} | {fmt(series)} | {fmt(total)} "
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
