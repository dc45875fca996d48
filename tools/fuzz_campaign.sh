#!/usr/bin/env bash
# Longer fuzzing campaigns with the libFuzzer targets of tests/fuzz (docs/fuzzing.md), beyond
# the minute per target that `tools/bootstrap.sh test` gives them.
#
#   tools/fuzz_campaign.sh [--minutes M] [--jobs J] [--dir DIR] [--no-build] [TARGET...]
#
#   TARGET      batch_norm, shape, conv_pool, safetensors, idx (default: all, one after another)
#   --minutes   minutes per target (default 10)
#   --jobs      fuzzing processes per target (libFuzzer -fork; default: the number of cores)
#   --dir       where the campaign keeps its state (default: ${XDG_CACHE_HOME:-~/.cache}/xgrad-fuzz):
#                 DIR/corpus/<target>/   the persistent corpus, seeded from tests/fuzz/corpus and
#                                        grown by every campaign (never inside the repository)
#                 DIR/crashes/<target>/  inputs of the findings (crash-*, leak-*, timeout-*,
#                                        oom-*), with the log in DIR/logs/<target>.log
#   --no-build  use the existing build folder as it is
#
# Environment: FUZZ_BUILD_DIR (default: build-fuzz, relative to the repository root), a build of
# the library and the fuzz targets alone, with clang and XGRAD_BUILD_FUZZ=ON (tools/bootstrap.sh
# test builds the same targets with the tests, in its sanitizer build). Findings do not stop a
# campaign (-ignore_crashes etc.): it goes on and collects them all; the exit status is 1 when
# any target has a new finding. Works from any directory.
set -euo pipefail

die() { printf 'fuzz_campaign: error: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '5,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"
all_targets=()
for src in tests/fuzz/fuzz_*.cpp; do
  name=$(basename "$src" .cpp)
  all_targets+=("${name#fuzz_}")
done

minutes=10
jobs=$(nproc 2>/dev/null || echo 2)
state_dir=${XDG_CACHE_HOME:-$HOME/.cache}/xgrad-fuzz
build=1
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --minutes) minutes=${2:?--minutes needs a value}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a value}; shift 2 ;;
    --dir) state_dir=${2:?--dir needs a value}; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; die "unknown option '$1'" ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ $minutes =~ ^[0-9]+$ && $minutes -ge 1 ]] || die "--minutes must be a whole number >= 1, got '$minutes'"
[[ $jobs =~ ^[0-9]+$ && $jobs -ge 1 ]] || die "--jobs must be a whole number >= 1, got '$jobs'"
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=("${all_targets[@]}")
fi
for t in "${targets[@]}"; do
  [[ -f tests/fuzz/fuzz_$t.cpp ]] || die "unknown target '$t' (targets: ${all_targets[*]})"
done
case "$state_dir" in
  "$repo_root"|"$repo_root"/*) die "--dir must be outside the repository (its corpus stays as committed)" ;;
esac

fuzz_dir=${FUZZ_BUILD_DIR:-build-fuzz}
if [[ $build == 1 ]]; then
  command -v clang++ >/dev/null 2>&1 || die "clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)"
  args=(-S . -B "$fuzz_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXGRAD_BUILD_FUZZ=ON -DXGRAD_BUILD_TESTS=OFF
        -DXGRAD_BUILD_EXAMPLES=OFF -DXGRAD_USE_CUDA=OFF -DXGRAD_SHARED=OFF)
  if [[ ! -f "$fuzz_dir/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
    args+=(-G Ninja)
  fi
  CC=clang CXX=clang++ cmake "${args[@]}" >/dev/null
  cmake --build "$fuzz_dir" -j"$jobs"
fi

status=0
for t in "${targets[@]}"; do
  exe="$fuzz_dir/tests/fuzz/fuzz_$t"
  [[ -x "$exe" ]] || die "$exe was not built"
  corpus="$state_dir/corpus/$t"
  crashes="$state_dir/crashes/$t"
  mkdir -p "$corpus" "$crashes" "$state_dir/logs"
  cp -n tests/fuzz/corpus/"$t"/* "$corpus/" 2>/dev/null || true
  marker="$state_dir/logs/.$t.start"
  touch "$marker"
  log="$state_dir/logs/$t.log"
  printf '==> %s: %s min, %s jobs, corpus %s (%s inputs)\n' "$t" "$minutes" "$jobs" "$corpus" \
    "$(find "$corpus" -type f | wc -l)"
  # -fork: J worker processes, restarted after each finding; the regressions are read as
  # extra seeds (the second folder is only read: new inputs go to the first).
  seeds=()
  [[ -d tests/fuzz/regressions/$t ]] && seeds+=("tests/fuzz/regressions/$t")
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$exe" -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
           -max_total_time=$((minutes * 60)) -timeout=25 -rss_limit_mb=2048 -malloc_limit_mb=64 -max_len=8192 \
           -artifact_prefix="$crashes/" "$corpus" "${seeds[@]}" >"$log" 2>&1 || true
  mapfile -t found < <(find "$crashes" -type f -newer "$marker" | sort)
  printf '    %s new finding input(s) in %s (log: %s)\n' "${#found[@]}" "$crashes" "$log"
  # The workers' reports are not in the log (fork mode): replay each new input (200 at most)
  # and count the distinct first report lines, numbers elided.
  for f in "${found[@]:0:200}"; do
    ASAN_OPTIONS=detect_leaks=1 timeout 60 "$exe" -rss_limit_mb=2048 -malloc_limit_mb=64 -timeout=25 "$f" 2>&1 |
      grep -m1 -E 'runtime error|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|fuzz finding in' |
      sed -E 's/==[0-9]+==//; s/0x[0-9a-f]+/0x.../g; s/-?[0-9]{3,}/N/g' || true
  done | sort | uniq -c | sort -rn | head -20
  [[ ${#found[@]} -gt 0 ]] && status=1
done
exit $status
