package bench

import (
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	oneClientFlag   = flag.Bool("oneclient", false, "TestOneClientReport: run BenchmarkOneClient's cases in interleaved rounds and print a markdown table")
	oneClientRounds = flag.Int("oneclient.rounds", 3, "TestOneClientReport: rounds over all cases")
	oneClientOnly   = flag.String("oneclient.only", "", "TestOneClientReport: run only the cases whose full name (BenchmarkOneClient/gN/locker) matches this regexp")
)

// TestOneClientReport runs every case of BenchmarkOneClient once per
// round, all cases in turn (the lockers of each parallelism in an order
// rotated each round), and prints one markdown table per parallelism:
// medians over the rounds, every round's ops/s, and ratios. Run it with
//
//	go test -run '^TestOneClientReport$' -oneclient -benchtime 2s -timeout 30m .
func TestOneClientReport(t *testing.T) {
	if !*oneClientFlag {
		t.Skip("run with -oneclient to measure and print the table")
	}
	cases, err := selectCases(oneClientCases(), *oneClientOnly)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	runs, failed := runRounds(cases, *oneClientRounds)
	for k, msgs := range failed {
		t.Errorf("%s/%s/%s: FAILED: %s", k.bench, k.variant, k.impl, strings.Join(msgs, "; "))
	}
	rep := &report{cases: cases, runs: runs, failed: failed}
	took := time.Since(start)

	fmt.Printf("%s, GOMAXPROCS=%d (%d CPUs), redis-server %s on loopback; %d round(s), -benchtime %s per case and round, %s in all. "+
		"Figures are medians over the rounds; ratios are of median ops/s.\n\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), redisVersion(),
		*oneClientRounds, benchtimeFlag(), took.Round(time.Second))
	var gs []string
	for _, c := range cases {
		if !slices.Contains(gs, c.variant) {
			gs = append(gs, c.variant)
		}
	}
	for _, g := range gs {
		med := func(impl, unit string) (float64, bool) { return rep.metric("OneClient", g, impl, unit) }
		bestName, best := "", 0.0
		for _, lk := range lockers {
			if v, ok := med(lk.name, "ops/s"); ok && lk.anchor && v > best {
				bestName, best = lk.name, v
			}
		}
		ratio := func(v float64, to string) string {
			d, ok := med(to, "ops/s")
			if !ok || d == 0 {
				return "–"
			}
			return fmt.Sprintf("%.2f×", v/d)
		}
		clients := "one shared client"
		if *oneClientPerGoroutine {
			clients = "a client per goroutine"
		}
		fmt.Printf("#### %s goroutine(s), %s, a key each\n\n", strings.TrimPrefix(g, "g"), clients)
		fmt.Printf("| locker | ops/s | ops/s per round | ÷ best anchor (%s) | ÷ redislock | ÷ rueidislock | allocs/op | client µs/op | server µs/op | stalls | others' cores |\n", bestName)
		fmt.Printf("|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, lk := range lockers {
			rs := runs[caseKey{"OneClient", g, lk.name}]
			if len(rs) == 0 {
				continue
			}
			ops, _ := med(lk.name, "ops/s")
			var per []string
			for _, r := range rs {
				per = append(per, fmt.Sprintf("%.0f", r.Extra["ops/s"]))
			}
			stalls, _ := med(lk.name, "stalls") // summed over the rounds
			allocs, _ := med(lk.name, "allocs/op")
			cli, _ := med(lk.name, "client-us/op")
			srv, _ := med(lk.name, "server-us/op")
			oth, _ := med(lk.name, "others-cores")
			bestRatio := "–"
			if best > 0 {
				bestRatio = fmt.Sprintf("%.2f×", ops/best)
			}
			fmt.Printf("| %s | %.0f | %s | %s | %s | %s | %.0f | %.1f | %.1f | %.0f | %.2f |\n",
				lk.name, ops, strings.Join(per, " "), bestRatio, ratio(ops, "redislock"), ratio(ops, "rueidislock"),
				allocs, cli, srv, stalls, oth)
		}
		fmt.Println()
	}
}
