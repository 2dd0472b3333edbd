package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	reportFlag   = flag.Bool("report", false, "TestReport: run every benchmark and print markdown tables, ratios and verdicts")
	reportRounds = flag.Int("report.rounds", 5, "TestReport: rounds over all cases; each figure is the median of the rounds")
	reportOnly   = flag.String("report.only", "", "TestReport: run only the cases whose full name (BenchmarkX/variant/impl) matches this regexp")
)

// TestReport runs every benchmark case (each round runs all of them once,
// interleaved, so that a noisy moment hits every implementation alike) and
// prints markdown: one table per configuration, with ratios to the
// anchors, and a verdict per target. It runs only with -report:
//
//	go test -run '^TestReport$' -report -timeout 20m
//
// -benchtime sets the time per case and round, as for go test -bench;
// -report.only selects cases by a regexp on their names. Tables and
// ratios show what was run ("not run" or "–" for the rest).
func TestReport(t *testing.T) {
	if !*reportFlag {
		t.Skip("run with -report to measure and print the report")
	}
	cases, err := selectCases(slices.Concat(uncontendedCases(), contendedCases(), wakeCases(),
		fairCases(), rwCases(), semCases(), redlockCases(), clusterCases()), *reportOnly)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	runs, failed := runRounds(cases, *reportRounds)
	rep := &report{w: os.Stdout, cases: cases, runs: runs, failed: failed}
	rep.print(time.Since(start))
}

// runRounds runs every case once per round, in inRoundOrder, and returns
// the results of each case and the messages of its failed rounds (also
// printed to stderr, with every round's result).
func runRounds(cases []benchCase, rounds int) (map[caseKey][]testing.BenchmarkResult, map[caseKey][]string) {
	runs := make(map[caseKey][]testing.BenchmarkResult)
	failed := make(map[caseKey][]string)
	for round := 1; round <= rounds; round++ {
		for _, c := range inRoundOrder(cases, round) {
			bad := false
			r := testing.Benchmark(func(b *testing.B) {
				defer func() { bad = bad || b.Failed() }()
				c.fn(b)
			})
			if bad || r.N == 0 {
				lastFailure.Lock()
				msg := lastFailure.msg
				lastFailure.Unlock()
				failed[c.key()] = append(failed[c.key()], fmt.Sprintf("round %d: %s", round, msg))
				fmt.Fprintf(os.Stderr, "round %d %s: FAILED: %s\n", round, c.name(), msg)
				continue
			}
			runs[c.key()] = append(runs[c.key()], r)
			fmt.Fprintf(os.Stderr, "round %d %s\t%s\t%s\n", round, c.name(), r, r.MemString())
		}
	}
	return runs, failed
}

// inRoundOrder is the cases in the order round runs them: the
// implementations of each configuration rotated by one place per round, so
// that no implementation always runs first after another benchmark (whose
// servers and connections may still be winding down) or last.
func inRoundOrder(cases []benchCase, round int) []benchCase {
	var out []benchCase
	for i := 0; i < len(cases); {
		j := i
		for j < len(cases) && cases[j].bench == cases[i].bench && cases[j].variant == cases[i].variant {
			j++
		}
		group := slices.Clone(cases[i:j])
		k := round % len(group)
		out = append(out, append(group[k:], group[:k]...)...)
		i = j
	}
	return out
}

// selectCases returns the cases whose name matches the regexp only (all of
// them for "").
func selectCases(cs []benchCase, only string) ([]benchCase, error) {
	if only == "" {
		return cs, nil
	}
	re, err := regexp.Compile(only)
	if err != nil {
		return nil, fmt.Errorf("-report.only: %w", err)
	}
	var sel []benchCase
	for _, c := range cs {
		if re.MatchString(c.name()) {
			sel = append(sel, c)
		}
	}
	if len(sel) == 0 {
		return nil, fmt.Errorf("-report.only %q matches no case", only)
	}
	return sel, nil
}

// caseKey identifies a case in maps.
type caseKey struct{ bench, variant, impl string }

func (c benchCase) key() caseKey { return caseKey{c.bench, c.variant, c.impl} }

// name is the case's full benchmark name.
func (c benchCase) name() string { return "Benchmark" + c.bench + "/" + c.sub() }

