#!/usr/bin/env bash
# The script behind README's Quick start:
#
#   tools/bootstrap.sh example [ARGS]  install missing Debian packages (and the Fashion-MNIST
#                                      data), build, train examples/train_fashion_mnist [ARGS]
#   tools/bootstrap.sh test [ARGS...]  install missing Debian packages, check the C++ formatting
#                                      (tools/check_format.sh), build with warnings as errors,
#                                      run ctest, then build again with ASan+UBSan and run the
#                                      tests there too (ARGS go to ctest, e.g. `-L gradcheck`),
#                                      then build the libFuzzer targets with clang and run each
#                                      for a bounded time (docs/fuzzing.md)
#
# The CUDA backend: where nvcc is installed, the first build compiles it for the GPU (its
# `cuda` tests skip when no GPU is present). The sanitizer build compiles the same backend
# sources with g++ on Thrust's OpenMP system (XGRAD_CUDA_ON_CPU) and runs them as cuda:0, so
# its `cuda_cpu` tests check the backend on every machine. Thrust comes from the CUDA toolkit,
# or from Debian's libthrust-dev/libcub-dev where there is no toolkit.
#
# Environment: BUILD_DIR (default: build, relative to the repository root);
# SANITIZE_BUILD_DIR (default: $BUILD_DIR-sanitize); XGRAD_SKIP_SANITIZERS=1 skips that stage.
# FUZZ_BUILD_DIR (default: build-fuzz); XGRAD_FUZZ_SECONDS (default 60): how long each fuzz
# target runs; XGRAD_SKIP_FUZZ=1 skips the fuzz stage.
# Works from any directory; everything happens in the repository root.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: tools/bootstrap.sh example [ARGS...]   build, then train build/examples/train_fashion_mnist [ARGS...]
       tools/bootstrap.sh test [ARGS...]      check the formatting, build (warnings as errors), then run
                                              ctest [ARGS...] (e.g. -L gradcheck), also under ASan+UBSan,
                                              then run each libFuzzer target for XGRAD_FUZZ_SECONDS (60)

Installs missing Debian packages first (as root; otherwise prints the apt-get line to run).
Environment: BUILD_DIR=<dir> (default: build); XGRAD_SKIP_SANITIZERS=1, XGRAD_SKIP_FUZZ=1 skip stages
EOF
}

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'bootstrap: error: %s\n' "$*" >&2; exit 1; }

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

# ---- 1. Debian packages --------------------------------------------------------------------
is_installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

step "Checking Debian packages"
if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "dpkg-query not found (not a Debian-based system?): skipping the package check."
  echo "Needed: CMake >= 3.20, a C++17 compiler, make or ninja, xtensor, xtl, xsimd, doctest,"
  echo "zlib, OpenBLAS, nlohmann-json, pkg-config, optionally Open MPI, and the Fashion-MNIST files (IDX, gzip) in"
  echo "/usr/share/datasets/fashion-mnist or a folder given to the example with --data-dir."
  echo "The test mode also needs clang-format (version 14) for its format check."
else
  packages=(cmake g++ libxtensor-dev xtl-dev libxsimd-dev doctest-dev zlib1g-dev libopenblas-dev
            nlohmann-json3-dev pkg-config dataset-fashion-mnist
            # MPI for data-parallel training (xgrad::distributed, mpirun): library and launcher.
            libopenmpi-dev openmpi-bin)
  # Thrust and CUB for the CUDA backend's OpenMP test build, when no CUDA toolkit brings them.
  if [[ $mode == test && ! -f /usr/local/cuda/include/cccl/thrust/version.h ]]; then
    packages+=(libthrust-dev libcub-dev)
  fi
  # The format check of the test mode, clang with its libFuzzer runtime for the fuzz stage, and
  # PyTorch for the interop test (a peer the test compares with, never a build dependency).
  if [[ $mode == test ]]; then
    packages+=(clang-format python3-torch)
    if [[ ${XGRAD_SKIP_FUZZ:-0} != 1 ]]; then
      packages+=(clang libclang-rt-14-dev)
    fi
  fi
  # A build tool: ninja-build if it is there, otherwise make.
  if is_installed ninja-build; then
    packages+=(ninja-build)
  else
    packages+=(make)
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

# ---- 2. Format check (test mode) -----------------------------------------------------------
# Before the long builds, so that a formatting slip fails in seconds.
if [[ $mode == test ]]; then
  step "Checking the C++ formatting: tools/check_format.sh"
  if ! tools/check_format.sh; then
    die "C++ files are not formatted (list above); run tools/check_format.sh --fix and commit the result"
  fi
fi

# ---- 3. Configure and build ----------------------------------------------------------------
configure_args=(-S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release)
if [[ $mode == example ]]; then
  configure_args+=(-DXGRAD_BUILD_EXAMPLES=ON)
else
  # The test builds treat warnings as errors, so that no warning slips in unnoticed.
  configure_args+=(-DXGRAD_BUILD_TESTS=ON -DXGRAD_WERROR=ON)
