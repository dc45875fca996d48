#!/usr/bin/env bash
# expect_abort.sh MPIEXEC PROGRAM MODE PATTERN...: runs PROGRAM MODE on 2 ranks and passes when
# the job fails (not by the timeout) within 60 s and its output holds every PATTERN.
set -u
mpiexec=$1 program=$2 mode=$3
shift 3
out=$(timeout 60 "$mpiexec" -n 2 --oversubscribe "$program" "$mode" 2>&1)
rc=$?
printf '%s\n' "$out"
if [[ $rc -eq 0 ]]; then
  echo "expect_abort: the job succeeded; it should have stopped with an error" >&2
  exit 1
fi
if [[ $rc -eq 124 || $rc -eq 137 ]]; then
  echo "expect_abort: the job hung (killed after 60 s)" >&2
  exit 1
fi
for pattern in "$@"; do
  if ! grep -qF -- "$pattern" <<<"$out"; then
    echo "expect_abort: the output lacks '$pattern'" >&2
    exit 1
  fi
done
echo "expect_abort: the job stopped with exit status $rc and the expected message"
