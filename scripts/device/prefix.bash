# Sourced by gpu-run.sh and first-run.sh: unpacks the carried Debian packages into a private prefix and sets the
# environment (PATH, library paths, Open MPI's relocation variables) that makes programs run from it.
# The caller defines die() and note(); MULTIARCH names the packages' library folder.
MULTIARCH=x86_64-linux-gnu  # the packages are amd64 (fetch-packages.sh checks)

# dpkg -x, or by hand where the image has no dpkg: a .deb is an ar archive holding data.tar.{xz,zst,gz}.
prefix_extract_deb() {  # prefix_extract_deb DEB PREFIX
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
    return
  fi
  local member
  member=$(ar t "$1" | grep '^data\.tar')
  case "$member" in
    *.xz) ar p "$1" "$member" | tar -x -J -C "$2" ;;
    *.zst) ar p "$1" "$member" | tar -x --zstd -C "$2" ;;
    *.gz) ar p "$1" "$member" | tar -x -z -C "$2" ;;
    *) die "$(basename "$1"): no data.tar member found" "fetch the packages again (scripts/device/fetch-packages.sh)" ;;
  esac
}

# prefix_unpack DEBS PREFIX: every .deb of DEBS into PREFIX, again only when DEBS/MANIFEST differs from the one kept
# there (so a warm machine reuses it). Sets PREFIX_UNPACKED to 1 when it unpacked, 0 when it reused.
prefix_unpack() {
  local debs=$1 prefix=$2 p=$2/usr deb link target soname system
  [[ "$(uname -m)" == x86_64 ]] || die "this machine is $(uname -m); the packages are x86-64" "run it on the GPU machine"
  if ! compgen -G "$debs/*.deb" >/dev/null || [[ ! -f "$debs/MANIFEST" ]]; then
    die "no packages in $debs" \
        "run scripts/device/fetch-packages.sh on a machine with Debian's apt first, and carry .device" \
        "(device tool: carry [\".device\"])"
  fi
  local glibc
  glibc=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
  printf '%s\n' 2.36 "$glibc" | sort -V -C ||
    die "glibc $glibc is older than Debian 12's 2.36, which the carried packages were built against" \
        "fetch the packages on an older Debian instead (see docs/device.md)"
  PREFIX_UNPACKED=0
  if cmp -s "$debs/MANIFEST" "$prefix/MANIFEST"; then
    note "prefix: reusing $prefix (same MANIFEST)"
    return 0
  fi
  PREFIX_UNPACKED=1
  rm -rf "$prefix"
  mkdir -p "$prefix"
  for deb in "$debs"/*.deb; do
    prefix_extract_deb "$deb" "$prefix"
  done
  # Absolute links point into / (libz.so -> /lib/.../libz.so.1.2.13): aim them into the prefix; a library link whose
  # target is absent here too (zlib1g is not carried) goes to this machine's library of the same soname.
  while IFS= read -r link; do
    target=$(readlink "$link")
    if [[ -e "$prefix$target" ]]; then
      ln -sfn "$prefix$target" "$link"
    elif [[ ! -e "$target" && "$(basename "$link")" == lib*.so ]]; then
      soname=$(basename "$target" | sed -E 's/^(lib.*\.so\.[0-9]+).*/\1/')
      system=$(ldconfig -p | awk -v s="$soname" '$1 == s && !found {found = $NF} END {print found}')
      if [[ -n "$system" ]]; then
        ln -sfn "$system" "$link"
      fi
    fi
  done < <(find "$prefix" -type l -lname '/*')
  # The links Debian's postinst scripts make with update-alternatives (mpicc, mpiexec, h5pcc, libopenblas.so, ...).
  while read -r link target; do
    mkdir -p "$(dirname "$prefix$link")"
    ln -sfn "$prefix$target" "$prefix$link"
  done < <(grep -v '^#' "$debs/ALTERNATIVES" 2>/dev/null || true)
  # Text files with the install prefix written in: HDF5's compiler wrapper, pkg-config files.
  if [[ -f "$p/bin/h5pcc.openmpi" ]]; then
    sed -i "s|^prefix=\"/usr\"|prefix=\"$p\"|" "$p/bin/h5pcc.openmpi"
  fi
  find "$p" -name '*.pc' -type f -exec sed -i -E "s#(^|[=[:space:]]|-[IL])/usr([/[:space:]]|\$)#\1$p\2#g" {} +
  cp "$debs/MANIFEST" "$prefix/MANIFEST"
  note "prefix: unpacked $(find "$debs" -name '*.deb' | wc -l) packages into $prefix"
}

# prefix_env PREFIX: the prefix first, for builds and for every process started after it.
prefix_env() {
  local prefix=$1 p=$1/usr libdir=$1/usr/lib/$MULTIARCH
  # The machine's own library path, kept for its Python and PyTorch (scripts/bench/gpu.sh runs them with it).
  export BENCH_PYTHON_LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}
  export PATH=$p/bin:$PATH
  # Library folders: a few packages (libnl, keyutils) still install into /lib rather than /usr/lib.
  local prefix_libs=$prefix/lib/$MULTIARCH:$libdir
  export LD_LIBRARY_PATH=$prefix_libs:$libdir/openmpi/lib:$libdir/hdf5/openmpi:$libdir/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # gcc's search path for -l: HDF5's wrapper links -lcrypto -lcurl -lsz -lz, which a system keeps in the default one.
  export LIBRARY_PATH=$prefix_libs${LIBRARY_PATH:+:$LIBRARY_PATH}
  export CMAKE_PREFIX_PATH=$p${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export PKG_CONFIG_PATH=$libdir/pkgconfig:$p/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  # A relocated Open MPI finds its components and help files through OPAL_PREFIX, and Debian's MCA defaults (the same
  # as on a machine with the package installed) through OPAL_SYSCONFDIR. PMIx has its own prefix, and Debian built it
  # with absolute lib and share folders, which OPAL_PREFIX does not move: each is named.
  export OPAL_PREFIX=$p
  export OPAL_SYSCONFDIR=$prefix/etc/openmpi
  local pmix=$libdir/pmix2
  export PMIX_PREFIX=$pmix PMIX_LIBDIR=$pmix/lib PMIX_PKGLIBDIR=$pmix/lib/pmix PMIX_INCLUDEDIR=$pmix/include \
         PMIX_DATADIR=$pmix/share PMIX_PKGDATADIR=$pmix/share/pmix
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # Without ssh (the device image has none), Open MPI launches local ranks itself instead of looking for an rsh agent.
  if ! command -v ssh >/dev/null && ! command -v rsh >/dev/null; then
    export OMPI_MCA_plm=isolated
  fi
  # Each test program's MPI_Init starts a singleton that makes, and at exit removes when empty, the session folder
  # $TMPDIR/ompi.<host>.<uid>; Open MPI 4.1.4 fails with "mkdir ... File exists" when two tests race on it (seen in a
  # ctest -j2 run). A subfolder of ours keeps it from ever being empty, so it is made once, here.
  local host session_top
  host=$(uname -n)
  session_top=${TMPDIR:-/tmp}/ompi.${host%%.*}.$(id -u)
  [[ -d "$session_top" ]] || mkdir -m 700 "$session_top"
  mkdir -p "$session_top/ember-keep"
}
