# Sourced by prepare-machine.sh and prepare-arm64.sh: no registry is reachable on CI's machines, so a
# Debian base image is made with debootstrap and imported under the name a build expects.
#   import_debian_base NAME [ARCH]    NAME's tag names the release (debian:bookworm-slim: bookworm); ARCH
#                                     (arm64) makes another architecture's, whose second stage runs emulated
import_debian_base() {
  local name=$1 arch=${2:-} mirror rootfs release=${1#*:}
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  # The published debian:bookworm-slim has a root directory of mode 0755; mktemp's folder is 0700.
  # Docker hides that (its merged root is always 0755), rootless Podman does not: every non-root
  # process would fail to load libc there.
  rootfs=$(mktemp -d)
  chmod 0755 "$rootfs"
  debootstrap ${arch:+--arch="$arch"} --variant=minbase "${release%%-*}" "$rootfs" "$mirror" >/dev/null
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
  tar -C "$rootfs" -c . | docker import ${arch:+--platform "linux/$arch"} -c 'CMD ["bash"]' - "$name" >/dev/null
  rm -rf "$rootfs"
}
