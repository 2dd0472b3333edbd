#!/usr/bin/env bash
# The test command: installs redis-server and PostgreSQL when they are
# missing (the tests start real servers), then vets and runs every test with
# the race detector (about 3½ minutes on 2 cores with a warm build cache:
# 3m25s and 3m31s; the first run also builds everything with -race).
#
#   ./test.sh          every package, the Clients on go-redis; the long runs
#                      shorter or skipped (they say so: ./test.sh --full)
#   ./test.sh --full   that with the long runs (DLOCK_TEST_FULL=1), then the
#                      behaviour suite and the torture test again on rueidis
#                      and on valkey-go, and the benchmark module's build and
#                      vet (about 13 minutes: 11m48s, 11m44s, and 13m10s with the live page's and deadlock tests; what CI runs)
set -euo pipefail
cd "$(dirname "$0")"

full=false
for arg in "$@"; do
  case "$arg" in
    --full) full=true ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument $arg (want --full)" >&2; exit 2 ;;
  esac
done

# What is missing: redis-server; PostgreSQL's initdb (on PATH, or where
# Debian puts it: internal/pgtest looks in both).
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
# As root, the packet-loss tests (internal/redistest, netns.go) need
# iptables; elsewhere they are skipped.
if [ "$(id -u)" -eq 0 ] && ! command -v iptables >/dev/null 2>&1; then
  missing+=(iptables)
fi
# dlock top's terminal test (cmd/dlock) runs it in a tmux pane.
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
# The live page's tests (web) drive it in headless Chromium.
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  echo "test.sh: ${missing[*]} not found; installing with apt-get" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  # the postgresql package starts a cluster of its own; the tests start theirs
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --full: the long runs too (internal/redistest.Full and Long): soaks,
# failover sequences and races repeated over more rounds, which the
# default run shortens or skips, saying so.
if $full; then export DLOCK_TEST_FULL=1; fi

# Four modules, one workspace (go.work): the library (.), the dlock
# command (cmd/dlock), PostgreSQL fencing (fence/pgfence) and the live
# page and metrics handler (web). The library
# must also build from its own go.mod alone, as a service importing it does.
# The tests mostly wait on servers (about one core busy on average), so
# vet runs beside them, and the default run has four test binaries at once
# (-p 4); --full keeps Go's default (one a core), sparing its long runs'
# timing the extra load.
# The page's tests (web, about 20 s) run after the others, alone: their
# headless Chromium's bursts of CPU would add to the load on the library's
# timing tests running beside them (a max hold's end, renewal counts).
mods=(./... ./cmd/dlock/... ./fence/pgfence/...)
par=(-p 4)
if $full; then par=(); fi
GOWORK=off go build ./...
go vet "${mods[@]}" ./web/... &
vet=$!
go test -race -count=1 "${par[@]}" -timeout 15m "${mods[@]}"
go test -race -count=1 -timeout 5m ./web/...
wait "$vet"
$full || exit 0

# The behaviour suite and the torture test again on each other client's
# driver: their Clients reach Redis through rueidis, then valkey-go
# (internal/envdriver).
for driver in rueidis valkey-go; do
  DLOCK_TEST_DRIVER=$driver go test -race -count=1 -timeout 15m . ./internal/torture
done

# The benchmarks live in their own module; make sure they build and vet.
[ ! -f bench/go.mod ] || (cd bench && go vet ./... && go test -race -count=1 -run '^$' ./...)
