package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/spf13/pflag"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// connectTimeout bounds the first contact with a server named by --redis.
const connectTimeout = 5 * time.Second

// redisURLEnv names the environment variable that run and the operator's
// commands (inspect, ls, top, unlock) read the server's URL from when
// --redis is not given, so that a password need not appear in their argv
// (which ps shows to every user).
const redisURLEnv = "DLOCK_REDIS_URL"

// connFlags are the flags of the commands that connect to a Redis the user
// names (run, inspect, ls, top, unlock, check): where it is and how to
// speak TLS to it.
type connFlags struct {
	url         string // --redis; "" when not given
	tlsCA       string // PEM file of CA certificates to verify the server with
	tlsCert     string // PEM file of the client certificate
	tlsKey      string // PEM file of the client certificate's private key
	tlsInsecure bool   // skip the verification of the server's certificate
}

// register adds --redis and the TLS flags to fs.
func (c *connFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.url, "redis", "", "the Redis `URL`: "+serverForm+" (a cluster node: its cluster), "+
		clusterForm+" or "+sentinelForm+"; rediss... for TLS (default $"+redisURLEnv+", else "+defaultRedisURL+")")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "verify the server against the CA certificates in `FILE` (PEM) instead of the system's")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "present the client certificate in `FILE` (PEM); needs --tls-key")
	fs.StringVar(&c.tlsKey, "tls-key", "", "the client certificate's private key `FILE` (PEM); needs --tls-cert")
	fs.BoolVar(&c.tlsInsecure, "tls-insecure", false, "do not verify the server's certificate (tests only: anyone in the path can read and change the traffic)")
}

// options resolves the flags into a target: the URL from --redis, else
// from $DLOCK_REDIS_URL (getenv reads it), else defaultRedisURL, in any
// of the forms of urlForms; TLS as a rediss URL asks for it, adjusted by
// the --tls-* flags. It reads the certificate files but does not connect.
// Its errors are the user's to fix; they never repeat a URL that came from
// the environment, which may hold a password.
func (c connFlags) options(getenv func(string) string) (target, error) {
	url, from := c.url, "--redis "+fmt.Sprintf("%q", c.url)
	if url == "" {
		url, from = getenv(redisURLEnv), "$"+redisURLEnv
	}
	if url == "" {
		url, from = defaultRedisURL, "the default URL"
	}
	t, err := parseTarget(url)
	if err != nil {
		var safe *urlError
		if from == "$"+redisURLEnv && !errors.As(err, &safe) {
			return target{}, fmt.Errorf("%s: not a valid Redis URL (go-redis's reason is not shown: it may repeat the URL)", from)
		}
		return target{}, fmt.Errorf("%s: %w", from, err)
	}
	tc, err := c.tlsConfig(t.tls())
	if err != nil {
		return target{}, err
	}
	if tc != nil && t.tls() == nil {
		return target{}, fmt.Errorf("--tls-* flags given, but %s is not a rediss:// URL (nor rediss+cluster://, rediss+sentinel://): "+
			"refusing to talk in the clear", from)
	}
	t.setTLS(tc)
	return t, nil
}

// tlsConfig applies the --tls-* flags to base, the configuration that
// redis.ParseURL made for a rediss:// URL (nil for redis://). It returns
// base itself when no flag is set, and else a copy with the CA pool, the
// client certificate and InsecureSkipVerify set where the flags say so.
func (c connFlags) tlsConfig(base *tls.Config) (*tls.Config, error) {
	if c.tlsCA == "" && c.tlsCert == "" && c.tlsKey == "" && !c.tlsInsecure {
		return base, nil
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together: give both or neither")
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		tc = base.Clone()
	}
	if c.tlsCA != "" {
		pem, err := os.ReadFile(c.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", c.tlsCA)
		}
		tc.RootCAs = pool
	}
	if c.tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	if c.tlsInsecure {
		tc.InsecureSkipVerify = true
	}
	return tc, nil
}

