#!/usr/bin/env bash
# Debian's packages the deploy installs on hosts without a GPU, downloaded once into the cache (outside the
# checkout), for two uses:
#   - promtool and amtool for the tests (make test checks and unit-tests every generated rule with them),
#     taken out of the packages with dpkg-deb, not installed: installing them here would start services;
#   - the lab's package repository: a monitoring or gateway host of the lab installs them with apt from this
#     directory (bind-mounted), as a real host does from its mirror (keepalived and nftables: a gateway pair).
# The packages and everything they depend on, for this machine's Debian release; Packages indexes them.
# Prints the directory, named by the package list (a new list is a new directory, never an old one
# without it). Rebuilt only when its `complete` mark is missing.
set -euo pipefail

PACKAGES=(prometheus prometheus-alertmanager prometheus-node-exporter keepalived nftables)
suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
list=$(printf '%s\n' "${PACKAGES[@]}" | sha256sum | cut -c1-8)
dir="${SGLANG_FLEET_CACHE:-$HOME/.cache/sglang-fleet}/debs/$suite-$list"
if [[ -f "$dir/complete" ]]; then
  echo "$dir"
  exit 0
fi
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if [[ -f "$dir/complete" ]]; then  # another make built it meanwhile
  echo "$dir"
  exit 0
fi
work=$(mktemp -d "$dir.XXXXXX")
chmod 755 "$work"  # apt reads a file: repository as its own user, _apt
trap 'rm -rf "$work"' EXIT
apt-cache show "${PACKAGES[0]}" >/dev/null 2>&1 || apt-get update -qq >&2
# The closure, without what is only recommended or suggested; <virtual> names are provided by real ones listed too.
mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
  --no-replaces --no-enhances "${PACKAGES[@]}" | grep -E '^[a-z0-9]' | sort -u)
(cd "$work" && apt-get download -qq "${closure[@]}" >&2)
(cd "$work" && dpkg-scanpackages --multiversion . /dev/null 2>/dev/null > Packages)
mkdir -p "$work/bin"
for pkg in prometheus prometheus-alertmanager; do
  x=$(mktemp -d "$work/x.XXXXXX")
  dpkg-deb -x "$work/${pkg}"_*.deb "$x"
  cp "$x"/usr/bin/{promtool,amtool} "$work/bin/" 2>/dev/null || true
  rm -rf "$x"
done
test -x "$work/bin/promtool" && test -x "$work/bin/amtool"
touch "$work/complete"
rm -rf "$dir"
mv "$work" "$dir"
trap - EXIT
echo "$dir"
