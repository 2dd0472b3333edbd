package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The forms of --redis, in the words of the usage and of errors.
const (
	serverForm   = "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]"
	clusterForm  = "redis+cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]"
	sentinelForm = "redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER[/DB]"
	// urlForms is the list of forms for usage texts.
	urlForms = "  " + serverForm + "\n" +
		"      one server; if it is a cluster node (INFO says cluster_enabled:1), its cluster\n" +
		"  " + clusterForm + "\n" +
		"      a Redis Cluster, found through these nodes (go-redis's redis://HOST?addr=HOST2&addr=HOST3 too)\n" +
		"  " + sentinelForm + "\n" +
		"      the master that these Sentinels (port 26379 by default) name MASTER; PASSWORD is the\n" +
		"      master's, the Sentinels' own is ?sentinel_password=P (and ?sentinel_username=U)\n" +
		"  rediss://, rediss+cluster://, rediss+sentinel:// speak TLS; go-redis's query options\n" +
		"  (?dial_timeout=3s, ...) are taken by every form\n"
	// defaultSentinelPort is where a Sentinel listens unless told otherwise.
	defaultSentinelPort = "26379"
	defaultPort         = "6379"
)

// target is where a --redis URL points, parsed but not yet contacted. One
// of server, cluster (server nil) and failover says where; a server URL
// also carries cluster, the same URL read as go-redis's cluster URL, for
// when the server turns out to be a cluster node (nil when the URL's
// options do not fit a cluster).
type target struct {
	server   *redis.Options         // redis://, rediss://, unix://
	cluster  *redis.ClusterOptions  // redis+cluster://, redis://H?addr=H2; beside server: its reading as a cluster
	failover *redis.FailoverOptions // redis+sentinel://
}

// urlError is a fault in a --redis URL found by parseTarget itself. Its
// message repeats nothing of the URL, so it may be shown also for a URL
// from the environment, which may hold a password.
type urlError struct{ msg string }

// Error returns the message.
func (e *urlError) Error() string { return e.msg }

// badURL returns a urlError; format and a must not carry URL text.
func badURL(format string, a ...any) error { return &urlError{fmt.Sprintf(format, a...)} }

// parseTarget reads a URL of one of the forms in urlForms. It does not
// connect. Errors of type *urlError repeat nothing of the URL; the others
// (go-redis's) may.
func parseTarget(raw string) (target, error) {
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		return target{}, badURL("not a URL: want %s, %s or %s", serverForm, clusterForm, sentinelForm)
	}
	var (
		t   target
		err error
	)
	switch strings.ToLower(scheme) {
	case "redis", "rediss", "unix":
		t, err = parseServer(raw)
	case "redis+cluster", "rediss+cluster":
		t, err = parseCluster(raw)
	case "redis+sentinel", "rediss+sentinel":
		t, err = parseSentinel(raw)
	default:
		return target{}, badURL("unknown scheme: want redis://, redis+cluster:// or redis+sentinel:// (rediss... for TLS)")
	}
	if err != nil {
		return target{}, err
	}
	t.setTLS(t.tls())
	return t, nil
}

// parseServer reads redis://, rediss:// and unix:// URLs; one with addr
// query parameters is go-redis's cluster URL.
func parseServer(raw string) (target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return target{}, badURL("not a valid URL")
	}
	q := u.Query()
	switch {
	case q.Has("master_name"):
		return target{}, badURL("for a master behind Sentinels, write %s", sentinelForm)
	case q.Has("addr") && u.Scheme != "unix":
		if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
			return target{}, errNoDB
		}
		opt, err := redis.ParseClusterURL(raw)
		if err != nil {
			return target{}, err
		}
		return target{cluster: opt}, nil
	}
	opt, err := redis.ParseURL(raw)
	if err != nil {
		return target{}, err
	}
	t := target{server: opt}
	if u.Scheme != "unix" {
		t.cluster, _ = redis.ParseClusterURL(raw) // nil if its options are a single server's only
	}
	return t, nil
}

// errNoDB refuses a database number for a cluster.
var errNoDB = badURL("a Redis Cluster has database 0 only: no /DB in a cluster URL")

// parseCluster reads redis+cluster:// URLs by handing go-redis its own
// cluster URL: the first node as the host, the others as addr parameters.
func parseCluster(raw string) (target, error) {
	p, err := splitMultiHost(raw, defaultPort)
	if err != nil {
		return target{}, err
	}
	if s := strings.Trim(p.rest.Path, "/"); s != "" && s != "0" {
		return target{}, errNoDB
	}
	q := p.rest.Query()
	for _, a := range p.addrs[1:] {
		q.Add("addr", a)
	}
	u := url.URL{Scheme: p.scheme, User: p.rest.User, Host: p.addrs[0], RawQuery: q.Encode()}
	opt, err := redis.ParseClusterURL(u.String())
	if err != nil {
		return target{}, err
	}
	return target{cluster: opt}, nil
}

