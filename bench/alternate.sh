#!/usr/bin/env bash
# alternate.sh: implementations side by side on one benchmark, on a noisy
# machine. It runs the matching benchmarks ROUNDS times in turn (every
# implementation once per round, so a slow moment hits them alike) and
# prints, per benchmark, the median over the rounds of ns/op and of every
# metric it reports.
#
#   ./alternate.sh [ROUNDS] [BENCH]
#   ./alternate.sh 15 'Uncontended/g1/(dlock|redislock)$'
#
# Needs redis-server (the benchmarks start their own).
set -euo pipefail
cd "$(dirname "$0")"
rounds=${1:-15}
bench=${2:-'Uncontended/g1/(dlock|redislock)$'}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go test -c -o "$work/b.test" .
for i in $(seq "$rounds"); do
  "$work/b.test" -test.run '^$' -test.bench "$bench" -test.benchtime 300ms 2>/dev/null |
    grep '^Benchmark' >>"$work/lines" || true
  echo "round $i done" >&2
done
# Each line: name N value unit value unit ...; median per (name, unit).
awk '{ for (i = 3; i < NF; i += 2) print $1, $(i+1), $i }' "$work/lines" |
  sort -k1,1 -k2,2 -k3,3g |
  awk '{ k = $1 " " $2; v[k, ++n[k]] = $3; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
       END { for (j = 1; j <= m; j++) { k = order[j]; c = n[k]
             med = (c % 2) ? v[k, (c+1)/2] : (v[k, c/2] + v[k, c/2+1]) / 2
             printf "%-50s %14.0f %s (median of %d)\n", substr(k, 1, index(k, " ")-1), med, substr(k, index(k, " ")+1), c } }'
