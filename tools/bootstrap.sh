#!/usr/bin/env bash
# The script behind README's Quick start:
#
#   tools/bootstrap.sh example [ARGS]  install missing Debian packages (and the Fashion-MNIST
#                                      data), build, train examples/train_fashion_mnist [ARGS]
#   tools/bootstrap.sh test [ARGS...]  install missing Debian packages, then CI's stages, in the
#                                      order that fails fastest:
#     checks           the C++ formatting (tools/check_format.sh) and the tree's rules
#                      (tools/check_tree.sh: floors, side doors, file and function sizes): seconds
#     release build    Release, warnings as errors (g++; the CUDA backend too where nvcc is)
#     release tests    `ctest -L unit` first (the fast lane, minutes into the run), then the rest:
#                      training runs, gradient checks, MPI jobs, golden data, install
#     sanitizer build  one clang build with AddressSanitizer, UndefinedBehaviorSanitizer and
#                      libFuzzer's coverage, the CUDA backend on Thrust's OpenMP system
#     sanitizer tests  every test but `install` in that build
#     fuzz             each libFuzzer target of tests/fuzz for XGRAD_FUZZ_SECONDS, as many at a
#                      time as there are cores (docs/fuzzing.md)
#   ARGS go to ctest (e.g. `-L gradcheck`), which then runs once per build with them.
#   Every step prints the time since the start; a failure names its stage and when it failed.
#
# ccache, when installed (the test mode installs it), caches the compilations of both builds.
#
# Environment: BUILD_DIR (default: build, relative to the repository root);
# SANITIZE_BUILD_DIR (default: $BUILD_DIR-sanitize); XGRAD_SKIP_SANITIZERS=1 skips the
# sanitizer and fuzz stages; XGRAD_SKIP_FUZZ=1 the fuzz stage (the sanitizer build then has no
# fuzzers' coverage); XGRAD_FUZZ_SECONDS (default 60): how long each fuzz target runs.
# Works from any directory; everything happens in the repository root.
set -euo pipefail

usage() {
  cat <<'EOF_USAGE'
usage: tools/bootstrap.sh example [ARGS...]   build, then train build/examples/train_fashion_mnist [ARGS...]
       tools/bootstrap.sh test [ARGS...]      checks, the Release build and its tests (unit first), the
                                              sanitizer build and its tests, then the fuzz targets;
                                              ARGS go to ctest (e.g. -L gradcheck)

Installs missing Debian packages first (as root; otherwise prints the apt-get line to run).
Environment: BUILD_DIR=<dir> (default: build); XGRAD_SKIP_SANITIZERS=1, XGRAD_SKIP_FUZZ=1 skip stages;
XGRAD_FUZZ_SECONDS=<s> (default 60)
EOF_USAGE
}

start_seconds=$SECONDS
stage="setup"
elapsed() { printf '%d:%02d' $(((SECONDS - start_seconds) / 60)) $(((SECONDS - start_seconds) % 60)); }
step() { printf '\n==> [%s] %s\n' "$(elapsed)" "$*"; }
die() { printf 'bootstrap: error: %s\n' "$*" >&2; exit 1; }
# Whatever fails, the last line names the stage and the time.
on_exit() {
  local rc=$?
  if [[ $rc -ne 0 && $rc -ne 2 ]]; then
    printf '\nbootstrap: stage "%s" failed after %s (exit status %d)\n' "$stage" "$(elapsed)" "$rc" >&2
  fi
}
trap on_exit EXIT

if [[ $# -lt 1 ]]; then
  usage >&2
  exit 2
fi
mode=$1
shift
case "$mode" in
  example|test) ;;
  -h|--help|help) usage; exit 0 ;;
  *) usage >&2; die "unknown command '$mode'" ;;
esac

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"
build_dir=${BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)

# ---- Debian packages ------------------------------------------------------------------------
is_installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

stage="packages"
step "Checking Debian packages"
if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "dpkg-query not found (not a Debian-based system?): skipping the package check."
  echo "Needed: CMake >= 3.20, a C++17 compiler, ninja or make, xtensor, xtl, xsimd, doctest,"
  echo "zlib, libpng, libjpeg(-turbo), OpenBLAS, nlohmann-json, pkg-config, optionally Open MPI, and the Fashion-MNIST files (IDX, gzip) in"
  echo "/usr/share/datasets/fashion-mnist or a folder given to the example with --data-dir."
  echo "The test mode also needs clang-format (version 14), and clang 14 with its sanitizer runtimes and OpenMP."
