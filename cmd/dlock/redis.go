package main

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// connectTimeout bounds the first contact with a server named by --redis.
const connectTimeout = 5 * time.Second

// dial connects to the Redis at url (redis://host:port[/db], rediss:// for
// TLS) and checks that it answers PING. The caller closes the client.
func dial(ctx context.Context, url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("--redis %q: %w", url, err)
	}
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", opt.Addr, err)
	}
	return rdb, nil
}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), field+":"); ok {
			return v
		}
	}
	return ""
}

// serverVersion asks the server for its version; "" when it does not say.
func serverVersion(ctx context.Context, rdb *redis.Client) string {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	return infoField(info, "redis_version")
}

// formatMillis formats d in whole milliseconds ("41ms"), or in seconds
// with millisecond precision from 10 s up.
func formatMillis(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}
