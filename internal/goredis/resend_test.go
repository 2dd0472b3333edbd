package goredis_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A command whose connection was reset after the server ran it (a proxy
// or load balancer restarting) is sent again by go-redis's pool and by
// dlock's own connections (MaxRetries): the caller is told, by the
// reply's SentTwice or by a ResendAfter the call outlasted. Either the
// counter is 1, or the call says it may have run twice.
func TestResetAfterTheServerRanIsReportedSentTwice(t *testing.T) {
	srv := redistest.StartT(t, redistest.Options{})
	admin := srv.Client()
	defer admin.Close()
	for _, c := range []struct {
		name string
		mk   func(goredis.Redis) *goredis.Driver
	}{{"pool", goredis.New}, {"own", goredis.Own}} {
		t.Run(c.name, func(t *testing.T) {
			p, err := faultproxy.New(srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1})
			d := c.mk(rdb)
			defer func() { _ = d.Close(); _ = rdb.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if r := d.Do(ctx, driver.Command{Args: []any{"PING"}}); r.Err != nil { // a connection made
				t.Fatal(r.Err)
			}
			key := "resent:" + c.name
			if r := d.Do(ctx, driver.Command{Args: []any{"GET", key}, FirstKey: 1, Keys: 1}); r.Err != nil || r.SentTwice {
				t.Fatalf("a call sent once: %v, SentTwice %v", r.Err, r.SentTwice)
			}
			p.ResetAfterForward(1, 0, nil)
			start := time.Now()
			r := d.Do(ctx, driver.Command{Args: []any{"INCR", key}, FirstKey: 1, Keys: 1})
			took := time.Since(start)
			n, err := admin.Get(ctx, key).Int()
			if err != nil {
				t.Fatal(err)
			}
			ra := d.Info().ResendAfter
			t.Logf("reply %v, %v; counter %d; SentTwice %v; ResendAfter %v; took %v", r.Val, r.Err, n, sentTwice(r), ra, took)
			if n > 1 && !sentTwice(r) && (ra == 0 || took < ra) {
				t.Fatalf("the server ran INCR %d times, yet the call does not say it was sent twice (SentTwice false, ResendAfter %v, the call took %v)", n, ra, took)
			}
		})
	}
}

func sentTwice(r driver.Reply) bool { return r.SentTwice }
