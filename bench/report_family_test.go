package bench

import (
	"fmt"
	"slices"
	"strings"
)

// The report's tables and verdicts for the rest of the family (Fair,
// RWMutex, Semaphore), RedLock and Cluster.

// Thresholds of the expectations that have no figure of their own in the
// targets: what "close" is taken to mean.
const (
	// fairP99Near and fairMaxNear: a fair lock's p99 and max wait are
	// "near N × handoff" at or below these multiples of it.
	fairP99Near = 1.5
	fairMaxNear = 2.0
	// quorumNear: a 5-node RedLock Lock+Unlock is "close to one node's"
	// at or below this multiple of it. Calling the nodes one after another
	// would cost about quorumSize times as much.
	quorumNear = 1.5
)

// contenders is the number of goroutines contending in a Contended or Fair
// variant: g16 → 16, procs4xg4 → 16.
func contenders(v string) int {
	var p, g int
	if _, err := fmt.Sscanf(v, "procs%dxg%d", &p, &g); err == nil {
		return p * g
	}
	if _, err := fmt.Sscanf(v, "g%d", &g); err == nil {
		return g
	}
	return 0
}

// m returns a case's metric, 0 when it has no result.
func (r *report) m(bench, variant, impl, unit string) float64 {
	x, _ := r.metric(bench, variant, impl, unit)
	return x
}

// has says whether a case has a result.
func (r *report) has(bench, variant, impl string) bool {
	return len(r.runs[caseKey{bench, variant, impl}]) > 0
}

// turnAt returns N × the mean time between handoffs of a contended case,
// in ns: the wait of each contender if the lock went round strictly in
// turn. 0 when there were no handoffs.
func (r *report) turnAt(bench, variant, impl string) float64 {
	h := r.m(bench, variant, impl, "handoffs/s")
	if h == 0 {
		return 0
	}
	return float64(contenders(variant)) * 1e9 / h
}

func (r *report) fair() {
	for _, v := range r.variants("Fair") {
		n := contenders(v)
		r.printf("### Fair mutex, one key, %s\n\n", describeVariant(v))
		r.printf("The Mutex rows are BenchmarkContended/%s of the same run. "+
			"*In turn*: the share of acquisitions that came after exactly N − 1 = %d acquisitions by the others since the same goroutine's previous one, "+
			"as a round robin would give them. N × handoff = %d × the mean time between handoffs (1 ÷ handoffs/s): "+
			"every wait if the lock went round strictly in turn at an even pace.\n\n", v, n-1, n)
		r.printf("| lock | acq/s | handoffs/s | in turn | wait p50 | wait p99 | wait max | N × handoff | p99 ÷ N × handoff | max ÷ N × handoff | stalls |\n")
		r.printf("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		row := func(label, bench, impl string) {
			if !r.has(bench, v, impl) {
				r.printf("| %s | %s | | | | | | | | | |\n", label, r.missing(bench, v, impl))
				return
			}
			mm := func(unit string) float64 { return r.m(bench, v, impl, unit) }
			turn := r.turnAt(bench, v, impl)
			r.printf("| %s | %.0f | %.0f | %.1f%% | %s | %s | %s | %s | %s | %s | %.0f |\n", label,
				mm("acq/s"), mm("handoffs/s"), 100*mm("in-turn"),
				dur(mm("wait-p50-ns")), dur(mm("wait-p99-ns")), dur(mm("wait-max-ns")),
				dur(turn), ratio(mm("wait-p99-ns"), turn), ratio(mm("wait-max-ns"), turn), mm("stalls"))
		}
		row("dlock FairMutex", "Fair", "dlock")
		for _, impl := range backendNames {
			row(impl+" Mutex", "Contended", impl)
		}
		r.printf("\n")
	}
}

