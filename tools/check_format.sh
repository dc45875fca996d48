#!/usr/bin/env bash
# Checks that every tracked C++ file (*.cpp, *.hpp, *.h, *.cu, *.cuh) is formatted as .clang-format
# says, without changing anything: lists the files that are not and exits with status 1.
#
#   tools/check_format.sh          check (exit 0: all formatted; 1: some are not; 2: usage or setup error)
#   tools/check_format.sh --fix    format those files in place
#
# Needs clang-format (Debian package clang-format); the style is tuned for version 14, and other
# versions may format a few constructs differently, so a different major version is reported.
# Environment: CLANG_FORMAT=<program> (default: clang-format). Works from any directory.
# `// clang-format off` / `// clang-format on` regions are left as they are.
set -euo pipefail

usage() {
  cat <<'EOF_USAGE'
usage: tools/check_format.sh [--fix]
  (no argument)  list the tracked C++ files that are not formatted; exit 1 if there are any
  --fix          format them in place
Environment: CLANG_FORMAT=<program> (default: clang-format)
EOF_USAGE
}

fix=0
case "${1:-}" in
  "") ;;
  --fix) fix=1 ;;
  -h|--help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac
if [[ $# -gt 1 ]]; then
  usage >&2
  exit 2
fi

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"

clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null 2>&1; then
  echo "check_format: '$clang_format' not found; install it (Debian: apt-get install clang-format)" \
       "or set CLANG_FORMAT" >&2
  exit 2
fi
[[ -f .clang-format ]] || { echo "check_format: no .clang-format in $repo_root" >&2; exit 2; }
version=$("$clang_format" --version)
if [[ ! $version =~ version\ 14\. ]]; then
  echo "check_format: note: the style is tuned for clang-format 14; this is: $version" >&2
fi

# The files: what git tracks, or, outside a git checkout, every C++ file but build trees.
files=()
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  while IFS= read -r -d '' f; do
    # A tracked file deleted in the working tree has nothing to check.
    [[ -f $f ]] && files+=("$f")
  done < <(git ls-files -z -- '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
else
  while IFS= read -r -d '' f; do
    files+=("${f#./}")
  done < <(find . \( -path './build*' -o -path './.git' \) -prune -o -type f \
                \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z)
fi
if [[ ${#files[@]} -eq 0 ]]; then
  echo "check_format: no C++ files found"
  exit 0
fi

# One clang-format call per file, so that each unformatted file is named once (the warnings
# themselves, one per changed spot, would be thousands of lines on a badly formatted tree).
bad=()
for f in "${files[@]}"; do
  if ! "$clang_format" --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then
    bad+=("$f")
  fi
done

if [[ ${#bad[@]} -eq 0 ]]; then
  echo "check_format: all ${#files[@]} C++ files are formatted"
  exit 0
fi
if [[ $fix -eq 1 ]]; then
  "$clang_format" --style=file -i "${bad[@]}"
  printf 'check_format: formatted %d of %d C++ files:\n' "${#bad[@]}" "${#files[@]}"
  printf '  %s\n' "${bad[@]}"
  exit 0
fi
printf 'check_format: %d of %d C++ files are not formatted:\n' "${#bad[@]}" "${#files[@]}" >&2
printf '  %s\n' "${bad[@]}" >&2
echo "Run tools/check_format.sh --fix to format them (\`$clang_format --style=file --dry-run <file>\` shows the changes)." >&2
exit 1