else
  packages=(cmake g++ ninja-build libxtensor-dev xtl-dev libxsimd-dev doctest-dev zlib1g-dev libopenblas-dev
            nlohmann-json3-dev libpng-dev libjpeg-dev pkg-config dataset-fashion-mnist
            # MPI for data-parallel training (xgrad::distributed, mpirun): library and launcher.
            libopenmpi-dev openmpi-bin)
  # Thrust and CUB for the CUDA backend's OpenMP test build, when no CUDA toolkit brings them.
  if [[ $mode == test && ! -f /usr/local/cuda/include/cccl/thrust/version.h ]]; then
    packages+=(libthrust-dev libcub-dev)
  fi
  # The test mode's format check and ccache; clang with its sanitizer and libFuzzer runtimes
  # and LLVM's OpenMP (the Thrust system of the sanitizer build); PyTorch for the interop test
  # (a peer the test compares with, never a build dependency).
  if [[ $mode == test ]]; then
    packages+=(clang-format ccache python3-torch)
    if [[ ${XGRAD_SKIP_SANITIZERS:-0} != 1 ]]; then
      packages+=(clang libclang-rt-14-dev libomp-14-dev)
    fi
  fi
  missing=()
  for pkg in "${packages[@]}"; do
    if ! is_installed "$pkg"; then
      missing+=("$pkg")
    fi
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "All needed packages are installed: ${packages[*]}"
  elif [[ $(id -u) -eq 0 ]]; then
    echo "Installing missing packages: ${missing[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
  else
    echo "Missing packages: ${missing[*]}" >&2
    echo "Install them with:" >&2
    echo >&2
    echo "  sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    echo >&2
    echo "then run this script again." >&2
    exit 1
  fi
fi

# ---- checks (test mode) ---------------------------------------------------------------------
# Before the long builds, so that a formatting slip or a broken rule fails in seconds.
if [[ $mode == test ]]; then
  stage="checks"
  step "Checking the C++ formatting: tools/check_format.sh"
  if ! tools/check_format.sh; then
    die "C++ files are not formatted (list above); run tools/check_format.sh --fix and commit the result"
  fi
  step "Checking the tree's rules: tools/check_tree.sh"
  tools/check_tree.sh
fi

# ---- release build --------------------------------------------------------------------------
ccache_args=()
if command -v ccache >/dev/null 2>&1; then
  ccache_args=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# generator_args <dir>: Ninja when available, but never switch the generator of an existing build.
