#!/usr/bin/env bash
# Build the Debian package, install it on this machine, check what it put where,
# use it as an unprivileged user and as the agent's service user, then purge it and
# check that nothing is left. Root only (CI runs it after the tests). Witnesses: dpkg
# and dpkg-query's own records, readelf on the installed binary, systemd-analyze on
# the installed unit, the kernel's answer to an unprivileged ICMP socket, the
# agent's /metrics as curl reads it.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" = 0 ] || { echo "deploy/deb/check.sh: needs root (it installs a package)" >&2; exit 2; }

fail() { echo "deploy/deb/check.sh: $*" >&2; exit 1; }
user=rttlab-ping-$$
range_file=/proc/sys/net/ipv4/ping_group_range
range_before=$(cat "$range_file")
agent_pid=
cleanup() {
    [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null || true
    echo "$range_before" > "$range_file"
    userdel "$user" 2>/dev/null || true
    rm -rf "${work:-/nonexistent-rttlab}"
    rm -f /etc/rttlab/peers.json
    if dpkg-query -W rttlab >/dev/null 2>&1; then dpkg -P rttlab >/dev/null || true; fi
}
trap cleanup EXIT

out=${CARGO_TARGET_DIR:-target}/debian
rm -rf "$out"
deploy/deb/build.sh --quiet
deb=$(ls -t "$out"/rttlab_*.deb | head -1)
[ -f "$deb" ] || fail "cargo deb wrote no package"
compgen -G "$out/rttlab-dbgsym_*" >/dev/null \
    || fail "no rttlab-dbgsym package beside $deb: the debug info must be split out"
echo "package: $deb ($(stat -c %s "$deb") bytes)"

dpkg -i "$deb" >/dev/null
files=$(dpkg -L rttlab)
for want in /usr/bin/rttlab /usr/share/man/man1/rttlab.1.gz /usr/share/man/man1/rttlab-agent.1.gz \
    /usr/share/bash-completion/completions/rttlab /usr/share/zsh/vendor-completions/_rttlab \
    /usr/share/fish/vendor_completions.d/rttlab.fish /lib/systemd/system/rttlab-agent.service \
    /usr/lib/sysusers.d/rttlab.conf /etc/rttlab/agent.toml; do
    grep -qx "$want" <<<"$files" || fail "dpkg -L rttlab lacks $want"
done
dpkg-query -W -f='${Conffiles}\n' rttlab | grep -q '^ /etc/rttlab/agent.toml ' \
    || fail "/etc/rttlab/agent.toml is not a conffile"
if readelf -S /usr/bin/rttlab | grep -q '\.debug_info'; then fail "/usr/bin/rttlab is not stripped"; fi
size=$(stat -c %s /usr/bin/rttlab)
echo "installed binary: $size bytes, no .debug_info"
/usr/bin/rttlab --version | grep -Eq '^rttlab [0-9.]+ \([0-9a-f]{12}(-dirty)? [0-9]{4}-[0-9]{2}-[0-9]{2}\)$' \
    || fail "--version names no commit and date: $(/usr/bin/rttlab --version)"
zcat /usr/share/man/man1/rttlab-ping.1.gz | grep -q '^\.TH' || fail "rttlab-ping.1 is not a man page"
grep -q 'complete' /usr/share/bash-completion/completions/rttlab || fail "bash completion is empty"
getent passwd rttlab >/dev/null || fail "postinst created no rttlab user"
# libpcap compiles passive's filter expressions: cargo-deb's $auto (dpkg-shlibdeps)
# must have made it a dependency, and the installed binary must load and use it.
dpkg-query -W -f='${Depends}\n' rttlab | grep -q 'libpcap0\.8' \
    || fail "the package does not depend on libpcap0.8: $(dpkg-query -W -f='${Depends}' rttlab)"
out=$(/usr/bin/rttlab passive -r tests/corpus/rr-v4-gw.pcap.gz -q 'tcp port 12866' 2>&1) \
    || fail "passive with a filter expression: $out"
grep -q '^16 packets' <<<"$out" || fail "passive 'tcp port 12866' on the corpus: $out"
echo "libpcap: a dependency ($(dpkg-query -W -f='${Depends}' rttlab | grep -o 'libpcap0\.8[^,]*')), used by the installed binary"

# An unprivileged user pings through an ICMP datagram socket when ping_group_range
# admits it, and is told the capability and the sysctl when it does not.
useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
echo "1 0" > "$range_file"
if out=$(su -s /bin/sh "$user" -c '/usr/bin/rttlab ping -c 1 127.0.0.1' 2>&1); then
    fail "ping worked with no ICMP socket open to $user: $out"
fi
grep -q 'CAP_NET_RAW' <<<"$out" && grep -q 'ping_group_range' <<<"$out" \
    || fail "the refusal names neither the capability nor the sysctl: $out"
echo "0 2147483647" > "$range_file"
out=$(su -s /bin/sh "$user" -c '/usr/bin/rttlab ping -c 3 -i 0.2 --summary 127.0.0.1' 2>&1) \
    || fail "unprivileged ping failed: $out"
grep -q '3 packets transmitted, 3 received' <<<"$out" || fail "unprivileged ping: $out"
grep -q 'Dgram socket' <<<"$out" || fail "ping does not say it used a datagram socket: $out"
echo "$range_before" > "$range_file"
echo "unprivileged ping: 3 of 3 through an ICMP datagram socket"

systemd-analyze verify /lib/systemd/system/rttlab-agent.service
echo "systemd-analyze verify: clean"

# The service as the unit runs it (no systemd as PID 1 here): its user, only
# CAP_NET_RAW (ambient and bounding), no new privileges, the secret as a credential
# only that user can read, the package's agent.toml with a peers file. With
# ping_group_range closed, its ICMP probes need the capability the unit grants.
work=$(mktemp -d)
chmod 711 "$work"
mkdir -p "$work/credentials"
echo "check-secret-$$" > "$work/credentials/secret"
chown -R rttlab:rttlab "$work/credentials"
chmod 700 "$work/credentials"
chmod 400 "$work/credentials/secret"
echo '[{"targets": ["127.0.0.1:12999"]}]' > /etc/rttlab/peers.json
echo "1 0" > "$range_file"
setpriv --reuid rttlab --regid rttlab --init-groups --inh-caps -all,+net_raw \
    --ambient-caps -all,+net_raw --bounding-set -all,+net_raw --no-new-privs \
    /usr/bin/rttlab agent --config /etc/rttlab/agent.toml --secret-file "$work/credentials/secret" \
    --listen 127.0.0.1:12998 --metrics-listen 127.0.0.1:19898 > "$work/agent.log" 2>&1 &
agent_pid=$!
for _ in $(seq 50); do
    curl -sf http://127.0.0.1:19898/metrics > "$work/metrics" 2>/dev/null && break
    kill -0 "$agent_pid" 2>/dev/null || fail "the agent exited as the service user: $(cat "$work/agent.log")"
    sleep 0.2
done
grep -q '^rttlab_build_info{' "$work/metrics" || fail "the agent as the service user serves no metrics: $(cat "$work/agent.log")"
grep -q '^process_open_fds ' "$work/metrics" || fail "no process_* metrics"
[ "$(stat -c %U /proc/$agent_pid)" = rttlab ] || fail "the agent does not run as rttlab"
grep -q '^CapEff:.*0000000000002000$' /proc/$agent_pid/status || fail "the agent holds more than CAP_NET_RAW: $(grep Cap /proc/$agent_pid/status)"
kill "$agent_pid"; wait "$agent_pid" 2>/dev/null || true; agent_pid=
echo "$range_before" > "$range_file"
rm -f /etc/rttlab/peers.json
echo "agent as rttlab with CAP_NET_RAW alone: serving metrics, ICMP socket open"

# Purge: every file the package installed is gone, and its user, and /etc/rttlab.
dpkg -P rttlab >/dev/null
while read -r f; do
    [ -d "$f" ] && continue
    [ -e "$f" ] && fail "$f is left after dpkg -P"
done <<<"$files"
[ -e /etc/rttlab ] && fail "/etc/rttlab is left after dpkg -P"
getent passwd rttlab >/dev/null && fail "user rttlab is left after dpkg -P"
echo "dpkg -P: nothing left"