fi
# Ninja when available, but never switch the generator of an existing build directory.
if [[ ! -f "$build_dir/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
  configure_args+=(-G Ninja)
fi

step "Configuring: cmake ${configure_args[*]}"
cmake "${configure_args[@]}"

step "Building: cmake --build $build_dir -j$jobs"
cmake --build "$build_dir" -j"$jobs"

# ---- 4. Run --------------------------------------------------------------------------------
if [[ $mode == example ]]; then
  exe="$build_dir/examples/train_fashion_mnist"
  [[ -x "$exe" ]] || die "$exe was not built"
  step "Running: $exe $*"
  "$exe" "$@"
else
  step "Testing: ctest --test-dir $build_dir --output-on-failure -j$jobs $*"
  ctest --test-dir "$build_dir" --output-on-failure -j"$jobs" "$@"

  # The same tests again in a build with AddressSanitizer and UndefinedBehaviorSanitizer
  # (skipped with XGRAD_SKIP_SANITIZERS=1). The install test is left out there: it builds an
  # outside project that is not instrumented.
  if [[ ${XGRAD_SKIP_SANITIZERS:-0} != 1 ]]; then
    san_dir=${SANITIZE_BUILD_DIR:-$build_dir-sanitize}
    san_args=(-S . -B "$san_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXGRAD_SANITIZE=ON -DXGRAD_USE_CUDA=OFF
              -DXGRAD_CUDA_ON_CPU=ON -DXGRAD_BUILD_EXAMPLES=ON -DXGRAD_BUILD_TESTS=ON -DXGRAD_WERROR=ON)
    if [[ ! -f "$san_dir/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
      san_args+=(-G Ninja)
    fi
    step "Configuring the sanitizer build: cmake ${san_args[*]}"
    cmake "${san_args[@]}"
    step "Building: cmake --build $san_dir -j$jobs"
    cmake --build "$san_dir" -j"$jobs"
    # Among these are the CUDA backend's tests on Thrust's OpenMP system (label cuda_cpu).
    step "Testing under ASan+UBSan: ctest --test-dir $san_dir -LE install --output-on-failure -j$jobs $*"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --test-dir "$san_dir" -LE install --output-on-failure -j"$jobs" "$@"
  fi

  # The libFuzzer targets (tests/fuzz, docs/fuzzing.md), built with clang in a folder of their
  # own, each run for XGRAD_FUZZ_SECONDS from a copy of its seed corpus with a fixed seed.
  # A finding (crash, sanitizer report, unexpected exception, timeout, an allocation above
  # 64 MiB or more than 2 GiB resident) fails the command, and its input is kept in
  # $fuzz_dir/findings/<target>/ for tests/fuzz/regressions/<target>/. Skipped with
  # XGRAD_SKIP_FUZZ=1.
  if [[ ${XGRAD_SKIP_FUZZ:-0} != 1 ]]; then
    fuzz_dir=${FUZZ_BUILD_DIR:-build-fuzz}
    fuzz_seconds=${XGRAD_FUZZ_SECONDS:-60}
    fuzz_args=(-S . -B "$fuzz_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXGRAD_BUILD_FUZZ=ON -DXGRAD_BUILD_TESTS=OFF
               -DXGRAD_BUILD_EXAMPLES=OFF -DXGRAD_USE_CUDA=OFF -DXGRAD_USE_MPI=OFF -DXGRAD_SHARED=OFF -DXGRAD_WERROR=ON)
    if [[ ! -f "$fuzz_dir/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
      fuzz_args+=(-G Ninja)
    fi
    step "Configuring the fuzz build: CC=clang CXX=clang++ cmake ${fuzz_args[*]}"
    CC=clang CXX=clang++ cmake "${fuzz_args[@]}"
    step "Building: cmake --build $fuzz_dir -j$jobs"
    cmake --build "$fuzz_dir" -j"$jobs"
    fuzz_failed=()
    for src in tests/fuzz/fuzz_*.cpp; do
      name=$(basename "$src" .cpp)
      name=${name#fuzz_}
      exe="$fuzz_dir/tests/fuzz/fuzz_$name"
      [[ -x "$exe" ]] || die "$exe was not built"
      # A copy of the seeds: libFuzzer adds the inputs it finds to its corpus folder.
      work="$fuzz_dir/fuzz-run/$name"
      rm -rf "$work"
      mkdir -p "$work/corpus" "$fuzz_dir/findings/$name"
      cp tests/fuzz/corpus/"$name"/* "$work/corpus/"
      step "Fuzzing $name for ${fuzz_seconds} s: $exe"
      if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
           "$exe" -seed=1 -max_total_time="$fuzz_seconds" -timeout=25 -rss_limit_mb=2048 -malloc_limit_mb=64 \
                  -max_len=8192 -print_final_stats=1 -artifact_prefix="$fuzz_dir/findings/$name/" \
                  "$work/corpus" >"$work/log" 2>&1; then
        tail -n 60 "$work/log"
        fuzz_failed+=("$name")
      else
        grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+.*DONE)' "$work/log" || true
      fi
    done
    if [[ ${#fuzz_failed[@]} -gt 0 ]]; then
      die "fuzz findings in: ${fuzz_failed[*]} (inputs in $fuzz_dir/findings/; docs/fuzzing.md says how to make them regression tests)"
    fi
  fi
fi
