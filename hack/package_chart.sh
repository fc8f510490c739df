#!/usr/bin/env bash
# Package deploy/helm/agent-sandbox as <dist>/agent-sandbox-<version>.tgz (make chart).
#   $1 version: the chart's version and appVersion (the default image tag), any SemVer 2 version
#   $2 image repository for values.yaml's image.repository (empty: the chart's own default)
#   $3 output directory
# helm is the cached one (hack/controlplane/build-helm.sh). The chart's copies of deploy/crds and
# deploy/monitoring must be current (hack/sync_chart.py --check), and nothing in the repository
# is changed: the chart is copied to a temporary directory first.
# Two runs give the same bytes: helm writes each file's mtime into the archive unless
# SOURCE_DATE_EPOCH is set, and it is set here as hack/release.py sets it for the wheel and sdist
# (the environment's, else the last commit's time).
set -euo pipefail
version=$1 image=${2:-} dist=$3
here=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
  SOURCE_DATE_EPOCH=$(git -C "$here" log -1 --format=%ct 2>/dev/null || true)
  [[ -n $SOURCE_DATE_EPOCH ]] || { echo "no SOURCE_DATE_EPOCH and no git commit to take it from" >&2; exit 1; }
fi
export SOURCE_DATE_EPOCH
python3 "$here/hack/sync_chart.py" --check
helm_dir=$("$here/hack/controlplane/build-helm.sh" | tail -n 1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$here/deploy/helm/agent-sandbox" "$tmp/agent-sandbox"
if [[ -n $image ]]; then
  values="$tmp/agent-sandbox/values.yaml"
  # the one image.repository line (two-space indent under `image:`)
  sed -i "s#^  repository: agentsandbox/agent-sandbox-controller\$#  repository: ${image}#" "$values"
  grep -qxF "  repository: ${image}" "$values" || { echo "image.repository not set in $values" >&2; exit 1; }
fi
mkdir -p "$dist"
"$helm_dir/helm" package "$tmp/agent-sandbox" --version "$version" --app-version "$version" \
  --destination "$dist" >&2
echo "$dist/agent-sandbox-$version.tgz"
