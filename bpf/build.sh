#!/usr/bin/env bash
# Compile the eBPF sources into the objects committed beside them, so `cargo build`
# needs no clang. `bpf/build.sh --check` (run by CI) fails when a committed object is
# not what its source compiles to. Needs clang, llvm (llvm-strip) and libbpf-dev.
# DWARF is stripped (it records build paths); BTF, which the loader needs, is kept.
set -euo pipefail
cd "$(dirname "$0")"
arch_inc=/usr/include/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for src in *.bpf.c; do
  obj=${src%.c}.o
  # Relative paths in the BTF line info: the object must not depend on where the
  # checkout lives.
  clang -O2 -g -target bpf -fdebug-prefix-map="$PWD"=. -I"$arch_inc" -c "$src" -o "$out/$obj"
  llvm-strip -g "$out/$obj"
  if [ "${1:-}" = --check ]; then
    if ! cmp -s "$out/$obj" "$obj"; then
      echo "bpf/$obj is stale: run bpf/build.sh and commit the object" >&2
      status=1
    fi
  else
    cp "$out/$obj" "$obj"
  fi
done
exit $status
