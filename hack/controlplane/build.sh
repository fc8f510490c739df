#!/usr/bin/env bash
# Build the local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, kwok) from Go modules and cache the binaries outside the repository.
#
# Prints the directory holding the binaries on its last line of stdout. Rebuilds only when the
# cache for the current versions (and wrapper go.mod/go.sum contents) is missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

log() { printf '[controlplane] %s\n' "$*" >&2; }

key_input() {
  cat "$here/versions.env"
  for d in kubernetes etcd kwok; do cat "$here/$d/go.mod" "$here/$d/go.sum"; done
  uname -m
}
key="$(key_input | sha256sum | cut -c1-16)"
cache_root="${AGENTSANDBOX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentsandbox}"
out="$cache_root/controlplane/k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_${key}"
bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)

complete() {
  [ -f "$out/bin/versions.json" ] || return 1
  for b in "${bins[@]}"; do [ -x "$out/bin/$b" ] || return 1; done
}

if complete; then
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

minor="$(echo "$KUBERNETES_VERSION" | cut -d. -f2)"
ld=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  ld="$ld -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

log "building Kubernetes $KUBERNETES_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)"
(cd "$here/kubernetes" && "$GO_CMD" build -ldflags "-s -w $ld" -o "$tmp/bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl)
log "building etcd $ETCD_VERSION"
(cd "$here/etcd" && "$GO_CMD" build -ldflags "-s -w" -o "$tmp/bin/etcd" go.etcd.io/etcd/server/v3)
log "building kwok $KWOK_VERSION"
(cd "$here/kwok" && "$GO_CMD" build \
  -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
  -o "$tmp/bin/kwok" sigs.k8s.io/kwok/cmd/kwok)

took=$(( $(date +%s) - start ))
cat > "$tmp/bin/versions.json" <<JSON
{"kubernetes": "$KUBERNETES_VERSION", "etcd": "$ETCD_VERSION", "kwok": "$KWOK_VERSION",
 "go": "$("$GO_CMD" env GOVERSION)", "build_seconds": $took, "key": "$key"}
JSON
mkdir -p "$(dirname "$out")"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
log "built in ${took}s: $out/bin"
du -sh "$out/bin"/* >&2
echo "$out/bin"
