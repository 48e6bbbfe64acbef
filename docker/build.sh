#!/usr/bin/env bash
# Builds the image of docker/Dockerfile with docker or podman, also where its base image
# (python:3.11-slim-bookworm) cannot be pulled: an air-gapped machine, or a registry mirror that
# lacks it. Then a stand-in base is built from Debian bookworm's packages (mmdebstrap: Debian's
# python3.11 in a venv at /usr/local, so /usr/local/bin/python and pip are where the official
# image has them) and the Dockerfile runs unchanged on it. See docs/containers.md, "Building without Docker Hub".
#
#   docker/build.sh                          # GPU image resnet-nobn (tensorflow[and-cuda])
#   docker/build.sh --cpu -t resnet-nobn:cpu # CPU-only TensorFlow: ~1/5 of the size, no GPU
#   docker/build.sh --ca-bundle /etc/ssl/certs/ca-certificates.crt   # behind a TLS-intercepting
#                                            # proxy: pip in the build trusts these CAs
#   docker/build.sh setup-podman             # root, once: Debian's podman, runc, mmdebstrap,
#                                            # podman-compose, and a containers.conf for this host
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON_VERSION=3.11
OFFICIAL_BASE="docker.io/library/python:${PYTHON_VERSION}-slim-bookworm"
STANDIN_BASE="localhost/resnet-nobn-base:python${PYTHON_VERSION}-bookworm"
PODMAN_CONF=/etc/containers/containers.conf.d/50-resnet-nobn.conf

die() {
  echo "build.sh: $*" >&2
  exit 2
}

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  cat <<'EOF'
Options:
  -t, --tag NAME        image name (default resnet-nobn)
  --engine docker|podman  (default: docker if its daemon answers, else podman; or $ENGINE)
  --cpu                 install CPU-only `tensorflow` instead of `tensorflow[and-cuda]`
  --base IMAGE          base image (default docker.io/library/python:3.11-slim-bookworm)
  --standin             do not try to pull the base: build the Debian stand-in
  --ca-bundle FILE      a PEM bundle that pip in the build trusts (it stays in the image at
                        /etc/ssl/certs/resnet-nobn-build-ca.crt, named by PIP_CERT)
  --mirror URL          Debian mirror for the stand-in (default $DEBIAN_MIRROR or
                        http://deb.debian.org/debian)
  --pull-timeout S      seconds to wait for the base image pull (default 60)
EOF
}

# ---------------------------------------------------------------------------------------------
# setup-podman: what a Debian 12 host needs for rootful podman builds and runs.

setup_podman() {
  [ "$(id -u)" = 0 ] || die "setup-podman writes /etc/containers: run it as root"
  local missing=()
  for tool in podman:podman buildah:buildah runc:runc mmdebstrap:mmdebstrap \
    podman-compose:podman-compose; do
    command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null || die "missing ${missing[*]} and there is no apt-get"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
  fi
  # podman asks for more open files and processes than a host with lower hard limits allows
  # ("setrlimit RLIMIT_NOFILE: Operation not permitted"): the container gets the host's hard
  # limits (processes: at most pid_max). crun refuses a host with cgroup v1 and v2 mounted
  # together (a hybrid host); runc runs there.
  local nofile nproc pid_max
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  pid_max=$(cat /proc/sys/kernel/pid_max)
  [ "$nofile" = unlimited ] && nofile=1048576
  if [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pid_max" ]; then nproc=$pid_max; fi
  mkdir -p "$(dirname "$PODMAN_CONF")"
  {
    echo "# written by resnet_noBN's docker/build.sh setup-podman"
    echo "[containers]"
    echo "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"
    if [ -d /sys/fs/cgroup/unified ] || [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; then
      echo "[engine]"
      echo 'runtime = "runc"'
    fi
  } >"$PODMAN_CONF"
  echo "podman is set up: $PODMAN_CONF"
}

# ---------------------------------------------------------------------------------------------
# The build.

tag=resnet-nobn
engine=${ENGINE:-}
base=$OFFICIAL_BASE
standin=0
tf_package="tensorflow[and-cuda]"
ca_bundle=
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
pull_timeout=60

if [ "${1:-}" = setup-podman ]; then
  setup_podman
  exit 0
fi
while [ $# -gt 0 ]; do
  case $1 in
    -t | --tag) tag=${2:?}; shift 2 ;;
    --engine) engine=${2:?}; shift 2 ;;
    --cpu) tf_package=tensorflow; shift ;;
    --base) base=${2:?}; shift 2 ;;
    --standin) standin=1; shift ;;
    --ca-bundle) ca_bundle=${2:?}; shift 2 ;;
    --mirror) mirror=${2:?}; shift 2 ;;
    --pull-timeout) pull_timeout=${2:?}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument $1 (see docker/build.sh --help)" ;;
  esac
