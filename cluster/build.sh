#!/usr/bin/env bash
# Build a Kubernetes control plane from source (needs only Go >= 1.26 and
# network access to the Go module proxy; no Docker, no cgo):
#   kube-apiserver, kube-controller-manager, kube-scheduler  (cluster/go.mod)
#   etcd                                                     (cluster/etcd/go.mod)
# into <repo>/.cluster/bin. A binary newer than its go.mod, go.sum and this
# script is left alone; FORCE=1 rebuilds everything.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
BIN="$ROOT/.cluster/bin"
mkdir -p "$BIN"

modversion() { # <go.mod> <module path>: the version required in that go.mod
    awk -v m="$2" '($1 == m || ($1 == "require" && $2 == m)) && $0 !~ /=>/ { print ($1 == "require" ? $3 : $2); exit }' "$1"
}

K8S_VERSION="$(modversion "$HERE/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(modversion "$HERE/etcd/go.mod" go.etcd.io/etcd/server/v3)"
[[ -n $K8S_VERSION && -n $ETCD_VERSION ]] || { echo "build.sh: cannot read versions from go.mod" >&2; exit 1; }

# What hack/lib/version.sh would stamp, so --version and /version report it.
k8s_major="${K8S_VERSION#v}"; k8s_major="${k8s_major%%.*}"
k8s_minor="${K8S_VERSION#v*.}"; k8s_minor="${k8s_minor%%.*}"
K8S_LDFLAGS=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    K8S_LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$k8s_major"
    K8S_LDFLAGS+=" -X $pkg.gitMinor=$k8s_minor -X $pkg.gitTreeState=clean"
done

summary=()
build() { # <name> <module dir> <package> <ldflags>
    local name=$1 dir=$2 pkg=$3 ldflags=$4 out="$BIN/$1"
    if [[ -z ${FORCE:-} && -x $out && $out -nt $dir/go.mod && $out -nt $dir/go.sum && $out -nt ${BASH_SOURCE[0]} ]]; then
        summary+=("$(printf '%-24s up to date (%s)' "$name" "$(du -h "$out" | cut -f1)")")
        return
    fi
    echo ">> building $name ($pkg)"
    local start=$SECONDS
    (cd "$dir" && CGO_ENABLED=0 go build -ldflags "$ldflags" -o "$out.tmp" "$pkg")
    mv -f "$out.tmp" "$out"
    summary+=("$(printf '%-24s built in %4ds (%s)' "$name" $((SECONDS - start)) "$(du -h "$out" | cut -f1)")")
}

total=$SECONDS
build kube-apiserver          "$HERE"      k8s.io/kubernetes/cmd/kube-apiserver          "$K8S_LDFLAGS"
build kube-controller-manager "$HERE"      k8s.io/kubernetes/cmd/kube-controller-manager "$K8S_LDFLAGS"
build kube-scheduler          "$HERE"      k8s.io/kubernetes/cmd/kube-scheduler          "$K8S_LDFLAGS"
build etcd                    "$HERE/etcd" go.etcd.io/etcd/server/v3                     ""

echo "== Kubernetes $K8S_VERSION, etcd $ETCD_VERSION -> $BIN"
printf '   %s\n' "${summary[@]}"
echo "== total $((SECONDS - total))s"
