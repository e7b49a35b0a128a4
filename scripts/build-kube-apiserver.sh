#!/usr/bin/env bash
# Builds the real kube-apiserver that the kubeadapter tests run against, from
# the nested module tools/kube-apiserver (k8s.io/kubernetes at the release that
# matches the root module's k8s.io/client-go), into a cache outside the repo so
# that fresh clones on the same machine reuse it.
#
# Prints the binary's path on stdout (progress goes to stderr). Rebuilds only
# when the binary is missing or stale: the stamp is a hash of the nested
# go.mod and go.sum and of the Go version. Idempotent and safe to run twice at
# once (a lock serialises builders; the binary is moved into place atomically).
#
#   DBINFORMER_CACHE   cache root (default: $XDG_CACHE_HOME/dbinformer or ~/.cache/dbinformer)
#   GO                 go command (default: go)
set -euo pipefail

GO=${GO:-go}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mod="$repo/tools/kube-apiserver"
version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$mod/go.mod")
if [[ -z "$version" ]]; then
	version=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$mod/go.mod")
fi
[[ -n "$version" ]] || { echo "build-kube-apiserver: no k8s.io/kubernetes version in $mod/go.mod" >&2; exit 1; }

cache=${DBINFORMER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dbinformer}
bin="$cache/kube-apiserver-$version"
stampfile="$bin.stamp"
stamp=$( { cat "$mod/go.mod" "$mod/go.sum"; "$GO" version; } | sha256sum | cut -d' ' -f1)

fresh() { [[ -x "$bin" && -f "$stampfile" && "$(cat "$stampfile")" == "$stamp" ]]; }

if fresh; then
	echo "$bin"
	exit 0
fi

mkdir -p "$cache"
exec 9>"$bin.lock"
flock 9
if fresh; then # another builder finished while we waited
	echo "$bin"
	exit 0
fi

minor=${version#v1.}
minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"

echo "build-kube-apiserver: building kube-apiserver $version into $bin (several minutes when Go's build cache is cold)" >&2
start=$(date +%s)
tmp="$bin.tmp.$$"
trap 'rm -f "$tmp"' EXIT
(cd "$mod" && GOWORK=off "$GO" build -ldflags="$ldflags" -o "$tmp" k8s.io/kubernetes/cmd/kube-apiserver)
mv -f "$tmp" "$bin"
echo "$stamp" >"$stampfile"
echo "build-kube-apiserver: built in $(($(date +%s) - start))s" >&2
echo "$bin"
