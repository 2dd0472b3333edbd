package bench

import (
	"slices"
	"testing"
	"time"
)

// summary is the distribution of a set of durations.
type summary struct {
	n             int
	p50, p99, max time.Duration
}

// summarize sorts ds in place and returns its median, 99th percentile and
// maximum, by the nearest-rank method. An empty set gives zeros.
func summarize(ds []time.Duration) summary {
	if len(ds) == 0 {
		return summary{}
	}
	slices.Sort(ds)
	return summary{n: len(ds), p50: rank(ds, 0.50), p99: rank(ds, 0.99), max: ds[len(ds)-1]}
}

// rank returns the q-quantile of sorted ds: the smallest value with at
// least q of the set at or below it.
func rank(ds []time.Duration, q float64) time.Duration {
	i := int(float64(len(ds))*q+0.9999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// report adds the summary to b's results as metrics named prefix-p50-ns,
// prefix-p99-ns and prefix-max-ns.
func (s summary) report(b *testing.B, prefix string) {
	b.ReportMetric(float64(s.p50), prefix+"-p50-ns")
	b.ReportMetric(float64(s.p99), prefix+"-p99-ns")
	b.ReportMetric(float64(s.max), prefix+"-max-ns")
}

// perSecond returns how many of n happened per second of b's timed run.
func perSecond(b *testing.B, n int) float64 {
	if s := b.Elapsed().Seconds(); s > 0 {
		return float64(n) / s
	}
	return 0
}

func TestSummarize(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		ds := make([]time.Duration, len(v))
		for i, x := range v {
			ds[i] = time.Duration(x) * time.Millisecond
		}
		return ds
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100..1, unsorted
	}
	for _, tc := range []struct {
		name          string
		in            []time.Duration
		p50, p99, max time.Duration
	}{
		{"empty", nil, 0, 0, 0},
		{"one", ms(7), 7 * time.Millisecond, 7 * time.Millisecond, 7 * time.Millisecond},
		{"two", ms(9, 1), 1 * time.Millisecond, 9 * time.Millisecond, 9 * time.Millisecond},
		{"hundred", ms(hundred...), 50 * time.Millisecond, 99 * time.Millisecond, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := summarize(tc.in)
			if s.p50 != tc.p50 || s.p99 != tc.p99 || s.max != tc.max {
				t.Errorf("summarize = p50 %v p99 %v max %v, want %v %v %v",
					s.p50, s.p99, s.max, tc.p50, tc.p99, tc.max)
			}
		})
	}
}
