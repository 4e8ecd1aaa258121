#!/usr/bin/env bash
# The Debian packages, as a user gets them: built with cpack in the build directory, installed on
# this machine with apt-get (as root: it changes /usr), then used as installed only -
#   - the README's example ("Using the runtime") built with find_package(hcr) and with pkg-config,
#     and samples/api_example.cpp (which checks its product), run against /usr/lib/libhcr.so.0;
#   - `hcr devices` finding the packaged plugins; hcr-linalg.pc and hcr-mpi.pc giving flags;
#   - `import hcr` from /usr/lib/python3/dist-packages, a gemm checked against NumPy;
#   - the arbiter service: its socket and service units, the group hcr, `hcr serve` run as the
#     unit runs it with the socket handed over as the socket unit binds it, a member of the group
#     joining and root (not a member) refused;
# then purged, and nothing of them may be left in /usr (nor the group hcr).
# The cuda plugin's package is installed where apt-get can satisfy its dependencies, skipped
# (saying so) where not; every other package must install on a machine without CUDA.
#
#   bash tests/packages_check.sh BUILD_DIR SOURCE_DIR WORK_DIR
#
# Registered in ctest (label packages) only with -DHCR_PACKAGE_TEST=ON, which tools/setup.sh test
# gives the normal build alone; it runs serially (RUN_SERIAL), as it changes what /usr holds.
set -euo pipefail
build="$(realpath "$1")" source="$(realpath "$2")" work="$3"
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
unset PYTHONPATH LD_LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH HCR_PLUGIN_PATH \
  HCR_ARBITER_SOCKET

say() { echo "== packages: $*"; }
fail() {
  echo "FAIL (packages): $*" >&2
  exit 1
}
[ "$(id -u)" = 0 ] || fail "needs root: it installs the packages into /usr"

rm -rf "$work"
mkdir -p "$work"
work="$(realpath "$work")"
export HOME="$work/home" XDG_CACHE_HOME="$work/home/.cache"
mkdir -p "$HOME"

# --- build --------------------------------------------------------------------------------------
pkgdir="$build/packages"
rm -rf "$pkgdir"
if ! (cd "$build" && cpack -G DEB -B "$pkgdir") > "$work/cpack.log" 2>&1; then
  cat "$work/cpack.log"
  fail "cpack failed"
