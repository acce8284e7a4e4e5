#!/usr/bin/env bash
# Downloads, with this machine's apt, the Debian packages Ember's build needs and a GPU machine lacks (Open MPI,
# parallel HDF5, Boost.Program_options, OpenBLAS, GoogleTest, nlohmann-json) into .device/debs/ for gpu-run.sh there;
# or, with --runtime-for, only the packages that programs built here load at run time (for first-run.sh there).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

usage() {
  cat <<'EOF'
usage: scripts/device/fetch-packages.sh [--dry-run] [--dest DIR] [--runtime-for PROGRAM]...

Resolves the packages the build needs (ROOTS in this script) and their Depends (no Recommends) that a machine with
a C++ toolchain lacks, downloads them into .device/debs/ (replacing what is there) with a MANIFEST of names and
versions, and an ALTERNATIVES list of the links their install scripts would make. Needs Debian's apt (amd64).

  --dry-run              print the resolved list and its size, download nothing
  --dest DIR             download into DIR instead of .device/debs
  --runtime-for PROGRAM  (repeatable) the roots are instead openmpi-bin (mpirun) and the packages that own the
                         shared libraries PROGRAM loads (ldd); libraries no package owns (the CUDA toolkit's under
                         /usr/local/cuda) are listed as the GPU machine's to provide

CMake is not fetched: the device image has one (gpu-run.sh checks that it is 3.25 or newer).
EOF
}

DEST=.device/debs
LIMIT_MIB=60
# What the build uses: MPI (C++ and mpiexec), parallel HDF5, Boost.Program_options, OpenBLAS with CBLAS, GoogleTest,
# nlohmann-json, simdjson, oneDNN; all of them with their CMake config files or the wrappers CMake's Find modules query.
ROOTS=(libopenmpi-dev openmpi-bin libhdf5-openmpi-dev libboost-program-options-dev libopenblas-dev libgtest-dev
       nlohmann-json3-dev libsimdjson-dev libdnnl-dev)

# Packages taken as satisfied without downloading them: the device has them, or nothing the build or the tests run
# uses them. apt resolves against a status file that lists these as installed, so it also skips their own Depends.
ASSUMED=(
  # C runtime and the host toolchain: nvcc needs g++ there, and g++ brings these (in the device's own versions).
  libc6 libc-bin libgcc-s1 libstdc++6 gcc-12-base libc6-dev libc-dev-bin linux-libc-dev libcrypt-dev libcrypt1
  libnsl-dev libnsl2 libtirpc-dev libtirpc3 libtirpc-common rpcsvc-proto libstdc++-12-dev libgcc-12-dev libgomp1
  libatomic1 libquadmath0 libitm1 libasan8 libtsan2 liblsan0 libubsan1 libhwasan0 libcc1-0 cpp cpp-12 gcc gcc-12
  g++ g++-12 make binutils binutils-common binutils-x86-64-linux-gnu libbinutils libctf0 libctf-nobfd0 libgprofng0
  libjansson4 libisl23 libmpc3 libmpfr6 libgmp10
  # The Fortran compiler (libopenmpi-dev asks for one); the Fortran runtime, libgfortran5, is still fetched.
  gfortran gfortran-12 libgfortran-12-dev
  # Base system and packaging machinery: in every Debian/Ubuntu image, and dpkg -x runs no maintainer scripts.
  # (libudev1 and libcom-err2, which hwloc and Kerberos load, are fetched: small, and not in every minimal image.)
  dpkg debconf debianutils adduser passwd perl-base tar install-info init-system-helpers sensible-utils
  libpam0g libpam-modules libpam-modules-bin libpam-runtime libaudit1 libaudit-common libcap-ng0 libcap2
  libsemanage2 libsemanage-common libsepol2 libselinux1 libacl1 libattr1 libbz2-1.0 liblzma5 libzstd1 zlib1g
  libpcre2-8-0 libmd0 libdb5.3 libsystemd0 libuuid1 libtinfo6 libgpg-error0 libgcrypt20
  # Autotools and Perl (libltdl-dev asks for automake): only for projects that build with autotools.
  automake automake-1.16 autoconf autotools-dev m4 perl perl-modules-5.36 libperl5.36
  # ssh: mpirun on one host starts its ranks itself; gpu-run.sh picks Open MPI's local launcher when ssh is absent.
  openssh-client
  # Open MPI's HTML help pages.
  libjs-jquery libjs-jquery-ui
  # hwloc's optional plugins (libxml2 with ICU, X11, OpenCL, PCI: about 12 MiB); hwloc runs without them.
  libhwloc-plugins
)

