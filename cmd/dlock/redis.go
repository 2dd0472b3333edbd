package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
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
// names (run, inspect, ls, top, unlock): where it is and how to speak TLS
// to it.
type connFlags struct {
	url         string // --redis; "" when not given
	tlsCA       string // PEM file of CA certificates to verify the server with
	tlsCert     string // PEM file of the client certificate
	tlsKey      string // PEM file of the client certificate's private key
	tlsInsecure bool   // skip the verification of the server's certificate
}

// register adds --redis and the TLS flags to fs.
func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "redis", "", "the Redis `URL`: redis://[:PASSWORD@]HOST:PORT[/DB], rediss:// for TLS "+
		"(default $"+redisURLEnv+", else "+defaultRedisURL+")")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "verify the server against the CA certificates in `FILE` (PEM) instead of the system's")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "present the client certificate in `FILE` (PEM); needs --tls-key")
	fs.StringVar(&c.tlsKey, "tls-key", "", "the client certificate's private key `FILE` (PEM); needs --tls-cert")
	fs.BoolVar(&c.tlsInsecure, "tls-insecure", false, "do not verify the server's certificate (tests only: anyone in the path can read and change the traffic)")
}

// options resolves the flags into go-redis options: the URL from --redis,
// else from $DLOCK_REDIS_URL (getenv reads it), else defaultRedisURL; TLS
// as a rediss:// URL asks for it, adjusted by the --tls-* flags. It reads
// the certificate files but does not connect. Its errors are the user's
// to fix; they never repeat a URL that came from the environment, which
// may hold a password.
func (c connFlags) options(getenv func(string) string) (*redis.Options, error) {
	url, from := c.url, "--redis "+fmt.Sprintf("%q", c.url)
	if url == "" {
		url, from = getenv(redisURLEnv), "$"+redisURLEnv
	}
	if url == "" {
		url, from = defaultRedisURL, "the default URL"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		if from == "$"+redisURLEnv {
			return nil, fmt.Errorf("%s: not a valid redis:// or rediss:// URL", from)
		}
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	tc, err := c.tlsConfig(opt.TLSConfig)
	if err != nil {
		return nil, err
	}
	if tc != nil && opt.TLSConfig == nil {
		return nil, fmt.Errorf("--tls-* flags given, but %s is not a rediss:// URL: refusing to talk in the clear", from)
	}
	opt.TLSConfig = tc
	return opt, nil
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

// dial connects with opt (from connFlags.options, or redis.ParseURL for
// the demo's own server) and checks that the server answers PING, giving
// up after connectTimeout or when ctx ends. The caller closes the client.
func dial(ctx context.Context, opt *redis.Options) (*redis.Client, error) {
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", opt.Addr, err)
	}
	return rdb, nil
}

// dialURL is dial for a URL the demo chose or was given: no TLS flags.
func dialURL(ctx context.Context, url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("--redis %q: %w", url, err)
	}
	return dial(ctx, opt)
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