done

if [ -z "$engine" ]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    engine=docker
  elif command -v podman >/dev/null; then
    engine=podman
  else
    die "neither a docker daemon nor podman here (Debian: apt-get install podman, or run $0 setup-podman)"
  fi
fi
case $engine in docker | podman) ;; *) die "--engine must be docker or podman, not $engine" ;; esac
command -v "$engine" >/dev/null || die "$engine is not installed"
[ -z "$ca_bundle" ] || [ -r "$ca_bundle" ] || die "--ca-bundle $ca_bundle is not a readable file"

has_image() { "$engine" image inspect "$1" >/dev/null 2>&1; }

build_standin() {
  command -v mmdebstrap >/dev/null || die "the stand-in base needs mmdebstrap (apt-get install mmdebstrap)"
  [ "$(id -u)" = 0 ] || die "the stand-in base is built as root (mmdebstrap --mode=root)"
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  echo "build.sh: building the stand-in base $STANDIN_BASE from Debian bookworm ($mirror)"
  # minbase + python3 (3.11 in bookworm) + venv, no Recommends, no docs/man pages/translations;
  # the venv at /usr/local gives /usr/local/bin/python and pip, as python:3.11-slim has them,
  # and lets pip install without touching Debian's own Python packages.
  mmdebstrap --mode=root --variant=minbase --include=python3,python3-venv,ca-certificates \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='chroot "$1" python3 -m venv /usr/local' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    bookworm "$work/rootfs.tar" "$mirror" >"$work/mmdebstrap.log" 2>&1 ||
    { tail -20 "$work/mmdebstrap.log" >&2; die "mmdebstrap failed (log above)"; }
  "$engine" import \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
    "$work/rootfs.tar" "$STANDIN_BASE" >/dev/null
}

start=$(date +%s)
if [ "$standin" = 1 ]; then
  base=$STANDIN_BASE
  has_image "$base" || build_standin
elif ! has_image "$base"; then
  echo "build.sh: pulling $base"
  if ! timeout "$pull_timeout" "$engine" pull "$base" >/dev/null 2>&1; then
    echo "build.sh: $base cannot be pulled; using the Debian stand-in $STANDIN_BASE"
    base=$STANDIN_BASE
    has_image "$base" || build_standin
  fi
fi

if [ -n "$ca_bundle" ]; then
  # The CA bundle goes into a derived base image (works with every builder, BuildKit or not);
  # PIP_CERT makes pip, and so every `pip install` of the Dockerfile, trust it.
  ca_context=$(mktemp -d)
  trap 'rm -rf "$ca_context"' EXIT
  cp "$ca_bundle" "$ca_context/ca.crt"
  printf 'FROM %s\nCOPY ca.crt /etc/ssl/certs/resnet-nobn-build-ca.crt\nENV PIP_CERT=/etc/ssl/certs/resnet-nobn-build-ca.crt\n' \
    "$base" >"$ca_context/Dockerfile"
  "$engine" build -q -t "${tag%%:*}-base-ca" "$ca_context" >/dev/null
  base="${tag%%:*}-base-ca"
fi

echo "build.sh: $engine build -t $tag (base $base, $tf_package)"
# --network=host: the RUN steps reach PyPI as the host does (a proxy, a firewall's rules).
"$engine" build --network=host -f "$REPO/docker/Dockerfile" \
  --build-arg "BASE_IMAGE=$base" --build-arg "TF_PACKAGE=$tf_package" -t "$tag" "$REPO"
size=$("$engine" image inspect --format '{{.Size}}' "$tag")
echo "build.sh: built $tag in $(($(date +%s) - start)) s, $((size / 1000000)) MB"
