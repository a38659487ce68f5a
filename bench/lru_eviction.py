#!/usr/bin/env python3
"""Why the in-kernel passive engine's flow and pending maps are plain hash maps: how
many entries a BPF LRU hash map drops while it is still below its size.

Usage: sudo bench/lru_eviction.py [--sizes 1024,16384,100000] [--room 4096,512,200,64]

For each size and room: an LRU hash map (4-byte keys, the default common LRU) is
created and pinned; one key is inserted from CPU 1 (that CPU's update pulls a batch of
free nodes into its local free list, as a packet on CPU 1 would); then keys from CPU 0
through one `bpftool batch` until `room` entries are left free. The witness is the map itself: its
entries are counted by `bpftool map dump`, and every key inserted and missing was
evicted with room to spare, without a word to the program or user space. A plain
hash map given the same keys keeps all of them (checked in the same run).

The kernel's reason (kernel/bpf/bpf_lru_list.c, bpf_common_lru_pop_free): a CPU whose
local free list is empty takes free nodes from the global list, and when that is empty
shrinks the inactive list (evicts, LOCAL_FREE_TARGET = 128 nodes at a time) before it
steals from other CPUs' local lists: with N CPUs, eviction can start with up to
127 × (N − 1) entries free.
Needs root and bpftool. Creates and removes /sys/fs/bpf/rttlab_lru_bench only.
"""

import argparse
import os
import subprocess
import tempfile

PIN = "/sys/fs/bpf/rttlab_lru_bench"


def key(i):
    return " ".join(str(b) for b in i.to_bytes(4, "little"))


def survivors(kind, size, room):
    if os.path.exists(PIN):
        os.unlink(PIN)
    subprocess.run(
        ["bpftool", "map", "create", PIN, "type", kind, "key", "4", "value", "4",
         "entries", str(size), "name", "rttlab_lru"],
        check=True,
    )
    try:
        subprocess.run(
            ["taskset", "-c", "1", "bpftool", "map", "update", "pinned", PIN,
             "key", *key(0xFFFFFFFF).split(), "value", "1", "0", "0", "0"],
            check=True,
        )
        n = size - room - 1
        with tempfile.NamedTemporaryFile("w", suffix=".batch") as f:
            for i in range(n):
                f.write(f"map update pinned {PIN} key {key(i)} value 1 0 0 0\n")
            f.flush()
            subprocess.run(
                ["taskset", "-c", "0", "bpftool", "batch", "file", f.name],
                check=True, stdout=subprocess.DEVNULL,
            )
        dump = subprocess.run(
            ["bpftool", "-j", "map", "dump", "pinned", PIN],
            check=True, capture_output=True, text=True,
        ).stdout
        return n + 1, dump.count('"key"')
    finally:
        os.unlink(PIN)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1024,16384,100000")
    ap.add_argument("--room", default="4096,512,200,64")
    a = ap.parse_args()
    print(f"kernel {os.uname().release}, {os.cpu_count()} CPUs")
    print("| map size | inserted | room left | LRU kept | LRU dropped | hash kept |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in map(int, a.sizes.split(",")):
        for room in map(int, a.room.split(",")):
            if room >= size:
                continue
            inserted, lru = survivors("lru_hash", size, room)
            _, plain = survivors("hash", size, room)
            print(
                f"| {size} | {inserted} | {size - inserted} | {lru} | "
                f"{inserted - lru} | {plain} |"
            )


if __name__ == "__main__":
    main()
