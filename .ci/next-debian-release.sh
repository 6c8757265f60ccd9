# Sourced by the .ci installers that take packages this Debian release lacks from the next one
# (prepare-machine.sh: Docker Engine, containerd, buildx, compose; install-cosign.sh: cosign).
# Defines NEXT_DEBIAN_RELEASE and download_from_next_release only.

readonly NEXT_DEBIAN_RELEASE=trixie

# Downloads PACKAGE... of the next Debian release into the current folder, through a sources list of
# its own on this machine's mirror (the system's apt sources stay as they are).
download_from_next_release() {
  local mirror lists
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  lists=$(mktemp -d)
  mkdir -p "$lists/lists/partial" "$lists/archives/partial"
  echo "deb $mirror $NEXT_DEBIAN_RELEASE main" >"$lists/sources.list"
  local apt_opts=(-o "Dir::Etc::SourceList=$lists/sources.list" -o "Dir::Etc::SourceParts=-"
                  -o "Dir::State::Lists=$lists/lists" -o "Dir::Cache::Archives=$lists/archives")
  apt-get "${apt_opts[@]}" update -qq 2>/dev/null
  apt-get "${apt_opts[@]}" download "$@" >/dev/null 2>&1
  rm -rf "$lists"
}
