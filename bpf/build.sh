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
  # The passive engine uses atomic compare-and-exchange (BPF ISA v3, Linux 5.12+);
  # the sock_ops program keeps the default ISA, and with it older kernels.
  case $src in
    passive_rtt.bpf.c) cpu=-mcpu=v3 ;;
    *) cpu= ;;
  esac
  # Relative paths in the BTF line info: the object must not depend on where the
  # checkout lives.
  clang -O2 -g $cpu -target bpf -fdebug-prefix-map="$PWD"=. -I"$arch_inc" -c "$src" -o "$out/$obj"
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