fi
mapfile -t debs < <(find "$pkgdir" -maxdepth 1 -name '*.deb' | sort)
((${#debs[@]})) || fail "cpack made no .deb in $pkgdir"
say "built in $pkgdir:"
ls -l "${debs[@]}"

names=() install_debs=() cuda_deb=""
declare -A have=()
: > "$work/files.txt"
: > "$work/dirs.txt"
for deb in "${debs[@]}"; do
  name="$(dpkg-deb -f "$deb" Package)"
  depends="$(dpkg-deb -f "$deb" Depends)"
  echo "   $name: Depends: $depends"
  names+=("$name")
  have[$name]=1
  if dpkg-query -W -f='${Status}' "$name" 2> /dev/null | grep -q "ok installed\|config-files"; then
    fail "$name is installed already: purge it first (this test installs and purges its own)"
  fi
  if [ "$name" = hcr-plugin-cuda ]; then
    cuda_deb="$deb"
  else
    install_debs+=("$deb")
    # Installable without CUDA: nothing of CUDA or NVIDIA among its dependencies.
    if grep -qiE "cuda|nvidia" <<< "$depends"; then
      fail "$name depends on CUDA: $depends"
    fi
  fi
  dpkg-deb -c "$deb" | awk '{print $1, $6}' | sed 's| \./| /|' > "$work/contents.txt"
  grep -v '^d' "$work/contents.txt" | cut -d' ' -f2 >> "$work/files.txt"
  grep '^d' "$work/contents.txt" | cut -d' ' -f2 | sed 's|/$||' >> "$work/dirs.txt"
done
for expect in libhcr0 libhcr-dev hcr-tools hcr-plugin-cpu hcr-plugin-sim; do
  [ -n "${have[$expect]:-}" ] || fail "no package $expect among: ${names[*]}"
done

# Nothing of them is there before (else "nothing left" would prove nothing).
while read -r f; do
  if [ -e "$f" ] || [ -L "$f" ]; then fail "$f exists before the packages are installed"; fi
done < "$work/files.txt"
new_dirs=()
while read -r d; do
  [ -d "$d" ] || new_dirs+=("$d")
done < <(sort -u "$work/dirs.txt")
getent group hcr > /dev/null && fail "the group hcr exists before hcr-tools is installed"
# Whatever is named hcr under /usr now; after the purge there must be nothing more (this catches
# what no package lists, such as byte-code or a file a maintainer script made).
find /usr -iname '*hcr*' 2> /dev/null | sort > "$work/usr-before.txt"
[ -e /run/hcr ] && fail "/run/hcr exists already (an arbiter of another install?)"

# --- install ------------------------------------------------------------------------------------
server_pid="" test_user=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2> /dev/null || true; fi
  if [ -n "$test_user" ]; then userdel "$test_user" 2> /dev/null || true; fi
  rmdir /run/hcr 2> /dev/null || true
  local installed=()
  for n in "${names[@]}"; do
    [ -n "$n" ] || continue
    dpkg-query -W -f='${Status}' "$n" 2> /dev/null | grep -q "ok installed\|config-files" &&
      installed+=("$n")
  done
  if ((${#installed[@]})); then
    echo "== packages: purging after a failure: ${installed[*]}"
    apt-get purge -y -q "${installed[@]}" > /dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

say "apt-get install ${install_debs[*]##*/}"
apt-get install -y -q --no-install-recommends "${install_debs[@]}"
if [ -n "$cuda_deb" ]; then
  if apt-get install -s -q --no-install-recommends "$cuda_deb" > "$work/cuda-sim.log" 2>&1; then
    say "apt-get install ${cuda_deb##*/}"
    apt-get install -y -q --no-install-recommends "$cuda_deb"
  else
    say "hcr-plugin-cuda skipped: apt-get cannot install its dependencies here:"
    cat "$work/cuda-sim.log"
    names=("${names[@]/hcr-plugin-cuda/}")
  fi
fi
for n in "${names[@]}"; do
  [ -z "$n" ] && continue
  dpkg-query -W -f='${Status}' "$n" | grep -q "install ok installed" || fail "$n not installed"
done

# --- use ----------------------------------------------------------------------------------------
run() {  # run WHAT COMMAND...: runs it, printing its output; fails naming WHAT
  if ! "${@:2}" > "$work/out.txt" 2>&1; then
    cat "$work/out.txt"
    fail "$1"
  fi
  cat "$work/out.txt"
}
expect() {  # expect TEXT WHAT: the last run's output holds TEXT
  grep -qF -- "$1" "$work/out.txt" || fail "$2: no '$1' in its output"
}
from_usr() {  # from_usr PROGRAM: it loads libhcr.so.0 from /usr/lib (the package), as built
  ldd "$1" > "$work/ldd.txt"
  grep -qE "libhcr\.so\.0 => (/usr)?/lib/libhcr\.so\.0" "$work/ldd.txt" ||
    fail "$1 does not load the packaged libhcr.so.0: $(grep libhcr "$work/ldd.txt")"
}

run "hcr devices" hcr devices
# (libhcr's directory as the loader found it: through hcr's run path, /usr/bin/../lib)
for plugin in cpu sim opencl cuda; do
  if dpkg-query -W -f='${Status}' "hcr-plugin-$plugin" 2> /dev/null | grep -q "ok installed"; then
    grep -qE "loaded +$plugin .* /usr/(bin/\.\./)?lib/hcr/plugins/libhcr-$plugin\.so" \
      "$work/out.txt" || fail "hcr devices did not load the packaged $plugin plugin"
  fi
done

# The README's example, as a reader copies it.
app="$work/readme-app"
mkdir -p "$app"
awk '/^## Using the runtime/ {on = 1} on && /^```cpp$/ {code = 1; next}
     code && /^```$/ {exit} code {print}' "$source/README.md" > "$app/main.cpp"
grep -q "hcr::Runtime rt" "$app/main.cpp" || fail "README: no C++ block in 'Using the runtime'"
cp "$source/samples/api_example.cpp" "$app/"
cat > "$app/CMakeLists.txt" << 'EOF'
cmake_minimum_required(VERSION 3.25)
project(readme_app LANGUAGES CXX)
find_package(hcr 0.1 REQUIRED)
add_executable(readme main.cpp)
target_link_libraries(readme PRIVATE hcr::hcr)
add_executable(api_example api_example.cpp)
target_link_libraries(api_example PRIVATE hcr::hcr)
EOF
run "cmake configure (find_package(hcr))" cmake -S "$app" -B "$app/build" -DCMAKE_BUILD_TYPE=Release
expect "$app/build" "cmake configure"
hcr_dir="$(grep "^hcr_DIR:" "$app/build/CMakeCache.txt")"
[ "$hcr_dir" = "hcr_DIR:PATH=/usr/lib/cmake/hcr" ] ||
  fail "find_package(hcr) did not take /usr/lib/cmake/hcr: $hcr_dir"
run "cmake build" cmake --build "$app/build"
from_usr "$app/build/readme"
run "the README's example (CMake)" "$app/build/readme"
run "samples/api_example.cpp (CMake)" "$app/build/api_example"
expect "C(0,0) = 1024.0 (expect 1024.0)" "api_example"

pc_flags="$(pkg-config --cflags --libs hcr)" || fail "pkg-config --cflags --libs hcr"
say "pkg-config --cflags --libs hcr: $pc_flags"
# shellcheck disable=SC2086  # the flags are words
run "c++ with hcr.pc" c++ -std=c++20 -O2 "$app/main.cpp" -o "$app/readme-pc" $pc_flags
from_usr "$app/readme-pc"
run "the README's example (pkg-config)" "$app/readme-pc"
# shellcheck disable=SC2086
run "c++ with hcr.pc" c++ -std=c++20 -O2 "$app/api_example.cpp" -o "$app/api-pc" $pc_flags
run "samples/api_example.cpp (pkg-config)" "$app/api-pc"
expect "C(0,0) = 1024.0 (expect 1024.0)" "api_example (pkg-config)"
run "pkg-config hcr-linalg" pkg-config --libs hcr-linalg
expect "-lhcr_linalg" "pkg-config --libs hcr-linalg"
if [ -n "${have[libhcr-mpi0]:-}" ]; then
  run "pkg-config hcr-mpi" pkg-config --cflags --libs hcr-mpi
  expect "-lhcr_mpi" "pkg-config --libs hcr-mpi"
  [ -x /usr/bin/hcr-mpi ] || fail "libhcr-mpi0 has no /usr/bin/hcr-mpi"
fi

if [ -n "${have[python3-hcr]:-}" ]; then
  cd "$work"
  # Debian's interpreter, the one the package is for (not whichever python3 PATH finds first)
  run "python3 -c 'import hcr; ...'" /usr/bin/python3 -c '
import numpy as np, hcr
assert hcr.__file__.startswith("/usr/lib/python3/dist-packages/hcr/"), hcr.__file__
with hcr.Runtime({"backend": [{"name": "cpu"}]}) as rt:
    a = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 4096
    c = np.zeros_like(a)
    hcr.linalg.gemm(rt, a, a, c, tile=32).result()
    assert np.allclose(c, a @ a, rtol=1e-4), "gemm differs from NumPy"
print("python3-hcr:", hcr.__file__, "gemm as NumPy")
'
  expect "gemm as NumPy" "import hcr"
  cd - > /dev/null
fi

# The arbiter service: the units as installed, then the service's command as systemd runs it,
# with the socket bound as hcr-arbiter.socket says and handed over (LISTEN_PID, LISTEN_FDS, fd 3).
unit=/usr/lib/systemd/system/hcr-arbiter.service
socket_unit=/usr/lib/systemd/system/hcr-arbiter.socket
[ -f "$unit" ] || fail "hcr-tools installed no $unit"
[ -f "$socket_unit" ] || fail "hcr-tools installed no $socket_unit"
getent group hcr > /dev/null || fail "hcr-tools' postinst made no group hcr"
exec_start="$(sed -n 's/^ExecStart=//p' "$unit")"
[ "${exec_start%% *}" = /usr/bin/hcr ] || fail "$unit runs '$exec_start', not /usr/bin/hcr"
listen="$(sed -n 's/^ListenStream=//p' "$socket_unit")"
[ "$listen" = /run/hcr/arbiter.sock ] || fail "$socket_unit listens on '$listen'"
if command -v systemd-analyze > /dev/null; then
  run "systemd-analyze verify $unit" systemd-analyze verify "$unit" "$socket_unit"
fi
mkdir -m 0755 /run/hcr  # the socket unit's DirectoryMode=
# shellcheck disable=SC2086  # the unit's command line, split as systemd splits this one
/usr/bin/python3 -c '
import grp, os, socket, sys
path = "/run/hcr/arbiter.sock"
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
os.chown(path, 0, grp.getgrnam("hcr").gr_gid)  # SocketUser=root, SocketGroup=hcr
os.chmod(path, 0o660)                          # SocketMode=0660
s.listen(64)
os.dup2(s.fileno(), 3, inheritable=True)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1")
os.execv(sys.argv[1], sys.argv[1:])
' $exec_start 2> "$work/serve.log" &
server_pid=$!
for _ in $(seq 100); do
  grep -q "arbiter on" "$work/serve.log" && break
  sleep 0.1
done
grep -q "arbiter on '/run/hcr/arbiter.sock', handed over by systemd" "$work/serve.log" ||
  { cat "$work/serve.log"; fail "hcr serve did not take the socket handed over"; }
[ -S /run/hcr/arbiter.sock ] || { cat "$work/serve.log"; fail "hcr serve made no socket"; }
access="$(stat -c '%A %U:%G' /run/hcr/arbiter.sock)"
[ "$access" = "srw-rw---- root:hcr" ] || fail "/run/hcr/arbiter.sock is '$access'"
test_user="hcrpkg$$"
useradd --system --no-create-home --shell /usr/sbin/nologin -G hcr "$test_user"
user_dir="$(mktemp -d)"
chmod 755 "$user_dir"
cp "$app/build/readme" "$user_dir/"
install -d -o "$test_user" "$user_dir/home"
run "the README's example as a member of hcr, joined" \
  setpriv --reuid="$test_user" --regid=hcr --init-groups env HOME="$user_dir/home" \
  XDG_CACHE_HOME="$user_dir/home/.cache" HCR_ARBITER_SOCKET=/run/hcr/arbiter.sock \
  "$user_dir/readme"
run "the README's example as root, refused" env HCR_ARBITER_SOCKET=/run/hcr/arbiter.sock \
  "$app/build/readme"
kill -TERM "$server_pid"
wait "$server_pid" || { cat "$work/serve.log"; fail "hcr serve exited with an error"; }
server_pid=""
cat "$work/serve.log"
grep -q "1 tenant(s) joined, 1 refused" "$work/serve.log" ||
  fail "the arbiter did not admit the member of hcr and refuse root"
[ -S /run/hcr/arbiter.sock ] || fail "hcr serve removed the socket systemd bound"
rm /run/hcr/arbiter.sock  # RemoveOnStop=
rmdir /run/hcr
userdel "$test_user"
test_user=""
rm -rf "$user_dir"

# --- purge --------------------------------------------------------------------------------------
mapfile -t installed < <(printf '%s\n' "${names[@]}" | grep -v '^$')
say "apt-get purge ${installed[*]}"
apt-get purge -y -q "${installed[@]}"
for n in "${installed[@]}"; do
  if dpkg-query -W -f='${Status}' "$n" 2> /dev/null | grep -qv "not-installed"; then
    fail "$n is still known to dpkg: $(dpkg-query -W -f='${Status}' "$n")"
  fi
done
while read -r f; do
  if [ -e "$f" ] || [ -L "$f" ]; then fail "$f is left after the purge"; fi
done < "$work/files.txt"
for d in "${new_dirs[@]}"; do
  [ -d "$d" ] &&
    fail "the directory $d is left after the purge: $(find "$d" -mindepth 1 -maxdepth 1 | head -5)"
done
getent group hcr > /dev/null && fail "the group hcr is left after the purge"
find /usr -iname '*hcr*' 2> /dev/null | sort > "$work/usr-after.txt"
left="$(comm -13 "$work/usr-before.txt" "$work/usr-after.txt")"
[ -z "$left" ] || fail "left in /usr after the purge: $left"
trap - EXIT
say "installed, used and purged: ${installed[*]}"