func (r *report) rw() {
	for _, v := range r.variants("RWMutex") {
		r.printf("### RWMutex, %.0f%% reads, %d goroutines sharing one client, one key\n\n", rwReadShare*100, rwGoroutines)
		r.printf("Each turn is a read with probability %.2f, else a write; on the Mutex every turn is exclusive. "+
			"ops/s counts turns; *reads* is the reads' share of them.\n\n", rwReadShare)
		r.printf("| lock | ops/s | reads | read wait p50 | read wait p99 | read wait max | write wait p50 | write wait p99 | write wait max | stalls | ops/s ÷ Mutex | read p99 ÷ Mutex |\n")
		r.printf("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		base, baseP99 := r.m("RWMutex", v, "dlock-mutex", "ops/s"), r.m("RWMutex", v, "dlock-mutex", "read-wait-p99-ns")
		for _, row := range []struct{ label, impl string }{{"dlock RWMutex", "dlock-rwmutex"}, {"dlock Mutex", "dlock-mutex"}} {
			if !r.has("RWMutex", v, row.impl) {
				r.printf("| %s | %s | | | | | | | | | | |\n", row.label, r.missing("RWMutex", v, row.impl))
				continue
			}
			mm := func(unit string) float64 { return r.m("RWMutex", v, row.impl, unit) }
			r.printf("| %s | %.0f | %.0f%% | %s | %s | %s | %s | %s | %s | %.0f | %s | %s |\n", row.label,
				mm("ops/s"), mm("read-share")*100,
				dur(mm("read-wait-p50-ns")), dur(mm("read-wait-p99-ns")), dur(mm("read-wait-max-ns")),
				dur(mm("write-wait-p50-ns")), dur(mm("write-wait-p99-ns")), dur(mm("write-wait-max-ns")),
				mm("stalls"), ratio(mm("ops/s"), base), ratio(mm("read-wait-p99-ns"), baseP99))
		}
		r.printf("\n")
	}
}

func (r *report) semaphore() {
	for _, v := range r.variants("Semaphore") {
		r.printf("### Semaphore, %d permits, %d goroutines sharing one client\n\n", semPermits, semGoroutines)
		r.printf("Each turn takes one permit; the baseline is a Mutex (one holder at a time) with the same goroutines.\n\n")
		r.printf("| lock | acq/s | wait p50 | wait p99 | wait max | stalls | acq/s ÷ Mutex | p99 ÷ Mutex |\n")
		r.printf("|---|--:|--:|--:|--:|--:|--:|--:|\n")
		base, baseP99 := r.m("Semaphore", v, "dlock-mutex", "acq/s"), r.m("Semaphore", v, "dlock-mutex", "wait-p99-ns")
		for _, row := range []struct{ label, impl string }{
			{fmt.Sprintf("dlock Semaphore (%d permits)", semPermits), "dlock-semaphore"}, {"dlock Mutex", "dlock-mutex"}} {
			if !r.has("Semaphore", v, row.impl) {
				r.printf("| %s | %s | | | | | | |\n", row.label, r.missing("Semaphore", v, row.impl))
				continue
			}
			mm := func(unit string) float64 { return r.m("Semaphore", v, row.impl, unit) }
			r.printf("| %s | %.0f | %s | %s | %s | %.0f | %s | %s |\n", row.label, mm("acq/s"),
				dur(mm("wait-p50-ns")), dur(mm("wait-p99-ns")), dur(mm("wait-max-ns")), mm("stalls"),
				ratio(mm("acq/s"), base), ratio(mm("wait-p99-ns"), baseP99))
		}
		r.printf("\n")
	}
}

// redlockRows are BenchmarkRedLock's implementations with their labels.
var redlockRows = []struct{ label, impl string }{
	{fmt.Sprintf("dlock NewQuorum, %d nodes", quorumSize), "dlock-quorum"},
	{fmt.Sprintf("redsync, %d pools", quorumSize), "redsync"},
	{"dlock New, 1 of those nodes", "dlock-1node"},
}

func (r *report) redlock() {
	for _, v := range r.variants("RedLock") {
		if strings.HasPrefix(v, "uncontended") {
			where := "loopback"
			if v != "uncontended" {
				where = fmt.Sprintf("every node behind a proxy adding %v each way (round trip + %v)", netDelay, 2*netDelay)
			}
			r.printf("### RedLock, %d independent masters: uncontended Lock+Unlock, 1 goroutine, %s\n\n", quorumSize, where)
			r.printf("| implementation | ns/op | ops/s | stalls | ns/op ÷ dlock on 1 node | ns/op ÷ redsync |\n")
			r.printf("|---|--:|--:|--:|--:|--:|\n")
			one, rs := r.m("RedLock", v, "dlock-1node", "ns/op"), r.m("RedLock", v, "redsync", "ns/op")
			for _, row := range redlockRows {
				if !r.has("RedLock", v, row.impl) {
					r.printf("| %s | %s | | | | |\n", row.label, r.missing("RedLock", v, row.impl))
					continue
				}
				mm := func(unit string) float64 { return r.m("RedLock", v, row.impl, unit) }
				r.printf("| %s | %.0f | %.0f | %.0f | %s | %s |\n", row.label, mm("ns/op"), mm("ops/s"), mm("stalls"),
					ratio(mm("ns/op"), one), ratio(mm("ns/op"), rs))
			}
			r.printf("\n")
			continue
		}
		r.printf("### RedLock, %d independent masters: contended, one key, %d goroutines sharing one client\n\n",
			quorumSize, contenders(strings.TrimPrefix(v, "contended-")))
		r.printf("| implementation | acq/s | handoffs/s | wait p50 | wait p99 | wait max | stalls | p99 ÷ redsync | handoffs ÷ redsync |\n")
		r.printf("|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		rsP99, rsHand := r.m("RedLock", v, "redsync", "wait-p99-ns"), r.m("RedLock", v, "redsync", "handoffs/s")
		for _, row := range redlockRows {
			if !r.has("RedLock", v, row.impl) {
				r.printf("| %s | %s | | | | | | | |\n", row.label, r.missing("RedLock", v, row.impl))
				continue
			}
			mm := func(unit string) float64 { return r.m("RedLock", v, row.impl, unit) }
			r.printf("| %s | %.0f | %.0f | %s | %s | %s | %.0f | %s | %s |\n", row.label, mm("acq/s"), mm("handoffs/s"),
				dur(mm("wait-p50-ns")), dur(mm("wait-p99-ns")), dur(mm("wait-max-ns")), mm("stalls"),
				ratio(mm("wait-p99-ns"), rsP99), ratio(mm("handoffs/s"), rsHand))
		}
		r.printf("\n")
	}
}

func (r *report) cluster() {
	for _, v := range r.variants("Cluster") {
		r.printf("### Cluster: uncontended Lock+Unlock, %s goroutines, a key each, 3 masters + 3 replicas\n\n", strings.TrimPrefix(v, "g"))
		r.printf("*One node* is BenchmarkUncontended/%s of the same run (the shared server). "+
			"All 6 cluster nodes, the one node and the benchmark share the same CPUs.\n\n", v)
		r.printf("| implementation | cluster ns/op | cluster ops/s | one node ops/s | cluster ÷ one node | stalls |\n")
		r.printf("|---|--:|--:|--:|--:|--:|\n")
		for _, impl := range append(slices.Clone(backendNames), "dlock-rueidis") {
			if !r.has("Cluster", v, impl) {
				r.printf("| %s | %s | | | | |\n", impl, r.missing("Cluster", v, impl))
				continue
			}
			ops, one := r.m("Cluster", v, impl, "ops/s"), r.m("Uncontended", v, impl, "ops/s")
			oneS := "not run"
			if r.has("Uncontended", v, impl) {
				oneS = fmt.Sprintf("%.0f", one)
			}
			r.printf("| %s | %.0f | %.0f | %s | %s | %.0f |\n", impl, r.m("Cluster", v, impl, "ns/op"), ops, oneS,
				ratio(ops, one), r.m("Cluster", v, impl, "stalls"))
		}
		r.printf("\n")
	}
}

// familyVerdicts prints the expectations of the new cases, under Targets.
func (r *report) familyVerdicts() {
	for _, v := range r.variants("Fair") {
		if !r.has("Fair", v, "dlock") {
			r.printf("- (fair) %s: no result\n", v)
			continue
		}
		p99, mx := r.m("Fair", v, "dlock", "wait-p99-ns"), r.m("Fair", v, "dlock", "wait-max-ns")
		turn := r.turnAt("Fair", v, "dlock")
		r.printf("- (fair) %s: FairMutex p99 %s = %s and max %s = %s of N × handoff (%s) (read as near: ≤ %.1f× and ≤ %.1f×): **%s**; %.1f%% of turns in turn",
			v, dur(p99), ratio(p99, turn), dur(mx), ratio(mx, turn), dur(turn), fairP99Near, fairMaxNear,
			verdict(turn > 0 && p99 <= fairP99Near*turn && mx <= fairMaxNear*turn), 100*r.m("Fair", v, "dlock", "in-turn"))
		if a, lowMax, ok := r.best("Contended", v, "wait-max-ns", false); ok {
			ah, _, _ := r.best("Contended", v, "handoffs/s", true)
			ahP99 := r.m("Contended", v, ah, "wait-p99-ns")
			r.printf("; max ÷ lowest anchor max (%s, %s) = %s; p99 ÷ p99 of the anchor that hands over most (%s, %s) = %s",
				a, dur(lowMax), ratio(mx, lowMax), ah, dur(ahP99), ratio(p99, ahP99))
		}
		if r.has("Contended", v, "dlock") {
			r.printf("; max ÷ dlock Mutex max = %s", ratio(mx, r.m("Contended", v, "dlock", "wait-max-ns")))
		}
		r.printf("\n")
	}
	for _, v := range r.variants("RWMutex") {
		if r.has("RWMutex", v, "dlock-rwmutex") && r.has("RWMutex", v, "dlock-mutex") {
			ops, base := r.m("RWMutex", v, "dlock-rwmutex", "ops/s"), r.m("RWMutex", v, "dlock-mutex", "ops/s")
			r.printf("- (rw, no target) %s: RWMutex %.0f ops/s = %s the Mutex's %.0f with the same turns\n",
				v, ops, ratio(ops, base), base)
		}
	}
	for _, v := range r.variants("Semaphore") {
		if r.has("Semaphore", v, "dlock-semaphore") && r.has("Semaphore", v, "dlock-mutex") {
			acq, base := r.m("Semaphore", v, "dlock-semaphore", "acq/s"), r.m("Semaphore", v, "dlock-mutex", "acq/s")
			r.printf("- (semaphore, no target) %s: %d permits give %.0f acq/s = %s the Mutex's %.0f\n",
				v, semPermits, acq, ratio(acq, base), base)
		}
	}
	for _, v := range r.variants("RedLock") {
		if !strings.HasPrefix(v, "uncontended") || !r.has("RedLock", v, "dlock-quorum") || !r.has("RedLock", v, "dlock-1node") {
			continue
		}
		q, one := r.m("RedLock", v, "dlock-quorum", "ns/op"), r.m("RedLock", v, "dlock-1node", "ns/op")
		r.printf("- (RedLock) %s: Lock+Unlock on %d nodes %s vs one node %s = %s (read as close: ≤ %.1f×; "+
			"the nodes one after another would cost at least %d×): **%s**",
			v, quorumSize, dur(q), dur(one), ratio(q, one), quorumNear, quorumSize, verdict(q <= quorumNear*one))
		if rs := r.m("RedLock", v, "redsync", "ns/op"); rs > 0 {
			r.printf("; redsync on %d pools = %s of dlock on one node", quorumSize, ratio(rs, one))
		}
		r.printf("\n")
	}
	for _, v := range r.variants("Cluster") {
		if r.has("Cluster", v, "dlock") && r.has("Uncontended", v, "dlock") {
			c, one := r.m("Cluster", v, "dlock", "ops/s"), r.m("Uncontended", v, "dlock", "ops/s")
			r.printf("- (cluster, no target) %s: dlock %.0f ops/s on the cluster = %s its %.0f on one node (same CPUs)\n",
				v, c, ratio(c, one), one)
		}
	}
}