DRY_RUN=0
RUNTIME_FOR=()
while (($#)); do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --dest|--runtime-for)
      [[ $# -ge 2 && -n "$2" ]] || { echo "error: fetch-packages: $1 needs a value" >&2; echo "hint: $0 --help lists the options" >&2; exit 2; }
      if [[ "$1" == --dest ]]; then DEST=$2; else RUNTIME_FOR+=("$2"); fi
      shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: fetch-packages: unknown argument '$1'" >&2; echo "hint: $0 --help lists the options" >&2; exit 2 ;;
  esac
  shift
done

for tool in apt-get apt-cache dpkg dpkg-deb; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "error: fetch-packages: '$tool' not found: this script needs Debian's apt and dpkg" >&2
    echo "hint: run it on a Debian 12 (bookworm) machine, the distribution the packages must match" >&2
    exit 1
  fi
done
arch=$(dpkg --print-architecture)
if [[ "$arch" != amd64 ]]; then
  echo "error: fetch-packages: this machine's packages are $arch, the GPU machine is x86-64 (amd64)" >&2
  echo "hint: run this on an amd64 Debian machine" >&2
  exit 1
fi
# --runtime-for: the packages owning each library ldd resolves (dpkg knows a library by its /usr/lib or /lib path, the
# two being one folder on Debian 12), less the assumed ones; unowned libraries are the GPU machine's (CUDA's).
if ((${#RUNTIME_FOR[@]})); then
  ROOTS=(openmpi-bin)
  UNOWNED=()
  for program in "${RUNTIME_FOR[@]}"; do
    [[ -f "$program" ]] || { echo "error: fetch-packages: --runtime-for '$program': no such file" >&2;
      echo "hint: build it first (cmake --build build)" >&2; exit 1; }
    if ldd "$program" | grep -q 'not found'; then
      ldd "$program" | grep 'not found' >&2
      echo "error: fetch-packages: '$program' needs libraries this machine lacks (above)" >&2
      echo "hint: run scripts/setup.sh, or rebuild the program here" >&2
      exit 1
    fi
    while read -r lib; do
      owner=""
      for path in "$lib" "$(realpath "$lib")" "${lib/#\/lib\//\/usr\/lib\/}" "${lib/#\/usr\/lib\//\/lib\/}"; do
        owner=$(dpkg -S "$path" 2>/dev/null | head -n 1 | cut -d: -f1) && [[ -n "$owner" ]] && break
      done
      if [[ -z "$owner" ]]; then
        [[ " ${UNOWNED[*]} " == *" $lib "* ]] && continue
        UNOWNED+=("$lib")
        echo "fetch-packages: $(basename "$lib") ($lib) is in no Debian package: the GPU machine must provide it"
      elif [[ " ${ASSUMED[*]} " != *" $owner "* && " ${ROOTS[*]} " != *" $owner "* ]]; then
        ROOTS+=("$owner")
      fi
    done < <(ldd "$program" | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
  done
fi

for pkg in "${ROOTS[@]}"; do
  if ! apt-cache show --no-all-versions "$pkg" >/dev/null 2>&1; then
    echo "error: fetch-packages: apt knows no package '$pkg'" >&2
    echo "hint: run 'apt-get update' (as root) and try again" >&2
    exit 1
  fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A dpkg status file in which the ASSUMED packages are installed and held (their candidate versions, no Depends), so
# apt's own resolver picks the rest as on a real install: first alternatives, virtual packages, versioned Depends.
# Held, because apt otherwise reinstalls an assumed package that a dependency reaches, and pulls in its Depends too.
# (One apt-cache call for all: each call re-reads the package lists, and names this release lacks are skipped.)
apt-cache show --no-all-versions "${ASSUMED[@]}" 2>/dev/null |
  awk '/^(Package|Version|Architecture|Multi-Arch|Provides):/ {print}
       /^$/ {print "Status: hold ok installed\n"}' >"$work/status" || true

APT_OPTS=(-o "Dir::State::status=$work/status" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
          -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
if ! apt-get -s "${APT_OPTS[@]}" install --no-install-recommends "${ROOTS[@]}" >"$work/sim" 2>"$work/sim.err"; then
  cat "$work/sim.err" >&2
  echo "error: fetch-packages: apt could not resolve ${ROOTS[*]}" >&2
  echo "hint: run 'apt-get update'; if an ASSUMED package was renamed in this release, update the list in $0" >&2
  exit 1
fi
# Lines look like: Inst libfoo1 (1.2-3 Debian:12.8/stable [amd64]); an assumed package would show [its version] third.
awk '/^Inst / && $3 !~ /^\[/ {v=$3; sub(/^\(/, "", v); print $2 "=" v}' "$work/sim" | sort >"$work/list"
count=$(wc -l <"$work/list")
if [[ "$count" -eq 0 ]]; then
  echo "error: fetch-packages: apt resolved no packages to fetch" >&2
  echo "hint: look at the ASSUMED list in $0: it must not name ${ROOTS[*]}" >&2
  exit 1
fi

# "package version bytes", from one apt-cache call over the exact versions.
xargs -a "$work/list" apt-cache show |
  awk '/^Package:/ {p=$2} /^Version:/ {v=$2} /^Size:/ {print p, v, $2}' | sort -u >"$work/sizes"
if [[ $(wc -l <"$work/sizes") -ne "$count" ]]; then
  echo "error: fetch-packages: apt-cache gave sizes for $(wc -l <"$work/sizes") of $count packages" >&2
  echo "hint: run 'apt-get update' (as root) and try again" >&2
  exit 1
fi
total=$(awk '{t += $3} END {print t}' "$work/sizes")
total_mib=$(awk -v b="$total" 'BEGIN {printf "%.1f", b / 1048576}')

if [[ $DRY_RUN -eq 1 ]]; then
  sort -k3 -n "$work/sizes" | awk '{printf "%8.2f MiB  %s %s\n", $3 / 1048576, $1, $2}'
  echo "fetch-packages: $count packages, $total_mib MiB (dry run, nothing downloaded)"
  exit 0
fi
if (( total > LIMIT_MIB * 1048576 )); then
  sort -k3 -n "$work/sizes" | tail -15 | awk '{printf "%8.2f MiB  %s %s\n", $3 / 1048576, $1, $2}' >&2
  echo "error: fetch-packages: $count packages come to $total_mib MiB, over the $LIMIT_MIB MiB budget" >&2
  echo "hint: the device tool carries at most 64 MiB with the working tree; add what the build does not need" \
       "(the largest are listed above) to ASSUMED in $0" >&2
  exit 1
fi

mkdir -p "$work/debs"
echo "fetch-packages: downloading $count packages ($total_mib MiB)"
( cd "$work/debs" && xargs -a "$work/list" apt-get -q "${APT_OPTS[@]}" download ) \
  >"$work/download.log" 2>&1 || {
  cat "$work/download.log" >&2
  echo "error: fetch-packages: apt-get download failed" >&2
  echo "hint: check network access to the Debian mirror and run 'apt-get update' (as root)" >&2
  exit 1
}
got=$(find "$work/debs" -name '*.deb' | wc -l)
if [[ "$got" -ne "$count" ]]; then
  cat "$work/download.log" >&2
  echo "error: fetch-packages: downloaded $got of $count packages" >&2
  echo "hint: see the apt-get output above; run 'apt-get update' (as root) and try again" >&2
  exit 1
fi

# dpkg -x runs no maintainer scripts, so the links their update-alternatives calls would make (mpicc, mpiexec, h5pcc,
# libopenblas.so, ...) are listed for gpu-run.sh: "link target", the highest priority per link, from every postinst's
# `--install link name target priority` and its `--slave link name target` (pairs holding shell variables skipped).
for deb in "$work/debs"/*.deb; do
  dpkg-deb -I "$deb" postinst 2>/dev/null || true
done | awk '
  { line = line $0; if (sub(/\\[ \t]*$/, " ", line)) next }
  line ~ /update-alternatives/ && line ~ /--install/ {
    n = split(line, t, /[ \t]+/)
    for (i = 1; i <= n; i++) {
      if (t[i] == "--install") { prio = (t[i + 4] ~ /^[0-9]+$/) ? t[i + 4] : 0; pair(t[i + 1], t[i + 3]); i += 4 }
      else if (t[i] == "--slave") { pair(t[i + 1], t[i + 3]); i += 3 }
    }
  }
  { line = "" }
  function pair(link, target) {
    if (link ~ /^\// && target ~ /^\// && link !~ /\$/ && target !~ /\$/ && (!(link in best) || prio > best[link])) {
      best[link] = prio; to[link] = target
    }
  }
  END { for (l in to) print l, to[l] }' | sort >"$work/debs/ALTERNATIVES"

{
  echo "# Debian packages for scripts/device/gpu-run.sh, written by scripts/device/fetch-packages.sh."
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ), $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | tr -d '"'), $arch, $count packages, $total_mib MiB"
  echo "# roots: ${ROOTS[*]}"
  echo "# package version bytes"
  cat "$work/sizes"
} >"$work/debs/MANIFEST"

rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
mv "$work/debs" "$DEST"
echo "fetch-packages: $count packages, $total_mib MiB in $DEST (list with versions in $DEST/MANIFEST)"
