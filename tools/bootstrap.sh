#!/usr/bin/env bash
# The script behind README's Quick start:
#
#   tools/bootstrap.sh example [ARGS]  install missing Debian packages (and the Fashion-MNIST
#                                      data), build, train examples/train_fashion_mnist [ARGS]
#   tools/bootstrap.sh test [ARGS...]  install missing Debian packages, check the C++ formatting
#                                      (tools/check_format.sh), build with warnings as errors,
#                                      run ctest, then build again with ASan+UBSan and run the
#                                      tests there too (ARGS go to ctest, e.g. `-L gradcheck`)
#
# The CUDA backend: where nvcc is installed, the first build compiles it for the GPU (its
# `cuda` tests skip when no GPU is present). The sanitizer build compiles the same backend
# sources with g++ on Thrust's OpenMP system (XGRAD_CUDA_ON_CPU) and runs them as cuda:0, so
# its `cuda_cpu` tests check the backend on every machine. Thrust comes from the CUDA toolkit,
# or from Debian's libthrust-dev/libcub-dev where there is no toolkit.
#
# Environment: BUILD_DIR (default: build, relative to the repository root);
# SANITIZE_BUILD_DIR (default: $BUILD_DIR-sanitize); XGRAD_SKIP_SANITIZERS=1 skips that stage.
# Works from any directory; everything happens in the repository root.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: tools/bootstrap.sh example [ARGS...]   build, then train build/examples/train_fashion_mnist [ARGS...]
       tools/bootstrap.sh test [ARGS...]      check the formatting, build (warnings as errors), then run
                                              ctest [ARGS...] (e.g. -L gradcheck), also under ASan+UBSan

Installs missing Debian packages first (as root; otherwise prints the apt-get line to run).
Environment: BUILD_DIR=<dir> (default: build)
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
  echo "zlib, OpenBLAS, nlohmann-json and pkg-config, and the Fashion-MNIST files (IDX, gzip) in"
  echo "/usr/share/datasets/fashion-mnist or a folder given to the example with --data-dir."
  echo "The test mode also needs clang-format (version 14) for its format check."
else
  packages=(cmake g++ libxtensor-dev xtl-dev libxsimd-dev doctest-dev zlib1g-dev libopenblas-dev
            nlohmann-json3-dev pkg-config dataset-fashion-mnist)
  # Thrust and CUB for the CUDA backend's OpenMP test build, when no CUDA toolkit brings them.
  if [[ $mode == test && ! -f /usr/local/cuda/include/cccl/thrust/version.h ]]; then
    packages+=(libthrust-dev libcub-dev)
  fi
  # The format check of the test mode.
  if [[ $mode == test ]]; then
    packages+=(clang-format)
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
fi
