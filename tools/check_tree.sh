#!/usr/bin/env bash
# The tree's own rules, checked in seconds (tools/bootstrap.sh test runs this before it builds):
#
#   floors     every #include points at the file's own floor or one below it, in the order
#              base -> backends -> core -> nn -> train -> {examples, bench}; a floor's internal
#              headers (<floor>/src/..., backends/...) are included only from that floor. tests/
#              and bench/ test and time the internals and may include them.
#   side doors the kernel table (backend_for, kernel_table) is reached only by backends/,
#              core/src/, tests/ and bench/; no container of nn/ inspects its children's classes
#              (no dynamic_cast in module.cpp or sequential.cpp).
#   paths      a path of the tree named in a comment of a C++, CMake or script file
#              (core/src/ops/conv.cpp, tests/nn/...) names a file that exists: moved files leave
#              no stale pointers behind. (The Markdown files' paths are checked by test_docs.)
#   sizes      no tracked C++ file over 600 lines, no function over 150 lines (the body from its
#              opening to its closing brace; the code is clang-formatted, so a function's braces
#              stand alone on their lines at the indentation of its signature).
#
# usage: tools/check_tree.sh [--list-functions N]   (the second form lists functions over N lines)
# Prints every breach, one per line, "<file>:<line>: <rule>: <what>", and exits 1 if there is any.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"

max_file_lines=600
max_function_lines=150
list_functions=""
case "${1:-}" in
  "") ;;
  --list-functions) list_functions=${2:?--list-functions needs a line count} ;;
  -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
  *) echo "usage: tools/check_tree.sh [--list-functions N]" >&2; exit 2 ;;
esac

mapfile -t cpp_files < <(git ls-files -- '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh' | grep -v '^tests/fuzz/corpus/')