// report prints the tables from the runs of the cases.
type report struct {
	w      io.Writer
	cases  []benchCase
	runs   map[caseKey][]testing.BenchmarkResult
	failed map[caseKey][]string // messages of failed rounds
}

// metric returns the median over the rounds of a case's metric ("ns/op"
// or a ReportMetric unit), and false when the case has no result. Stalls
// are summed over the rounds instead: one is one too many.
func (r *report) metric(bench, variant, impl, unit string) (float64, bool) {
	rs := r.runs[caseKey{bench, variant, impl}]
	if len(rs) == 0 {
		return 0, false
	}
	vs := make([]float64, len(rs))
	for i, x := range rs {
		switch unit {
		case "ns/op":
			vs[i] = float64(x.T.Nanoseconds()) / float64(x.N)
		case "allocs/op":
			vs[i] = float64(x.AllocsPerOp())
		default:
			vs[i] = x.Extra[unit]
		}
	}
	if unit == "stalls" {
		sum := 0.0
		for _, v := range vs {
			sum += v
		}
		return sum, true
	}
	return median(vs), true
}

// median returns the median of vs, which it sorts.
func median(vs []float64) float64 {
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2
	}
	return vs[n/2]
}

// best returns the anchor with the lowest (or, with highest, the highest)
// median of unit, and that median.
func (r *report) best(bench, variant, unit string, highest bool) (string, float64, bool) {
	name, val, found := "", 0.0, false
	for _, a := range anchorNames {
		v, ok := r.metric(bench, variant, a, unit)
		if ok && (!found || (highest && v > val) || (!highest && v < val)) {
			name, val, found = a, v, true
		}
	}
	return name, val, found
}

func (r *report) variants(bench string) []string {
	var vs []string
	for _, c := range r.cases {
		if c.bench == bench && !slices.Contains(vs, c.variant) {
			vs = append(vs, c.variant)
		}
	}
	return vs
}

func (r *report) printf(format string, args ...any) { fmt.Fprintf(r.w, format, args...) }

func (r *report) print(took time.Duration) {
	r.printf("## Results\n\n")
	r.printf("%s, GOMAXPROCS=%d (%d CPUs), redis-server %s on loopback; %d round(s) of every case, "+
		"-benchtime %s per case and round; each figure is the median of the rounds' figures, "+
		"except stalls, which are summed over the rounds. The report took %s.\n\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), redisVersion(),
		*reportRounds, benchtimeFlag(), took.Round(time.Second))
	r.uncontended()
	r.contended()
	r.wake()
	r.fair()
	r.rw()
	r.semaphore()
	r.redlock()
	r.cluster()
	r.verdicts()
	r.failures()
}

// failures lists the rounds in which a case failed; its figures are the
// median of the other rounds.
func (r *report) failures() {
	if len(r.failed) == 0 {
		return
	}
	r.printf("### Failed rounds\n\n")
	for _, c := range r.cases {
		for _, msg := range r.failed[c.key()] {
			r.printf("- %s, %s\n", c.name(), msg)
		}
	}
	r.printf("\n")
}

func (r *report) uncontended() {
	for _, v := range r.variants("Uncontended") {
		r.printf("### Uncontended Lock+Unlock, %s goroutine(s), a key each\n\n", strings.TrimPrefix(v, "g"))
		r.printf("| implementation | ns/op | ops/s | stalls | ns/op ÷ fastest anchor | Lock p50 | PING p50 |\n|---|--:|--:|--:|--:|--:|--:|\n")
		_, fastest, _ := r.best("Uncontended", v, "ns/op", false)
		for _, impl := range backendNames {
			ns, ok := r.metric("Uncontended", v, impl, "ns/op")
			if !ok {
				r.printf("| %s | %s | | | | | |\n", impl, r.missing("Uncontended", v, impl))
				continue
			}
			ops, _ := r.metric("Uncontended", v, impl, "ops/s")
			stalls, _ := r.metric("Uncontended", v, impl, "stalls")
			lock, ping := "", ""
			if x, ok := r.metric("Uncontended", v, impl, "lock-p50-ns"); ok && x > 0 {
				y, _ := r.metric("Uncontended", v, impl, "ping-p50-ns")
				lock, ping = dur(x), dur(y)
			}
			r.printf("| %s | %.0f | %.0f | %.0f | %s | %s | %s |\n", impl, ns, ops, stalls, ratio(ns, fastest), lock, ping)
		}
		r.printf("\n")
	}
}

