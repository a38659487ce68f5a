#!/usr/bin/env bash
# The fleet test (tests/fleet.rs) at a chosen size, with a longer healthy stretch over
# which the agents' cost is measured: prints the test's own lines (peers and series
# against the formula, the localisation of the degraded rack) and writes its
# `fleet costs` JSON to bench/fleet-costs.json, the input of bench/mesh_scale.py.
#
#     bench/fleet_lab.sh [ZxRxH [SOAK_S]]     (default 2x5x10, 120 s)
#
# Needs root and Prometheus (apt-get install prometheus), as the test does.
set -euo pipefail
cd "$(dirname "$0")/.."
shape=${1:-2x5x10}
soak=${2:-120}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
RTTLAB_FLEET=$shape RTTLAB_FLEET_SOAK_S=$soak RTTLAB_REQUIRE_PRIVILEGED_TESTS=1 \
  cargo test --release --test integration -- fleet::a_degraded --nocapture 2>&1 | tee "$out" |
  grep -E "agents,|localised|fleet costs|test result"
grep -o 'fleet costs: .*' "$out" | sed 's/^fleet costs: //' |
  python3 -c 'import json,sys; d=json.load(sys.stdin); d["shape"]=sys.argv[1]; print(json.dumps(d, indent=1, sort_keys=True))' "$shape" \
  > bench/fleet-costs.json
echo "wrote bench/fleet-costs.json"
