#!/usr/bin/env bash
# The hot paths of HEAD's working tree against an earlier commit, alternated, medians:
# builds COMMIT in a worktree of its own beside this checkout's release build, then
# runs bench/hot_paths.py on both with a 2.6 M-packet capture (made once by
# bench/big_capture.sh, headers only, and kept in target/against/).
#
#     bench/against.sh COMMIT [--pairs N]
#
# Prints hot_paths.py's markdown table: new/old above 1 is slower for passive and the
# agent, faster for rr. Needs root (the capture's namespaces, the agent's ports).
set -euo pipefail
commit=${1:?usage: bench/against.sh COMMIT [--pairs N]}
shift
cd "$(dirname "$0")/.."
root=$PWD
work=$root/target/against
rev=$(git rev-parse --short "$commit")
mkdir -p "$work"
src=$work/src-$rev
cleanup() { git worktree remove --force "$src" 2>/dev/null || true; }
trap cleanup EXIT
cleanup
git worktree add --detach --force "$src" "$rev" >/dev/null
CARGO_TARGET_DIR=$work/target cargo build --release --quiet --manifest-path "$src/Cargo.toml" --bin rttlab
cp "$work/target/release/rttlab" "$work/rttlab-$rev"
cargo build --release --quiet --bin rttlab
capture=${CAPTURE:-$work/big.pcap}
if [ ! -s "$capture" ]; then
  SNAPLEN=128 bench/big_capture.sh "$capture" target/release/rttlab >/dev/null
fi
echo "old: $rev; new: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src Cargo.toml Cargo.lock || echo ' with uncommitted changes')"
python3 bench/hot_paths.py "$work/rttlab-$rev" target/release/rttlab --capture "$capture" "$@"