// dial connects to t and checks that it answers PING, giving up after
// connectTimeout or when ctx ends. The client is a *redis.ClusterClient
// for a cluster, a failover *redis.Client for a master behind Sentinels,
// else a *redis.Client; a server URL that names a cluster node gets a
// ClusterClient on its cluster (INFO says cluster_enabled:1). It also
// returns where it connected (target.where, the cluster when found so).
// The caller closes the client.
func dial(ctx context.Context, t target) (redis.UniversalClient, string, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	switch {
	case t.failover != nil:
		if err := findMaster(ctx, t.failover); err != nil {
			return nil, "", fmt.Errorf("cannot reach Redis at %s: %w", t.where(), err)
		}
		return ping(ctx, redis.NewFailoverClient(t.failover), t.where())
	case t.server == nil:
		return ping(ctx, redis.NewClusterClient(t.cluster), t.where())
	}
	rdb, where, err := ping(ctx, redis.NewClient(t.server), t.where())
	if err != nil {
		return nil, "", err
	}
	// A server that refuses INFO is taken as what it seems: one server.
	info, err := rdb.Info(ctx).Result()
	switch {
	case err != nil:
		return rdb, where, nil
	case infoField(info, "redis_mode") == "sentinel":
		rdb.Close()
		scheme := "redis+sentinel://"
		if t.server.TLSConfig != nil {
			scheme = "rediss+sentinel://"
		}
		return nil, "", fmt.Errorf("%s is a Sentinel, not a Redis server: name the master it watches, %s%s/MASTER", where, scheme, where)
	case infoField(info, "cluster_enabled") != "1":
		return rdb, where, nil
	}
	rdb.Close()
	cluster, err := t.asCluster()
	if err != nil {
		return nil, "", fmt.Errorf("%s is a Redis Cluster node: %w", where, err)
	}
	return ping(ctx, redis.NewClusterClient(cluster.cluster), cluster.where())
}

// ping returns rdb and where once rdb answers PING (refusing it to the
// user is an answer: dlock check names it); else it closes rdb.
func ping(ctx context.Context, rdb redis.UniversalClient, where string) (redis.UniversalClient, string, error) {
	if err := rdb.Ping(ctx).Err(); err != nil && !refusal(err) {
		rdb.Close()
		return nil, "", fmt.Errorf("cannot reach Redis at %s: %w", where, err)
	}
	return rdb, where, nil
}

// findMaster asks the Sentinels of opt, in order, for the address of the
// master opt.MasterName, until one knows it. It fails when none does:
// go-redis's failover client would say "all sentinels ... are
// unreachable: redis: nil" for a name no Sentinel knows, or retry until
// connectTimeout when a Sentinel is down.
func findMaster(ctx context.Context, opt *redis.FailoverOptions) error {
	var errs []string
	answered := false
	for _, addr := range opt.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Username: opt.SentinelUsername, Password: opt.SentinelPassword,
			TLSConfig: opt.TLSConfig, DialTimeout: opt.DialTimeout, MaxRetries: -1, DialerRetries: 1}) // the next Sentinel is the retry
		_, err := sc.GetMasterAddrByName(ctx, opt.MasterName).Result()
		sc.Close()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, redis.Nil):
			answered = true
		default:
			errs = append(errs, fmt.Sprintf("sentinel %s: %v", addr, err))
		}
	}
	if answered {
		return errors.New("the Sentinels that answer know no master of that name")
	}
	return errors.New(strings.Join(errs, "; "))
}

// dialURL is dial for a URL the demo chose or was given: no TLS flags.
func dialURL(ctx context.Context, url string) (redis.UniversalClient, string, error) {
	t, err := parseTarget(url)
	if err != nil {
		return nil, "", fmt.Errorf("--redis %q: %w", url, err)
	}
	return dial(ctx, t)
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
func serverVersion(ctx context.Context, rdb redis.UniversalClient) string {
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
