#!/bin/sh
# Builds runnel:<version of package.json> (or $RUNNEL_IMAGE) offline, for `make image`: no registry is
# needed, only the local Docker daemon with busybox:latest and this checkout with its node_modules.
# The context holds rootfs/, copied over busybox:
#   /app                 package.json, bin/, the production source folders and crds/ (no tests, no fixtures)
#   /app/node_modules    the packages package-lock.json marks as not dev, as installed here, isolated-vm's
#                        prebuilt glibc binary for this Node's ABI included (other platforms' dropped),
#                        without TypeScript sources, declarations, source maps and docs
#   /usr/local/bin/node  the pinned Node of node_modules/node, stripped
#   /lib*, /usr/lib*     the shared libraries node and the native addons load, at the paths ldd names
set -eu
cd "$(dirname "$0")/.."
node=$(readlink -f node_modules/.bin/node)
version=$("$node" -p 'require("./package.json").version')
tag=${RUNNEL_IMAGE:-runnel:$version}
context=$(mktemp -d "${TMPDIR:-/tmp}/runnel-image-XXXXXX")
trap 'rm -rf "$context"' EXIT
rootfs=$context/rootfs
mkdir -p "$rootfs/app/node_modules/.bin" "$rootfs/usr/local/bin"

tar -c --exclude='*.test.ts' --exclude='*.fixture.ts' \
  package.json bin cli lib operator apiserver kubeserver crds | tar -x -C "$rootfs/app"

# Top-level production packages (nested node_modules come with their parent), the ones installed here:
# optional packages of other platforms are absent.
modules=$(readlink -f node_modules)
"$node" -e '
  const lock = require("./package-lock.json")
  for (const [path, entry] of Object.entries(lock.packages))
    if (/^node_modules\/(@[^/]+\/)?[^/]+$/.test(path) && !entry.dev) console.log(path.slice("node_modules/".length))
' | while read -r package; do
  if [ -d "$modules/$package" ]; then
    mkdir -p "$rootfs/app/node_modules/$(dirname "$package")"
    cp -a "$modules/$package" "$rootfs/app/node_modules/$package"
  fi
done
abi=$("$node" -p process.versions.modules)
ivm=$rootfs/app/node_modules/isolated-vm
find "$ivm/prebuilds" -name '*.node' ! -path '*/linux-x64/*' -delete
find "$ivm/prebuilds" -name '*.node' ! -name "isolated-vm.abi$abi.glibc.node" -delete
rm -rf "$ivm/src" "$ivm/vendor" "$ivm/isolated-vm-"*.tgz
# Node never loads TypeScript, source maps or docs from node_modules: a third of the packages' bytes.
find "$rootfs/app/node_modules" -type f \( -name '*.ts' -o -name '*.mts' -o -name '*.cts' -o -name '*.map' -o -name '*.md' \) -delete

# Stripped of its static symbol table; the dynamic one, which native addons link against, stays.
strip -o "$rootfs/usr/local/bin/node" "$node"
ln -s /usr/local/bin/node "$rootfs/app/node_modules/.bin/node"

# ldd lines are `name => /path (addr)` or `/lib64/ld-linux-x86-64.so.2 (addr)`; vdso has no file.
for binary in "$node" $(find "$rootfs/app/node_modules" -name '*.node'); do
  ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
done | sort -u | while read -r library; do
  mkdir -p "$rootfs$(dirname "$library")"
  cp -L "$library" "$rootfs$library"
done

previous=$(docker image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
docker build --quiet -t "$tag" -f image/Dockerfile "$context" >/dev/null
# The image this tag named before, untagged now: removed unless a container still uses it.
if [ -n "$previous" ] && [ "$previous" != "$(docker image inspect --format '{{.Id}}' "$tag")" ]; then
  docker rmi "$previous" >/dev/null 2>&1 || true
fi
echo "$tag"
