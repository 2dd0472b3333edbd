#!/usr/bin/env bash
# abtest.sh: the cost of a change on one benchmark, measured A/B. It builds
# this directory's benchmarks twice — against the library at OLD (a commit)
# and at NEW (a commit; the working tree if not given) — and runs them
# alternately, ROUNDS times
# each, so that a noisy moment on the machine hits both alike; then prints
# each side's median ns/op and their ratio.
#
#   ./abtest.sh OLD [ROUNDS] [BENCH] [NEW]
#   ./abtest.sh d7f4471 15 'Uncontended/g1/dlock$'    # the telemetry's overhead
#
# Needs redis-server (the benchmarks start their own). Prints the raw lines
# too.
set -euo pipefail
cd "$(dirname "$0")"
old=${1:?usage: ./abtest.sh OLD [ROUNDS] [BENCH]}
rounds=${2:-15}
bench=${3:-'Uncontended/g1/dlock$'}
work=$(mktemp -d)
trap 'git worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/old" "$old"
# The old tree's bench module may predate this script's dependencies: build
# it as it was, with its own go.mod.
(cd "$work/old/bench" && go test -c -o "$work/a.test" . )
if [ -n "${4:-}" ]; then
  git worktree add -q --detach "$work/new" "$4"
  (cd "$work/new/bench" && go test -c -o "$work/b.test" .)
  git worktree remove --force "$work/new"
else
  go test -c -o "$work/b.test" .
fi
run() { "$1" -test.run '^$' -test.bench "$bench" -test.benchtime 500ms -test.count 1 2>/dev/null | awk '/ns\/op/ {print $3}'; }
: >"$work/a" ; : >"$work/b"
for i in $(seq "$rounds"); do
  a=$(run "$work/a.test"); b=$(run "$work/b.test")
  echo "round $i: old $a ns/op, new $b ns/op"
  echo "$a" >>"$work/a"; echo "$b" >>"$work/b"
done
median() { sort -n "$1" | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
ma=$(median "$work/a"); mb=$(median "$work/b")
echo "median: old ($old) $ma ns/op, new $mb ns/op, new/old $(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.3f", b/a}')"
