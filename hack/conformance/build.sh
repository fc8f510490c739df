#!/usr/bin/env bash
# Build upstream agent-sandbox's own e2e test binaries (its packages test/e2e and
# test/e2e/extensions, at the release pinned in go.mod beside this script) with `go test -c`, and
# cache them beside the control plane: $cache_root/conformance/agent-sandbox-<version>_<key>/bin/
#   e2e.test, extensions.test    the test binaries
#   e2e.list, extensions.list    each binary's `-test.list .` output (its top-level tests)
#   agent-sandbox-controller     upstream's own controller (the controller-switch fault tests
#                                run it against ours, each taking over the other's claims)
#   versions.json                module, version, Go version, build time, key
#
# The module is resolved from the committed go.mod/go.sum only (-mod=readonly): every hash in
# go.sum is upstream's own go.sum line for that module, and agent-sandbox's is the one pinned in
# hack/controlplane/upstream/version.env. Prints the directory holding the binaries on its last
# line of stdout; builds only when the cache for these inputs is missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
controlplane="$(cd "$here/../controlplane" && pwd)"
# shellcheck source=../controlplane/versions.env
source "$controlplane/versions.env"

log() { printf '[conformance] %s\n' "$*" >&2; }

module=sigs.k8s.io/agent-sandbox
version="$(sed -n "s|^require $module \(v[^ ]*\)\$|\1|p" "$here/go.mod")"
[ -n "$version" ] || { log "go.mod does not require $module"; exit 1; }
packages=("$module/test/e2e" "$module/test/e2e/extensions")
controller="$module/cmd/agent-sandbox-controller"
flags=(-mod=readonly -trimpath)

key_input() {
  cat "$here/go.mod" "$here/go.sum"
  printf '%s\n' "${packages[@]}" "$controller" "${flags[@]}" "$GO_MIN_VERSION"
  uname -m
}
key="$(key_input | sha256sum | cut -c1-16)"
cache_root="${AGENTSANDBOX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentsandbox}"
out="$cache_root/conformance/agent-sandbox-${version}_${key}"
bins=(e2e extensions)

complete() {
  [ -f "$out/bin/versions.json" ] || return 1
  for b in "${bins[@]}"; do [ -x "$out/bin/$b.test" ] && [ -f "$out/bin/$b.list" ] || return 1; done
  [ -x "$out/bin/agent-sandbox-controller" ] || return 1
}

if complete; then
  log "cached: $out/bin"
  echo "$out/bin"
  exit 0
fi

# shellcheck source=../controlplane/lib.sh
source "$controlplane/lib.sh"

GO_CMD="$(find_go)"
log "using $("$GO_CMD" version) ($GO_CMD)"

export GOFLAGS="${flags[*]}"
export GOSUMDB=off           # go.sum is committed; the checksum database is not reachable here
export GOTOOLCHAIN=local
export CGO_ENABLED=0

tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp/bin"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)

log "building the test binaries of ${packages[*]} at $version"
# Several packages with -o DIR/: one <package name>.test per package.
(cd "$here" && "$GO_CMD" test -c -o "$tmp/bin/" "${packages[@]}")
for b in "${bins[@]}"; do
  [ -x "$tmp/bin/$b.test" ] || { log "go test -c wrote no $b.test"; exit 1; }
  # the tests each binary holds (its package's init runs; no cluster is contacted)
  "$tmp/bin/$b.test" -test.list . > "$tmp/bin/$b.list"
done
log "building $controller at $version"
(cd "$here" && "$GO_CMD" build -o "$tmp/bin/agent-sandbox-controller" "$controller")

took=$(( $(date +%s) - start ))
cat > "$tmp/bin/versions.json" <<JSON
{"module": "$module", "version": "$version", "go": "$("$GO_CMD" env GOVERSION)",
 "build_seconds": $took, "key": "$key"}
JSON
mkdir -p "$(dirname "$out")"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
log "built in ${took}s: $out/bin"
du -sh "$out/bin"/*.test >&2
echo "$out/bin"
