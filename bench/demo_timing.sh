#!/usr/bin/env bash
# `vecbridge demo` wall time, the code at REV (a git revision) against this checkout, alternated, RUNS runs each.
#   bash bench/demo_timing.sh REV [RUNS]
set -eu
REV=${1:?usage: demo_timing.sh REV [RUNS]}
RUNS=${2:-3}
HERE=$(cd "$(dirname "$0")/.." && pwd)
OLD=$(mktemp -d)
git -C "$HERE" worktree add -f -q "$OLD" "$REV"
trap 'git -C "$HERE" worktree remove --force "$OLD"' EXIT
for i in $(seq "$RUNS"); do
  for which in before after; do
    if [ "$which" = before ]; then src=$OLD; else src=$HERE; fi
    work=$(mktemp -d)
    start=$(date +%s.%N)
    (cd "$work" && PYTHONPATH="$src" OPENBLAS_NUM_THREADS=1 \
       python -c "from vecbridge.cli import main; main(prog_name='vecbridge')" demo >/dev/null 2>&1)
    end=$(date +%s.%N)
    echo "$which run $i: $(echo "$end - $start" | bc) s"
    rm -rf "$work"
  done
done
