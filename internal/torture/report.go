package torture

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Report formats the first max violations, each with the history of the
// leases involved and the faults around it.
func (res *Result) Report(max int) string {
	var b strings.Builder
	h := res.h
	fmt.Fprintf(&b, "%d violation(s); history of %d events in %s\n", len(res.Violations), res.Events, res.History)
	b.WriteString(res.Digest())
	// In full: the first of each category, then the next ones up to max.
	seen := map[string]bool{}
	var full []int
	for i, v := range res.Violations {
		if !seen[v.Cat+v.Kind] {
			seen[v.Cat+v.Kind] = true
			full = append(full, i)
		}
	}
	for i := 0; i < len(res.Violations) && len(full) < max; i++ {
		if !slices.Contains(full, i) {
			full = append(full, i)
		}
	}
	slices.Sort(full)
	for i, v := range res.Violations {
		if !slices.Contains(full, i) {
			fmt.Fprintf(&b, "\n[%d] %s at %s: %s\n", i+1, v.Kind, h.rel(v.T), v.Msg)
			continue
		}
		fmt.Fprintf(&b, "\n[%d] %s at %s: %s\n", i+1, v.Kind, h.rel(v.T), v.Msg)
		for _, k := range v.Leases {
			if l := h.leases[k]; l != nil {
				fmt.Fprintf(&b, "    lease %s:\n", k)
				b.WriteString(h.leaseStory(l, 14))
			}
		}
		if len(v.Related) > 0 {
			b.WriteString("    related:\n")
			for _, e := range v.Related {
				fmt.Fprintf(&b, "      %s\n", h.format(e))
			}
		}
		var near []string
		for _, f := range h.faults {
			if f.End >= v.T-int64(3*time.Second) && f.T <= v.T+int64(time.Second) {
				near = append(near, "      "+h.format(f.Event))
			}
		}
		for _, e := range h.events {
			if (e.K == kKill || e.K == kClose) && e.T >= v.T-int64(3*time.Second) && e.T <= v.T+int64(time.Second) {
				near = append(near, "      "+h.format(e))
			}
		}
		if len(near) > 0 {
			b.WriteString("    faults, kills and Client closes from 3 s before to 1 s after:\n")
			b.WriteString(strings.Join(near, "\n") + "\n")
		}
	}
	return b.String()
}

// leaseStory is a lease's call and events, the middle elided past n.
func (h *history) leaseStory(l *leaseRec, n int) string {
	evs := append([]Event{l.call}, l.events...)
	var b strings.Builder
	for i, e := range evs {
		if len(evs) > n && i == n/2 {
			fmt.Fprintf(&b, "      … %d events …\n", len(evs)-n)
		}
		if len(evs) > n && i >= n/2 && i < len(evs)-n/2 {
			continue
		}
		fmt.Fprintf(&b, "      %s\n", h.format(e))
	}
	to, why := h.freeAt(l)
	fmt.Fprintf(&b, "      (may be held until %s: %s; last belief %s)\n", h.rel(to), why, h.rel(l.belief))
	return b.String()
}

// format renders one event for people.
func (h *history) format(e Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-6s %-8s", h.rel(e.T), e.W, e.K)
	if e.G != 0 {
		fmt.Fprintf(&b, " g%d", e.G)
	}
	if e.Op != 0 {
		fmt.Fprintf(&b, " op%d", e.Op)
	}
	if e.Lease != 0 {
		fmt.Fprintf(&b, " lease%d", e.Lease)
	}
	if len(e.Names) > 0 {
		fmt.Fprintf(&b, " %v", e.Names)
	}
	if len(e.Sides) > 0 && slices.ContainsFunc(e.Sides, func(s string) bool { return s != "" }) {
		fmt.Fprintf(&b, " sides %v", e.Sides)
	}
	if len(e.Fences) > 0 {
		fmt.Fprintf(&b, " fence %v", e.Fences)
	}
	for _, o := range e.Owners {
		fmt.Fprintf(&b, " owner %.8s", o)
	}
	if len(e.TTLs) > 0 {
		var ds []string
		for _, t := range e.TTLs {
			ds = append(ds, (time.Duration(t) * time.Microsecond).String())
		}
		fmt.Fprintf(&b, " ttl %s", strings.Join(ds, ","))
	}
	if e.Permits != 0 {
		fmt.Fprintf(&b, " permits %d", e.Permits)
	}
	if e.K == kCall {
		if e.Wait {
			b.WriteString(" Lock")
		} else {
			b.WriteString(" Try")
		}
		if e.Timeout != 0 {
			fmt.Fprintf(&b, " timeout %v", time.Duration(e.Timeout)*time.Microsecond)
		}
	}
	if e.Reent {
		b.WriteString(" re-entry")
	}
	if e.Fixed {
		b.WriteString(" fixed")
	}
	if e.D != 0 {
		fmt.Fprintf(&b, " d %v", time.Duration(e.D)*time.Microsecond)
	}
	if e.Client != "" {
		fmt.Fprintf(&b, " client %s", e.Client)
	}
	if e.Scn != "" {
		fmt.Fprintf(&b, " [%s]", e.Scn)
	}
	if e.EK != "" {
		fmt.Fprintf(&b, " -> %s: %s", e.EK, e.Err)
	} else if e.K == kUnlock || e.K == kExt {
		b.WriteString(" -> ok")
	}
	if e.End != 0 {
		fmt.Fprintf(&b, " (until %s, %v)", h.rel(e.End), time.Duration(e.End-e.T).Round(time.Microsecond))
	}
	if e.Msg != "" {
		fmt.Fprintf(&b, " %s", e.Msg)
	}
	return b.String()
}

// summary counts what the run did.
func (h *history) summary() string {
	byScn := map[string][2]int{} // calls, grants
	kinds := map[string]int{}
	for _, c := range h.calls {
		s := byScn[c.call.Scn]
		s[0]++
		if c.result != nil && c.result.K == kGrant {
			s[1]++
		}
		byScn[c.call.Scn] = s
	}
	for _, e := range h.events {
		kinds[e.K]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d events over %v:", len(h.events), time.Duration(h.end-h.start).Round(time.Millisecond))
	for _, k := range sortedKeys(kinds) {
		fmt.Fprintf(&b, " %s=%d", k, kinds[k])
	}
	b.WriteString("\nacquires (calls/grants) by scenario:")
	for _, k := range sortedKeys(byScn) {
		fmt.Fprintf(&b, " %s=%d/%d", k, byScn[k][0], byScn[k][1])
	}
	faults := map[string]int{}
	for _, f := range h.faults {
		k, _, _ := strings.Cut(f.Msg, ":")
		faults[k]++
	}
	b.WriteString("\nfaults:")
	for _, k := range sortedKeys(faults) {
		fmt.Fprintf(&b, " %s=%d", k, faults[k])
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Digest lists the categories of violations: how many, and the first.
func (res *Result) Digest() string {
	type cat struct {
		n     int
		first Violation
	}
	cats := map[string]*cat{}
	for _, v := range res.Violations {
		k := v.Cat
		if k == "" {
			k = v.Kind
		}
		if c := cats[k]; c != nil {
			c.n++
		} else {
			cats[k] = &cat{1, v}
		}
	}
	var b strings.Builder
	for _, k := range sortedKeys(cats) {
		c := cats[k]
		fmt.Fprintf(&b, "  %4d x %s (first at %s)\n", c.n, k, res.h.rel(c.first.T))
	}
	return b.String()
}