# ---- floors ---------------------------------------------------------------------------------
# The floor of a path in the tree: its rank, or "" for folders outside the floors (tests, docs).
floor_of() {
  case "$1" in
    base/*) echo 0 ;;
    backends/*) echo 1 ;;
    core/*) echo 2 ;;
    nn/*) echo 3 ;;
    train/*) echo 4 ;;
    examples/*|bench/*) echo 5 ;;
    *) echo "" ;;
  esac
}
floor_names=(base backends core nn train "examples/bench")

# The floor that provides public header xgrad/<h>: the floor whose include/ folder holds it; the
# generated umbrellas belong to the floor of the folder they cover.
header_floor() {
  local h=$1 f
  for f in base core nn train; do
    if [[ -f $f/include/$h ]]; then
      floor_of "$f/"
      return
    fi
  done
  case "$h" in
    xgrad/xgrad.hpp) floor_of core/ ;;
    xgrad/nn.hpp) floor_of nn/ ;;
    xgrad/optim.hpp|xgrad/data.hpp|xgrad/io.hpp|xgrad/train.hpp|xgrad/distributed.hpp) floor_of train/ ;;
    *) echo "" ;;
  esac
}

breaches=0
breach() {
  printf '%s\n' "$1"
  breaches=$((breaches + 1))
}

for f in "${cpp_files[@]}"; do
  mine=$(floor_of "$f")
  white_box=0
  [[ $f == tests/* || $f == bench/* ]] && white_box=1
  while IFS=: read -r line inc; do
    target=$inc
    case "$inc" in
      xgrad/*)
        [[ -z $mine ]] && continue
        theirs=$(header_floor "$inc")
        if [[ -z $theirs ]]; then
          breach "$f:$line: floors: \"$inc\" is no public header of any floor"
        elif ((theirs > mine)); then
          breach "$f:$line: floors: ${floor_names[$mine]} includes \"$inc\" of the ${floor_names[$theirs]} floor above it"
        elif [[ $mine == 1 && $theirs != 0 ]]; then
          breach "$f:$line: floors: the backends include base's headers only, not \"$inc\""
        fi
        continue
        ;;
      base/*|backends/*|core/*|nn/*|train/*|examples/*|bench/*|tests/*) ;;
      *)
        # Relative to the including file: it must stay inside the file's own floor.
        target=$(realpath -m --relative-to=. "$(dirname "$f")/$inc")
        ;;
    esac
    [[ -f $target ]] || continue # a system header spelled with quotes, or a generated file
    theirs=$(floor_of "$target")
    [[ -z $theirs ]] && continue
    internal=0
    [[ $target == */src/* || $target == backends/* ]] && internal=1
    if ((white_box)); then
      continue
    elif [[ -n $mine && $theirs -gt $mine ]]; then
      breach "$f:$line: floors: ${floor_names[$mine]} includes $target of the ${floor_names[$theirs]} floor above it"
    elif ((internal)) && [[ $theirs != "$mine" ]] && ! [[ $mine == 2 && $target == backends/* ]]; then
      breach "$f:$line: floors: $target is internal to ${floor_names[$theirs]} (include its public headers)"
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | sed -E 's/^([0-9]+):[^"]*"([^"]*)".*/\1:\2/')
done

# ---- side doors -----------------------------------------------------------------------------
while IFS=: read -r f line _; do
  case "$f" in
    backends/*|core/src/*|tests/*|bench/*) ;;
    *) breach "$f:$line: side doors: reaches the kernel table (backend_for / kernel_table); call an op instead" ;;
  esac
done < <(git grep -n -w -e backend_for -e kernel_table -- '*.cpp' '*.hpp' '*.cu' || true)
while IFS=: read -r f line _; do
  breach "$f:$line: side doors: a container inspects its children's classes (dynamic_cast); give it what to run instead"
done < <(git grep -n 'dynamic_cast' -- nn/src/module.cpp nn/src/sequential.cpp nn/include/xgrad/nn/module.hpp \
           nn/include/xgrad/nn/sequential.hpp || true)

# ---- paths ----------------------------------------------------------------------------------
# A path starts at a top-level folder of the tree, not inside another path or an include's
# quotes, and ends in a file name with an extension. tests/docs/ plants missing paths on purpose.
top_folders='base|backends|core|nn|train|examples|bench|tests|tools|docs|cmake|layers'
while IFS=: read -r f line p; do
  [[ -e $p ]] || breach "$f:$line: paths: names $p, which does not exist"
done < <(git ls-files -- '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh' '*.cmake' '*.in' 'CMakeLists.txt' '*/CMakeLists.txt' \
           '*.sh' '*.py' '.ci/*' | grep -v -e '^tests/fuzz/corpus/' -e '^tests/docs/' |
         xargs grep -noP "(?<![A-Za-z0-9_/.<\"-])($top_folders)/[A-Za-z0-9_./-]*[A-Za-z0-9_]\.(cpp|hpp|h|cu|cuh|md|sh|py|cmake|txt|json|in)\b" || true)

# ---- sizes ----------------------------------------------------------------------------------
for f in "${cpp_files[@]}"; do
  n=$(wc -l < "$f")
  ((n > max_file_lines)) && breach "$f:1: sizes: $n lines, over the $max_file_lines a file may have (split it by concern)"
done

# Functions: a line holding only "{" whose statement head (the nearest line above at the same
# indentation) is not a control statement, a lambda's or a type's, up to the "}" at that
# indentation.
function_limit=${list_functions:-$max_function_lines}
function_report=$(awk -v limit="$function_limit" '
  # (POSIX awk: each file is reported when the next one starts, the last one at the end.)
  FNR == 1 && NR > 1 { report(file) }
  FNR == 1 { n = 0; file = FILENAME }
  { text[++n] = $0 }
  function indent(s) { match(s, /^ */); return RLENGTH }
  function report(file,    i, j, k, head, ind, found) {
    for (i = 1; i <= n; ++i) {
      if (text[i] !~ /^ *\{ *$/) continue
      ind = indent(text[i])
      head = ""
      for (k = i - 1; k >= 1; --k) {
        if (text[k] ~ /^ *$/ || text[k] ~ /^ *\/\//) continue
        if (indent(text[k]) == ind) { head = text[k]; break }
        if (indent(text[k]) < ind) break
      }
      if (head == "") continue
      if (head ~ /^ *(if|else|for|while|switch|do|try|catch|case|default|namespace|class|struct|union|enum|extern|template|return|#)[ (:{]?/) continue
      if (head ~ /=$/ || head ~ /^ *(const |static |inline |constexpr )*(auto|[A-Za-z_:<>, ]+) [A-Za-z_]+ =/) continue
      if (head !~ /\(/) continue
      found = 0
      for (j = i + 1; j <= n; ++j)
        if (text[j] ~ /^ *\} *;? *$/ && indent(text[j]) == ind) { found = 1; break }
      if (found && j - i + 1 > limit)
        printf "%s:%d: sizes: function of %d lines, over %d (split it by concern): %s\n", file, k, j - i + 1, limit, head
    }
  }
  END { if (NR > 0) report(file) }
' "${cpp_files[@]}")
if [[ -n $function_report ]]; then
  if [[ -n $list_functions ]]; then
    printf '%s\n' "$function_report"
    exit 0
  fi
  while IFS= read -r l; do breach "$l"; done <<< "$function_report"
elif [[ -n $list_functions ]]; then
  exit 0
fi

if ((breaches)); then
  echo "check_tree: $breaches breach(es) of the tree's rules (above; tools/check_tree.sh explains each rule)" >&2
  exit 1
fi
echo "check_tree: ${#cpp_files[@]} C++ files keep the floors, reach no side door, name no missing path, and keep the sizes"
