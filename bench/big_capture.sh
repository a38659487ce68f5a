#!/usr/bin/env bash
# A capture of real Linux TCP for the passive engine's benchmarks: bulk TCP through a
# token-bucket shaper (iperf3, two streams) and request/response (rttlab rr, eight
# streams) between two network
# namespaces this script creates and removes, ~2.6 M packets, whole frames as tcpdump
# keeps them by default (SNAPLEN=128 keeps the headers only: a tenth of the bytes).
#
#     [SNAPLEN=N] bench/big_capture.sh OUT.pcap [RTTLAB_BINARY]
#
# Needs root, iproute2, ethtool, iperf3 and tcpdump. Every load is bounded: iperf3
# runs 40 s, rr 40 s, tcpdump stops at 2 600 000 packets.
set -euo pipefail
out=${1:?usage: big_capture.sh OUT.pcap [RTTLAB]}
rttlab=${2:-target/release/rttlab}
a=rttlab-bigcap-a b=rttlab-bigcap-b
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; }
trap cleanup EXIT
cleanup
ip netns add "$a"; ip netns add "$b"
ip link add bc0 netns "$a" type veth peer name bc1 netns "$b"
ip -n "$a" addr add 10.250.0.1/24 dev bc0; ip -n "$b" addr add 10.250.0.2/24 dev bc1
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set bc0 up; ip -n "$b" link set bc1 up
# Real segments on the wire, not 64 KiB super-packets.
ip netns exec "$a" ethtool -K bc0 tso off gso off gro off >/dev/null
ip netns exec "$b" ethtool -K bc1 tso off gso off gro off >/dev/null
# The shaper: 1 Gbit/s from a to b, 5 ms of queue.
ip netns exec "$a" tc qdisc add dev bc0 root tbf rate 1gbit burst 128kb latency 5ms
ip netns exec "$b" iperf3 -s -1 -D >/dev/null
ip netns exec "$b" "$rttlab" serve -q &
srv=$!
sleep 1
ip netns exec "$b" timeout 120 tcpdump -i bc1 -s "${SNAPLEN:-0}" -c 2600000 -w "$out" 2>/dev/null &
dump=$!
sleep 1
ip netns exec "$a" timeout 60 iperf3 -c 10.250.0.2 -t 40 -P 2 >/dev/null &
ip netns exec "$a" timeout 60 "$rttlab" rr -H 10.250.0.2 -l 40 --streams 8 >/dev/null 2>&1 || true
wait "$dump" || true
kill "$srv" 2>/dev/null || true
wait 2>/dev/null || true
echo "$out: $(stat -c %s "$out") bytes"
