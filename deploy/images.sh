#!/usr/bin/env bash
# Builds the OCI image archives of both services from the release binaries, with buildah, from
# scratch: no base image and no registry needed. Each image holds exactly the binary, the shared
# libraries `ldd` names for it (and the dynamic loader), a CA bundle, /etc/passwd and
# /etc/group entries for uid/gid 65532, and its SBOM; no shell. See deploy/README.md.
#
# SBOM: deploy/sbom.py writes a CycloneDX 1.5 document of each image (the crates compiled into
# the binary, from cargo metadata and Cargo.lock; the Debian packages of the libraries and CA
# bundle copied from the build host) into the image at /usr/share/sbom/<binary>.cdx.json and
# beside the archive as <out>/<binary>.cdx.json (docs/security.md).
#
# Usage: deploy/images.sh [--out DIR]        (default DIR: <cargo target dir>/images)
#
# Two builds of one commit give the same image digests: every timestamp (image creation time and
# file mtimes) is SOURCE_DATE_EPOCH, by default the commit time of HEAD.
#
# Environment:
#   SOURCE_DATE_EPOCH       creation time (default: `git log -1 --format=%ct`)
#   CUTOVER_IMAGE_SOURCE    org.opencontainers.image.source (default: the git remote `origin`)
set -euo pipefail
cd "$(dirname "$0")/.."

die() { printf 'images.sh: %s\n' "$*" >&2; exit 1; }

out=""
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

for tool in buildah ldd tar sha256sum python3; do
  command -v "$tool" >/dev/null || die "$tool not found (Debian: apt-get install buildah)"
done

# --- What to build: deploy/images.conf is the one list the manifests and tests also read. ---
images=() bins=() users=() ports=()
while read -r image bin user port_list; do
  case $image in '' | '#'*) continue ;; esac
  images+=("$image") bins+=("$bin") users+=("$user") ports+=("$port_list")
done <deploy/images.conf
[ ${#images[@]} -gt 0 ] || die "deploy/images.conf lists no image"

# --- Release binaries. ---
packages=()
for bin in "${bins[@]}"; do packages+=(-p "$bin"); done
cargo build --release --locked "${packages[@]}"
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target" ] || die "cannot read the cargo target directory"
out=${out:-$target/images}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# --- Labels and the fixed creation time. ---
version=$(cargo pkgid -p "${bins[0]}")
version=${version##*[#@]}
license=$(sed -n 's/^license *= *"\(.*\)"/\1/p' Cargo.toml | head -n1)
revision=unknown
if git rev-parse --git-dir >/dev/null 2>&1; then
  revision=$(git rev-parse HEAD)
  if [ -n "$(git status --porcelain --untracked-files=no)" ]; then revision="$revision-dirty"; fi
  : "${SOURCE_DATE_EPOCH:=$(git log -1 --format=%ct)}"
  : "${CUTOVER_IMAGE_SOURCE:=$(git remote get-url origin 2>/dev/null || true)}"
fi
[ -n "${SOURCE_DATE_EPOCH:-}" ] || die "not a git checkout: set SOURCE_DATE_EPOCH"
source_url=${CUTOVER_IMAGE_SOURCE:-unknown}
case $(uname -m) in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) arch=$(uname -m) ;;
esac

# buildah keeps its own storage here (vfs: works inside containers and without root mounts) so
# the build leaves nothing in /var/lib/containers and concurrent builds do not meet.
work=$(mktemp -d "$out/.work.XXXXXX")
trap 'buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs rm --all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
bah() { buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs "$@"; }

# Copies $1 to the same path under the root $2, following symlinks (the image needs the file,
# not the host's link layout).
place() {
  install -D -m "$3" "$1" "$2$1"
}

# The libraries the dynamic loader maps for $1, and the loader itself, as absolute paths.
libraries() {
  ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u
}

printf '%-30s %-73s %s\n' IMAGE DIGEST SIZE
for i in "${!images[@]}"; do
  image=${images[$i]} bin=${bins[$i]} user=${users[$i]}
  uid=${user%%:*} gid=${user##*:}
  binary=$target/release/$bin
  [ -x "$binary" ] || die "$binary was not built"

  root=$work/$bin
  install -D -m 0755 "$binary" "$root/usr/local/bin/$bin"
  lib_args=()
  while read -r lib; do
    place "$lib" "$root" 0755
    lib_args+=(--lib "$lib")
  done < <(libraries "$binary")
  place /etc/ssl/certs/ca-certificates.crt "$root" 0644
  mkdir -p "$root/usr/share/sbom"
  SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH python3 deploy/sbom.py --bin "$bin" --image "$image" \
    "${lib_args[@]}" --ca-bundle /etc/ssl/certs/ca-certificates.crt >"$root/usr/share/sbom/$bin.cdx.json"
  chmod 0644 "$root/usr/share/sbom/$bin.cdx.json"
  cp "$root/usr/share/sbom/$bin.cdx.json" "$out/$bin.cdx.json"
  printf 'nonroot:x:%s:%s:nonroot:/nonexistent:/usr/sbin/nologin\n' "$uid" "$gid" >"$root/etc/passwd"
  printf 'nonroot:x:%s:\n' "$gid" >"$root/etc/group"
  chmod 0644 "$root/etc/passwd" "$root/etc/group"
  find "$root" -type d -exec chmod 0755 {} +
  find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

  ctr=$(bah from --name "cutover-$bin" scratch)
  bah copy --quiet --chown 0:0 "$ctr" "$root/" / >/dev/null
  port_flags=()
  IFS=, read -r -a port_array <<<"${ports[$i]}"
  for p in "${port_array[@]}"; do port_flags+=(--port "$p"); done
  bah config \
    --os linux --arch "$arch" \
    --entrypoint "[\"/usr/local/bin/$bin\"]" --cmd '' \
    --user "$user" --workingdir / \
    "${port_flags[@]}" \
    --label "org.opencontainers.image.title=$bin" \
    --label "org.opencontainers.image.source=$source_url" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.revision=$revision" \
    --label "org.opencontainers.image.licenses=$license" \
    "$ctr"
  layout=$work/$bin.layout
  bah commit --quiet --rm --format oci --timestamp "$SOURCE_DATE_EPOCH" \
    --identity-label=false --omit-history --disable-compression=false \
    "$ctr" "oci:$layout:$version" >/dev/null
  # An oci-archive is a tar of the layout; writing it ourselves with fixed names, order, owners
  # and times makes the archive file itself reproducible, not only the image digest.
  archive=$out/$bin.oci.tar
  find "$layout" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  tar --create --file "$archive" --directory "$layout" --sort=name --format=gnu \
    --owner=0 --group=0 --numeric-owner --mode=go-w \
    oci-layout index.json blobs

  digest=$(tar -xOf "$archive" index.json | sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p')
  [ -n "$digest" ] || die "no manifest digest in $archive"
  size=$(stat -c %s "$archive")
  printf '%s\n' "$digest" >"$out/$bin.digest"
  printf '%-30s %-73s %s\n' "$image:$version" "$digest" "$size bytes ($archive)"
done