// parseSentinel reads redis+sentinel:// URLs by handing go-redis its own
// failover URL, where the user information is the Sentinels' and the
// master's credentials are query parameters.
func parseSentinel(raw string) (target, error) {
	p, err := splitMultiHost(raw, defaultSentinelPort)
	if err != nil {
		return target{}, err
	}
	path := strings.Split(strings.Trim(p.rest.Path, "/"), "/")
	switch {
	case path[0] == "":
		return target{}, badURL("no master name: write %s", sentinelForm)
	case len(path) > 2:
		return target{}, badURL("too many parts in the path: write %s", sentinelForm)
	}
	db := "0"
	if len(path) == 2 {
		if n, err := strconv.Atoi(path[1]); err != nil || n < 0 {
			return target{}, badURL("the database after the master's name is not a number")
		}
		db = path[1]
	}
	q := p.rest.Query()
	for _, k := range []string{"master_name", "addr", "db", "username", "password"} {
		if q.Has(k) {
			return target{}, badURL("no %s query parameter: write %s", k, sentinelForm)
		}
	}
	var sentinels *url.Userinfo
	if q.Has("sentinel_username") || q.Has("sentinel_password") {
		sentinels = url.UserPassword(q.Get("sentinel_username"), q.Get("sentinel_password"))
		q.Del("sentinel_username")
		q.Del("sentinel_password")
	}
	q.Set("master_name", path[0])
	if p.rest.User != nil {
		q.Set("username", p.rest.User.Username())
		if pw, ok := p.rest.User.Password(); ok {
			q.Set("password", pw)
		}
	}
	for _, a := range p.addrs[1:] {
		q.Add("addr", a)
	}
	u := url.URL{Scheme: p.scheme, User: sentinels, Host: p.addrs[0], Path: "/" + db, RawQuery: q.Encode()}
	opt, err := redis.ParseFailoverURL(u.String())
	if err != nil {
		return target{}, err
	}
	return target{failover: opt}, nil
}

// multiHost is a URL whose authority lists several hosts, taken apart.
type multiHost struct {
	scheme string   // redis or rediss
	addrs  []string // HOST:PORT each, in order
	rest   *url.URL // the user information, path and query, on a placeholder host
}

// splitMultiHost takes apart SCHEME+KIND://[USERINFO@]HOST[:PORT][,...][/PATH][?QUERY],
// which url.Parse refuses when the hosts are IPv6 literals. A HOST without
// PORT gets defPort; an empty HOST is localhost, as go-redis has it.
func splitMultiHost(raw, defPort string) (multiHost, error) {
	scheme, rest, _ := strings.Cut(raw, "://")
	scheme, _, _ = strings.Cut(strings.ToLower(scheme), "+")
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	userinfo, hosts := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hosts = authority[:i+1], authority[i+1:]
	}
	u, err := url.Parse("redis://" + userinfo + "placeholder" + tail)
	if err != nil {
		return multiHost{}, badURL("not a valid URL")
	}
	p := multiHost{scheme: scheme, rest: u}
	for _, h := range strings.Split(hosts, ",") {
		a, err := hostPort(h, defPort)
		if err != nil {
			return multiHost{}, err
		}
		p.addrs = append(p.addrs, a)
	}
	return p, nil
}

// hostPort checks one HOST[:PORT] of a host list and adds defPort when it
// has none.
func hostPort(h, defPort string) (string, error) {
	if h == "" {
		return "", badURL("an empty entry in the host list")
	}
	host, port := h, defPort
	if i := strings.LastIndex(h, ":"); i > strings.LastIndex(h, "]") {
		host, port = h[:i], h[i+1:]
	}
	if v6, ok := strings.CutPrefix(host, "["); ok {
		if host, ok = strings.CutSuffix(v6, "]"); !ok {
			return "", badURL("an IPv6 address without its closing bracket in the host list")
		}
	} else if strings.ContainsAny(host, ":[]") {
		return "", badURL("an IPv6 address in the host list without brackets: write [ADDR]:PORT")
	}
	if host == "" {
		host = "localhost"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", badURL("a port in the host list is not a number from 1 to 65535")
	}
	a := net.JoinHostPort(host, port)
	if u, err := url.Parse("redis://" + a); err != nil || u.Host != a {
		return "", badURL("a host in the host list has characters a host name cannot have")
	}
	return a, nil
}

// tls returns the TLS configuration the URL asked for: nil for plain TCP.
func (t target) tls() *tls.Config {
	switch {
	case t.server != nil:
		return t.server.TLSConfig
	case t.cluster != nil:
		return t.cluster.TLSConfig
	default:
		return t.failover.TLSConfig
	}
}

// setTLS makes tc the TLS configuration of every connection. For a
// cluster and Sentinel it clears ServerName (go-redis sets the first
// host's), so that each node is verified under the name it is dialled
// by, as a single server is.
func (t *target) setTLS(tc *tls.Config) {
	multi := tc
	if tc != nil && tc.ServerName != "" {
		multi = tc.Clone()
		multi.ServerName = ""
	}
	if t.server != nil {
		t.server.TLSConfig = tc
	}
	if t.cluster != nil {
		t.cluster.TLSConfig = multi
	}
	if t.failover != nil {
		t.failover.TLSConfig = multi
	}
}

// where names where the target is, without credentials: its address, the
// cluster's seed nodes, or the master's name and the Sentinels.
func (t target) where() string {
	switch {
	case t.server != nil:
		return t.server.Addr
	case t.cluster != nil:
		return "cluster " + strings.Join(t.cluster.Addrs, ",")
	default:
		return fmt.Sprintf("master %q of sentinels %s", t.failover.MasterName, strings.Join(t.failover.SentinelAddrs, ","))
	}
}

// asCluster is the target read as a cluster, for a server URL whose server
// is a cluster node. (A database other than 0 does not get this far: the
// node refuses the SELECT.)
func (t target) asCluster() (target, error) {
	if t.cluster == nil {
		return target{}, errors.New("the URL has options for a single server only: write " + clusterForm)
	}
	return target{cluster: t.cluster}, nil
}