generator_args() {
  if [[ ! -f "$1/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
    echo "-G Ninja"
  fi
}

stage="release build"
configure_args=(-S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "${ccache_args[@]}")
if [[ $mode == example ]]; then
  configure_args+=(-DXGRAD_BUILD_EXAMPLES=ON)
else
  # The test builds treat warnings as errors, so that no warning slips in unnoticed.
  configure_args+=(-DXGRAD_BUILD_TESTS=ON -DXGRAD_WERROR=ON)
fi
# shellcheck disable=SC2207
configure_args+=($(generator_args "$build_dir"))
step "Configuring: cmake ${configure_args[*]}"
cmake "${configure_args[@]}"
step "Building: cmake --build $build_dir -j$jobs"
cmake --build "$build_dir" -j"$jobs"

if [[ $mode == example ]]; then
  stage="example"
  exe="$build_dir/examples/train_fashion_mnist"
  [[ -x "$exe" ]] || die "$exe was not built"
  step "Running: $exe $*"
  "$exe" "$@"
  exit 0
fi

# ---- release tests --------------------------------------------------------------------------
stage="release tests"
if [[ $# -gt 0 ]]; then
  step "Testing: ctest --test-dir $build_dir --output-on-failure -j$jobs $*"
  ctest --test-dir "$build_dir" --output-on-failure -j"$jobs" "$@"
else
  step "Testing the fast lane: ctest --test-dir $build_dir -L unit --output-on-failure -j$jobs"
  ctest --test-dir "$build_dir" -L unit --output-on-failure -j"$jobs"
  step "The unit tests passed; the others: ctest --test-dir $build_dir -LE unit --output-on-failure -j$jobs"
  ctest --test-dir "$build_dir" -LE unit --output-on-failure -j"$jobs"
fi

# ---- sanitizer build and tests --------------------------------------------------------------
# One clang build serves the sanitizers and the fuzzers: every source with AddressSanitizer and
# UndefinedBehaviorSanitizer (XGRAD_SANITIZE) and libFuzzer's coverage (XGRAD_BUILD_FUZZ), and
# the CUDA backend's sources on Thrust's OpenMP system (XGRAD_CUDA_ON_CPU), so its `cuda_cpu`
# tests check the backend on every machine. The install test is left out: it builds an outside
# project, which is not instrumented.
if [[ ${XGRAD_SKIP_SANITIZERS:-0} == 1 ]]; then
  stage="done"
  step "Sanitizer and fuzz stages skipped (XGRAD_SKIP_SANITIZERS=1)"
  exit 0
fi
stage="sanitizer build"
san_dir=${SANITIZE_BUILD_DIR:-$build_dir-sanitize}
fuzz=ON
[[ ${XGRAD_SKIP_FUZZ:-0} == 1 ]] && fuzz=OFF
# A folder configured with another compiler starts afresh (CMake cannot switch compilers).
if [[ -f "$san_dir/CMakeCache.txt" ]] && ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$san_dir/CMakeCache.txt"; then
  rm -rf "$san_dir"
fi
san_args=(-S . -B "$san_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXGRAD_SANITIZE=ON "-DXGRAD_BUILD_FUZZ=$fuzz"
          -DXGRAD_USE_CUDA=OFF -DXGRAD_CUDA_ON_CPU=ON -DXGRAD_BUILD_EXAMPLES=ON -DXGRAD_BUILD_TESTS=ON
          -DXGRAD_WERROR=ON "${ccache_args[@]}")
# shellcheck disable=SC2207
san_args+=($(generator_args "$san_dir"))
step "Configuring the sanitizer build: CC=clang CXX=clang++ cmake ${san_args[*]}"
CC=clang CXX=clang++ cmake "${san_args[@]}"
step "Building: cmake --build $san_dir -j$jobs"
cmake --build "$san_dir" -j"$jobs"

stage="sanitizer tests"
step "Testing under ASan+UBSan: ctest --test-dir $san_dir -LE install --output-on-failure -j$jobs $*"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$san_dir" -LE install --output-on-failure -j"$jobs" "$@"

# ---- fuzz -----------------------------------------------------------------------------------
# Each libFuzzer target (tests/fuzz, docs/fuzzing.md) runs for XGRAD_FUZZ_SECONDS from a copy of
# its seed corpus with a fixed seed, as many at a time as there are cores (each is one
# process). A finding (crash, sanitizer report, unexpected exception, timeout, an allocation
# above 64 MiB or more than 2 GiB resident) fails the stage; its input is kept in
# $san_dir/fuzz-findings/<target>/ for tests/fuzz/regressions/<target>/.
if [[ $fuzz == OFF ]]; then
  stage="done"
  step "Fuzz stage skipped (XGRAD_SKIP_FUZZ=1)"
  exit 0
fi
stage="fuzz"
fuzz_seconds=${XGRAD_FUZZ_SECONDS:-60}

# run_fuzz <target>: one target, its output in $san_dir/fuzz-run/<target>/log.
run_fuzz() {
  local name=$1
  local exe="$san_dir/tests/fuzz/fuzz_$name" work="$san_dir/fuzz-run/$name"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$san_dir/fuzz-findings/$name"
  if [[ ! -x "$exe" ]]; then
    echo "$exe was not built" >"$work/log"
    return 1
  fi
  # A copy of the seeds: libFuzzer adds the inputs it finds to its corpus folder.
  cp tests/fuzz/corpus/"$name"/* "$work/corpus/"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$exe" -seed=1 -max_total_time="$fuzz_seconds" -timeout=25 -rss_limit_mb=2048 -malloc_limit_mb=64 \
           -max_len=8192 -print_final_stats=1 -artifact_prefix="$san_dir/fuzz-findings/$name/" \
           "$work/corpus" >"$work/log" 2>&1
}

# report_fuzz <target> <status>: its statistics, or its finding.
fuzz_failed=()
report_fuzz() {
  local log="$san_dir/fuzz-run/$1/log"
  if [[ $2 -eq 0 ]]; then
    printf '  %-12s %s\n' "$1" "$(grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$log" | tr '\n' ' ')"
  else
    printf '  %-12s FINDING (exit status %d):\n' "$1" "$2"
    tail -n 60 "$log" || true
    fuzz_failed+=("$1")
  fi
}

targets=()
for src in tests/fuzz/fuzz_*.cpp; do
  name=$(basename "$src" .cpp)
  targets+=("${name#fuzz_}")
done
step "Fuzzing ${targets[*]}: ${fuzz_seconds} s each, $jobs at a time"
running_pids=()
running_names=()
for name in "${targets[@]}"; do
  run_fuzz "$name" &
  running_pids+=($!)
  running_names+=("$name")
  # With $jobs running, wait for the oldest before starting another (all run equally long).
  if [[ ${#running_pids[@]} -ge $jobs ]]; then
    status=0
    wait "${running_pids[0]}" || status=$?
    report_fuzz "${running_names[0]}" "$status"
    running_pids=("${running_pids[@]:1}")
    running_names=("${running_names[@]:1}")
  fi
done
for i in "${!running_pids[@]}"; do
  status=0
  wait "${running_pids[$i]}" || status=$?
  report_fuzz "${running_names[$i]}" "$status"
done
if [[ ${#fuzz_failed[@]} -gt 0 ]]; then
  die "fuzz findings in: ${fuzz_failed[*]} (inputs in $san_dir/fuzz-findings/; docs/fuzzing.md says how to make them regression tests)"
fi
stage="done"
step "Every stage passed"
