#!/usr/bin/env bash
# Builds the real Kubernetes tools the tests run against into target/tools/bin/, from the
# modules pinned in tests/tools/go.mod (the Go module proxy is the only source). Builds only
# what is missing, so a second run does nothing. Go's module and build caches stay in their
# default places under $HOME, out of the repo.
#
# KUBEBUILDER_ASSETS (controller-runtime's envtest convention), when set, names a folder that
# already holds etcd, kube-apiserver and kubectl: those are linked instead of built.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin="$root/target/tools/bin"
mkdir -p "$bin"

declare -A pkg=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [helm]=helm.sh/helm/v3/cmd/helm
)

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  for t in etcd kube-apiserver kubectl; do
    if [ -x "$KUBEBUILDER_ASSETS/$t" ] && [ ! -e "$bin/$t" ]; then
      ln -sf "$KUBEBUILDER_ASSETS/$t" "$bin/$t"
    fi
  done
fi

missing=()
for t in etcd kube-apiserver kubectl helm; do
  [ -x "$bin/$t" ] || missing+=("$t")
done
[ ${#missing[@]} -eq 0 ] && exit 0

command -v go >/dev/null 2>&1 || {
  echo "tests/tools/build.sh: go is not on PATH; it is needed to build ${missing[*]}" >&2
  exit 1
}
cd "$here"
export CGO_ENABLED=0
# The release the binaries report (/version, kubectl version), as Kubernetes' own build stamps it.
kver=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
kminor=$(echo "$kver" | cut -d. -f2)
stamp="-X k8s.io/component-base/version.gitVersion=$kver -X k8s.io/component-base/version.gitMajor=1"
stamp+=" -X k8s.io/component-base/version.gitMinor=$kminor -X k8s.io/component-base/version.gitTreeState=clean"
stamp+=" -X k8s.io/client-go/pkg/version.gitVersion=$kver -X k8s.io/client-go/pkg/version.gitMajor=1"
stamp+=" -X k8s.io/client-go/pkg/version.gitMinor=$kminor"
for t in "${missing[@]}"; do
  start=$(date +%s)
  printf '==> building %s (%s) from tests/tools/go.mod\n' "$t" "${pkg[$t]}"
  # -trimpath and no DWARF: reproducible and about a third smaller; the tests need no debugger.
  go build -trimpath -ldflags="-s -w $stamp" -o "$bin/$t.tmp" "${pkg[$t]}"
  mv "$bin/$t.tmp" "$bin/$t"
  printf '    %s: %ss, %s\n' "$t" "$(( $(date +%s) - start ))" "$(du -h "$bin/$t" | cut -f1)"
done
