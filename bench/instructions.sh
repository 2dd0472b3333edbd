#!/usr/bin/env bash
# instructions.sh: what one uncontended Lock+Unlock costs the redis-server,
# counted in instructions (deterministic, where this VM's timings move by
# a third): for each BenchmarkServerWork case, a redis-server run under
# valgrind's callgrind is fed 2 000 and then 4 000 pairs through
# redis-cli --pipe (TestServerWorkFeed writes them); the difference of
# the two runs' totals ÷ 2 000 is one pair's instructions.
#
#   ./instructions.sh
#
# Needs valgrind, redis-server and redis-cli.
set -euo pipefail
cd "$(dirname "$0")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go test -count=1 -run '^TestServerWorkFeed$' . -args -serverwork.feed "$work" \
  -serverwork.redislock "$(go list -m -f '{{.Dir}}' github.com/bsm/redislock)/redislock.go" >/dev/null
# total FILE: the instructions of a redis-server that is fed FILE.
total() {
  local port=$((20000 + RANDOM % 20000)) out="$work/cg.out"
  valgrind --tool=callgrind --callgrind-out-file="$out" \
    redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  redis-cli -p "$port" --pipe <"$1" >"$work/pipe" 2>&1
  grep -q 'errors: 0' "$work/pipe" || { echo "instructions.sh: $1: error replies:" >&2; cat "$work/pipe" >&2; exit 1; }
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" || true
  awk '/^(summary|totals):/ { print $2; exit }' "$out"
}
for c in ${CASES:-dlock-scripts one-string redislock functions}; do
  a=$(total "$work/$c-2000.resp")
  b=$(total "$work/$c-4000.resp")
  printf '%-14s %8d instructions per Lock+Unlock\n' "$c" $(((b - a) / 2000))
done
