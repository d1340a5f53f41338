#!/usr/bin/env bash
# make image: an OCI image of chorus-server, made with Debian's own tools from
# Debian's packages and this build, with no registry pull:
#   mmdebstrap  a Debian 12 root filesystem (the host's apt sources) with the
#               packages whose libraries chorus links (found with ldd and dpkg -S)
#               and Python 3.11, plus this build's chorus (/opt/chorus) and the
#               venv it embeds (/opt/chorus/venv: torch and the Python packages);
#   buildah     the image from that file system: user chorus (uid 1000), the
#               model repository at /mnt/models, KServe's ports.
#
#   tools/image/build.sh BUILD PYTHON [IMAGE]     (IMAGE: localhost/chorus:latest)
set -euo pipefail
build=$(cd "$1" && pwd)
python=$2
image=${3:-localhost/chorus:latest}
here=$(cd "$(dirname "$0")" && pwd)
venv=$(cd "$(dirname "$python")/.." && pwd)
py_version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
base_python=$(readlink -f "$venv/bin/python3")
[ "$base_python" = "/usr/bin/python$py_version" ] || {
  echo "image: the venv's Python must be Debian's /usr/bin/python3 (it is $base_python)" >&2
  exit 1
}
work=$build/image
rm -rf "$work"
mkdir -p "$work/stage/opt/chorus"/{bin,lib,share/chorus}
trap 'rm -rf "$work/stage" "$work/rootfs.tar"' EXIT
started=$(date +%s)

# chorus: the server, its tools, libraries and Python package, without debug info.
stage=$work/stage/opt/chorus
cp "$build"/bin/{chorus-server,chorus-run,chorus-package-check} "$stage/bin/"
cp "$build"/lib/*.so "$stage/lib/"
cp -rL "$build/share/chorus/python" "$stage/share/chorus/python"
find "$stage/share" -name __pycache__ -prune -exec rm -rf {} +
sed "1s|.*|#!/opt/chorus/venv/bin/python|" "$build/bin/chorus-package" > "$stage/bin/chorus-package"
chmod 755 "$stage/bin/chorus-package"
find "$stage/bin" "$stage/lib" -type f -exec sh -c \
  'file -b "$1" | grep -q ^ELF && strip --strip-debug "$1" || true' _ {} \;

# The Debian packages that hold the libraries chorus links (torch's, the venv's
# and chorus' own aside): what the image installs instead of copies.
torch_lib=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__) + "/lib")')
packages=$(for file in "$stage"/bin/* "$stage"/lib/*.so; do
  file -b "$file" | grep -q ^ELF || continue
  ldd "$file" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r path; do
  case "$path" in "$torch_lib"/* | "$venv"/* | "$build"/* | /usr/local/cuda/*) continue ;; esac
  dpkg -S "$(readlink -f "$path")" 2>/dev/null || dpkg -S "$path"
done | cut -d: -f1 | sort -u | tr '\n' ',')
echo "image: Debian packages for chorus' libraries: ${packages%,}"

# The root file system: Debian 12 from the host's apt sources, the user, chorus
# and the venv. mmdebstrap works in memory when it can (much faster on a slow disk).
sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || sources=/etc/apt/sources.list
tmp=/dev/shm
[ -w "$tmp" ] || tmp=$work
TMPDIR=$tmp mmdebstrap --quiet --variant=essential \
  --include="${packages}python$py_version,libpython$py_version,ca-certificates,tini,passwd" \
  --customize-hook='chroot "$1" useradd --create-home --uid 1000 --user-group --shell /bin/sh chorus' \
  --customize-hook='mkdir -p "$1/mnt/models" "$1/opt/chorus/venv"' \
  --customize-hook="copy-in $stage /opt" \
  --customize-hook="sync-in $venv /opt/chorus/venv" \
  --customize-hook='sed -i "s|^command = .*|command = /usr/bin/python3 -m venv /opt/chorus/venv|" "$1/opt/chorus/venv/pyvenv.cfg"' \
  --customize-hook='chroot "$1" chown -R chorus:chorus /mnt/models' \
  bookworm "$work/rootfs.tar" "$sources"

# The image.
container=$(buildah from scratch)
buildah add --quiet "$container" "$work/rootfs.tar" / > /dev/null
site=/opt/chorus/venv/lib/python$py_version/site-packages
buildah config \
  --user chorus --workingdir /home/chorus \
  --env HOME=/home/chorus \
  --env PATH=/opt/chorus/bin:/opt/chorus/venv/bin:/usr/bin:/bin \
  --env PYTHONPATH=/opt/chorus/share/chorus/python \
  --env LD_LIBRARY_PATH="/opt/chorus/lib:$site/torch/lib" \
  --env CHORUS_PYTHON=/opt/chorus/venv/bin/python \
  --env CHORUS_LIBPYTHON="/usr/lib/x86_64-linux-gnu/libpython$py_version.so.1.0" \
  --env CHORUS_TORCH_PYTHON_LIB="$site/torch/lib/libtorch_python.so" \
  --port 8080 --port 8081 --port 8082 \
  --volume /mnt/models \
  --entrypoint '["/usr/bin/tini", "--", "/opt/chorus/bin/chorus-server"]' \
  --cmd '["--model-repository=/mnt/models", "--host=0.0.0.0", "--http-port=8080", "--grpc-port=8081", "--metrics-port=8082"]' \
  --label org.opencontainers.image.title=chorus-server \
  --label org.opencontainers.image.description="chorus: PyTorch models in plain Python, served over the Open Inference Protocol" \
  "$container"
buildah commit --quiet --rm "$container" "$image" > /dev/null
size=$(podman image inspect --format '{{.Size}}' "$image")
echo "image: $image, $((size / 1048576)) MiB, built in $(($(date +%s) - started)) s"
echo "{\"image\": \"$image\", \"size_mib\": $((size / 1048576)), \"build_s\": $(($(date +%s) - started))}" \
  > "$build/image.json"