func (r *report) contended() {
	for _, v := range r.variants("Contended") {
		r.printf("### Contended, one key, %s\n\n", describeVariant(v))
		r.printf("| implementation | acq/s | handoffs/s | wait p50 | wait p99 | wait max | stalls | p99 ÷ lowest anchor p99 | handoffs ÷ highest anchor |\n")
		r.printf("|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		_, lowP99, _ := r.best("Contended", v, "wait-p99-ns", false)
		_, highHand, _ := r.best("Contended", v, "handoffs/s", true)
		for _, impl := range backendNames {
			acq, ok := r.metric("Contended", v, impl, "acq/s")
			if !ok {
				r.printf("| %s | %s | | | | | | | |\n", impl, r.missing("Contended", v, impl))
				continue
			}
			m := func(unit string) float64 { x, _ := r.metric("Contended", v, impl, unit); return x }
			r.printf("| %s | %.0f | %.0f | %s | %s | %s | %.0f | %s | %s |\n", impl, acq, m("handoffs/s"),
				dur(m("wait-p50-ns")), dur(m("wait-p99-ns")), dur(m("wait-max-ns")), m("stalls"),
				ratio(m("wait-p99-ns"), lowP99), ratio(m("handoffs/s"), highHand))
		}
		r.printf("\n")
	}
}

func (r *report) wake() {
	if len(r.variants("Wake")) == 0 {
		return
	}
	r.printf("### Wake latency, waiter in another process\n\n")
	r.printf("wake: holder's Unlock returns → waiter's Lock returns; handover: holder calls Unlock → waiter's Lock returns.\n\n")
	r.printf("| implementation | wake p50 | wake p99 | wake max | handover p50 | handover p99 | stalls | PING after idle, p50 | PING back-to-back, p50 | wake p50 ÷ idle PING | wake p50 ÷ hot PING |\n")
	r.printf("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, impl := range backendNames {
		if _, ok := r.metric("Wake", "", impl, "wake-p50-ns"); !ok {
			r.printf("| %s | %s | | | | | | | | | |\n", impl, r.missing("Wake", "", impl))
			continue
		}
		m := func(unit string) float64 { x, _ := r.metric("Wake", "", impl, unit); return x }
		r.printf("| %s | %s | %s | %s | %s | %s | %.0f | %s | %s | %.2f | %.2f |\n", impl,
			dur(m("wake-p50-ns")), dur(m("wake-p99-ns")), dur(m("wake-max-ns")),
			dur(m("handover-p50-ns")), dur(m("handover-p99-ns")), m("stalls"),
			dur(m("ping-idle-p50-ns")), dur(m("ping-hot-p50-ns")), m("wake/ping-idle"), m("wake/ping-hot"))
	}
	r.printf("\n")
}

func (r *report) verdicts() {
	r.printf("### Targets\n\n")
	for _, v := range r.variants("Uncontended") {
		ns, ok := r.metric("Uncontended", v, "dlock", "ns/op")
		a, fastest, aok := r.best("Uncontended", v, "ns/op", false)
		if !ok || !aok {
			r.printf("- (1) uncontended %s: no result\n", v)
			continue
		}
		// Issue 11: ops/s at least 0.95× the best anchor's with one
		// goroutine, 1.0× with more.
		want := 1.0
		if v == "g1" {
			want = 0.95
		}
		r.printf("- (1) uncontended %s: dlock %.0f ns/op vs fastest anchor %s %.0f ns/op: ops/s = %.2f× the best anchor's (target ≥ %.2f×): **%s**\n",
			v, ns, a, fastest, fastest/ns, want, verdict(fastest/ns >= want))
		if lock, ok := r.metric("Uncontended", v, "dlock", "lock-p50-ns"); ok && lock > 0 {
			ping, _ := r.metric("Uncontended", v, "dlock", "ping-p50-ns")
			r.printf("- (1) uncontended %s latency: dlock Lock p50 %s vs PING p50 %s: %s more (target: within one round trip, ≤ %s): **%s**\n",
				v, dur(lock), dur(ping), dur(lock-ping), dur(ping), verdict(lock-ping <= ping))
		}
	}
	for _, v := range r.variants("Contended") {
		p99, ok := r.metric("Contended", v, "dlock", "wait-p99-ns")
		hand, _ := r.metric("Contended", v, "dlock", "handoffs/s")
		ap, lowP99, aok := r.best("Contended", v, "wait-p99-ns", false)
		ah, highHand, _ := r.best("Contended", v, "handoffs/s", true)
		if !ok || !aok {
			r.printf("- (2) contended %s: no result\n", v)
			continue
		}
		apHand, _ := r.metric("Contended", v, ap, "handoffs/s")
		ahP99, _ := r.metric("Contended", v, ah, "wait-p99-ns")
		r.printf("- (2) contended %s, against the lowest anchor p99 (%s: %s, at %.0f handoffs/s): "+
			"dlock p99 %s = %s (target ≤ 0.33×), handoffs %.0f/s = %s of the most any anchor makes (%s, target ≥ 0.80×): **%s**\n",
			v, ap, dur(lowP99), apHand, dur(p99), ratio(p99, lowP99), hand, ratio(hand, highHand), ah,
			verdict(p99 <= lowP99/3 && hand >= 0.8*highHand))
		r.printf("- (2) contended %s, against the anchor that hands over most (%s: %.0f handoffs/s, p99 %s): "+
			"dlock p99 = %s (target ≤ 0.33×), handoffs = %s (target ≥ 0.80×): **%s**\n",
			v, ah, highHand, dur(ahP99), ratio(p99, ahP99), ratio(hand, highHand),
			verdict(p99 <= ahP99/3 && hand >= 0.8*highHand))
	}
	if len(r.variants("Wake")) > 0 {
		r.wakeVerdict()
	}
	r.familyVerdicts()
	r.printf("\n")
}

func (r *report) wakeVerdict() {
	if idle, ok := r.metric("Wake", "", "dlock", "wake/ping-idle"); ok {
		hot, _ := r.metric("Wake", "", "dlock", "wake/ping-hot")
		ho, _ := r.metric("Wake", "", "dlock", "handover-p50-ns")
		idlePing, _ := r.metric("Wake", "", "dlock", "ping-idle-p50-ns")
		hotPing, _ := r.metric("Wake", "", "dlock", "ping-hot-p50-ns")
		r.printf("- (3) wake: dlock median = %.2f idle PINGs: **%s**; = %.2f back-to-back PINGs: **%s** (target < 3). "+
			"Handover median (includes the release's trip) = %.2f idle PINGs, %.2f back-to-back PINGs\n",
			idle, verdict(idle < 3), hot, verdict(hot < 3), ho/idlePing, ho/hotPing)
	} else {
		r.printf("- (3) wake: no result\n")
	}
}

// missing says why a case has no figures.
func (r *report) missing(bench, variant, impl string) string {
	if len(r.failed[caseKey{bench, variant, impl}]) > 0 {
		return "failed"
	}
	return "not run"
}

func describeVariant(v string) string {
	var p, g int
	if _, err := fmt.Sscanf(v, "procs%dxg%d", &p, &g); err == nil {
		return fmt.Sprintf("%d processes × %d goroutines, a client per process", p, g)
	}
	return strings.TrimPrefix(v, "g") + " goroutines sharing one client"
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

// ratio formats a/b as "1.23×".
func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	switch x := a / b; {
	case x >= 100:
		return fmt.Sprintf("%.0f×", x)
	case x >= 10:
		return fmt.Sprintf("%.1f×", x)
	default:
		return fmt.Sprintf("%.2f×", x)
	}
}

// dur formats nanoseconds with three significant digits.
func dur(ns float64) string {
	if ns < 0 {
		return "−" + dur(-ns)
	}
	d := time.Duration(ns)
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3g ms", float64(d)/float64(time.Millisecond))
	case d >= time.Microsecond:
		return fmt.Sprintf("%.3g µs", float64(d)/float64(time.Microsecond))
	}
	return fmt.Sprintf("%.0f ns", ns)
}

func benchtimeFlag() string {
	if f := flag.Lookup("test.benchtime"); f != nil {
		return f.Value.String()
	}
	return "1s"
}

// redisVersion asks the shared server for its version.
func redisVersion() string {
	if srv == nil {
		return "(not started)"
	}
	rdb := srv.Client()
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		return "(unknown)"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "(unknown)"
}
