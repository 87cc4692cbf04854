# Shared by install_test.sh and deb_test.sh (sourced, bash).

fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_file PATH: exists and is a regular file.
expect_file() { [[ -f $1 ]] || fail "missing $1"; }

# expect_line FILE LINE: FILE has exactly this line.
expect_line() { grep -qxF -- "$2" "$1" || { cat "$1" >&2; fail "$1 lacks line: $2"; }; }

# check_version LOCKD LOCKCTL LOCKBENCH VERSION: the three programs report
# the project version (the git revision may follow).
check_version() {
  local out
  out=$("$1" --version) || fail "$1 --version exited $?"
  [[ $out =~ ^lockd\ $4(\ \(git\ [0-9a-f]+(-dirty)?\))?$ ]] || fail "lockd --version: '$out'"
  out=$("$2" --version) || fail "$2 --version exited $?"
  [[ $out =~ ^lockctl\ $4(\ \(git\ [0-9a-f]+(-dirty)?\))?$ ]] || fail "lockctl --version: '$out'"
  out=$("$3" --version) || fail "$3 --version exited $?"
  [[ $out =~ ^lockbench\ $4(\+g[0-9a-f]+(\.dirty)?)?$ ]] || fail "lockbench --version: '$out'"
  echo "versions ok: $out"
}

# serve_once LOCKD CONFIG WORKDIR VERSION: starts LOCKD with the installed CONFIG
# (ports overridden to free ones: a flag wins over the file), takes and
# releases a lock over TCP, checks /v1/status names VERSION, stops it
# with SIGTERM and expects exit status 0.
serve_once() {
  local lockd=$1 config=$2 work=$3 version=$4 pid port admin_port i reply token status
  "$lockd" --config "$config" --listen 127.0.0.1:0 --admin 127.0.0.1:0 2>"$work/lockd.log" &
  pid=$!
  for ((i = 0; i < 300; i++)); do  # 30 s: a loaded sanitizer run starts slowly
    admin_port=$(grep -m1 'admin listening' "$work/lockd.log" | grep -oE '[0-9]+$' || true)
    [[ -n $admin_port ]] && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/lockd.log" >&2; fail "lockd exited at start"; }
    sleep 0.1
  done
  [[ -n $admin_port ]] || { kill "$pid"; cat "$work/lockd.log" >&2; fail "lockd did not listen"; }
  port=$(grep -m1 ' listening on ' "$work/lockd.log" | grep -oE '127\.0\.0\.1:[0-9]+' | cut -d: -f2)

  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf 'A pkgtest pkg/key 30000\n' >&3
  read -r -t 30 reply <&3 || fail "no reply to A"
  [[ $reply =~ ^A\ ([0-9]+)\ pkgtest\ pkg/key$ ]] || fail "A got '$reply'"
  token=${BASH_REMATCH[1]}
  printf 'R %s pkg/key\n' "$token" >&3
  read -r -t 30 reply <&3 || fail "no reply to R"
  [[ $reply == "R $token pkg/key" ]] || fail "R got '$reply'"
  exec 3>&-

  exec 3<>"/dev/tcp/127.0.0.1/$admin_port"
  printf 'GET /v1/status HTTP/1.0\r\n\r\n' >&3
  status=$(timeout 30 cat <&3)
  exec 3>&-
  [[ $status == *"\"version\":\"$version"* ]] || fail "/v1/status: $status"

  kill -TERM "$pid"
  wait "$pid" || fail "lockd exited $? after SIGTERM"
  echo "served A/R on port $port and stopped cleanly"
}

# client_example PREFIX LOCKD WORK SRC: builds SRC/examples/cpp_client (a
# program outside lockd's tree) against the lockd_client installed under
# PREFIX twice — with CMake's find_package(lockd_client) and with
# pkg-config — and runs both against LOCKD (started here on a free port).
client_example() {
  local prefix=$1 lockd=$2 work=$3 src=$4 pid port i flags out
  cmake -S "$src/examples/cpp_client" -B "$work/example-cmake" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_BUILD_TYPE=Release >"$work/example-cmake.log" 2>&1 || { cat "$work/example-cmake.log"; fail "example: cmake"; }
  grep -qx "lockd_client_DIR:PATH=$prefix/lib/cmake/lockd_client" "$work/example-cmake/CMakeCache.txt" \
    || { grep lockd_client_DIR "$work/example-cmake/CMakeCache.txt"; fail "example: found another lockd_client"; }
  cmake --build "$work/example-cmake" >>"$work/example-cmake.log" 2>&1 \
    || { cat "$work/example-cmake.log"; fail "example: build with find_package"; }
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs lockd_client) \
    || fail "pkg-config lockd_client"
  [[ $flags == *"$prefix/"* || $flags == *"$prefix/lib/pkgconfig/../../"* ]] || fail "pkg-config points elsewhere: $flags"
  # shellcheck disable=SC2086  # the flags are words
  c++ -std=c++20 "$src/examples/cpp_client/hello_lock.cc" $flags -o "$work/hello_pc" \
    || fail "example: build with pkg-config"

  "$lockd" --listen 127.0.0.1:0 --admin off 2>"$work/example-lockd.log" &
  pid=$!
  for ((i = 0; i < 300; i++)); do
    port=$(grep -m1 ' listening on ' "$work/example-lockd.log" | grep -oE '127\.0\.0\.1:[0-9]+' | cut -d: -f2 || true)
    [[ -n $port ]] && break
    sleep 0.1
  done
  [[ -n $port ]] || { kill "$pid"; fail "example: lockd did not listen"; }
  for bin in "$work/example-cmake/hello_lock" "$work/hello_pc"; do
    out=$("$bin" "127.0.0.1:$port") || { kill "$pid"; fail "$bin exited $?: $out"; }
    [[ $out =~ ^holding\ examples/hello\ with\ token\ [0-9]+$ ]] || { kill "$pid"; fail "$bin said: $out"; }
  done
  kill -TERM "$pid"
  wait "$pid" || true
  echo "client example built with find_package and with pkg-config, and ran"
}
