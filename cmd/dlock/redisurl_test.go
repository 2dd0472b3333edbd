package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestParseRedisURL reads every form of --redis: where it points, with
// which credentials and database, and whether it speaks TLS.
func TestParseRedisURL(t *testing.T) {
	for _, tc := range []struct {
		url   string
		check func(tg target) bool
	}{
		{"redis://:pw@10.0.0.1:7000/3", func(tg target) bool {
			s, c := tg.server, tg.cluster
			return s.Addr == "10.0.0.1:7000" && s.DB == 3 && s.Password == "pw" && s.TLSConfig == nil &&
				c != nil && slices.Equal(c.Addrs, []string{"10.0.0.1:7000"}) && c.Password == "pw" // if it is a cluster node
		}},
		{"redis://10.0.0.1", func(tg target) bool { return tg.server.Addr == "10.0.0.1:6379" && tg.where() == "10.0.0.1:6379" }},
		{"redis://10.0.0.1?db=2&pool_fifo=true", func(tg target) bool { // fits a single server only
			return tg.server.DB == 2 && tg.server.PoolFIFO && tg.cluster == nil
		}},
		{"unix:///run/redis.sock", func(tg target) bool {
			return tg.server.Network == "unix" && tg.server.Addr == "/run/redis.sock" && tg.cluster == nil
		}},
		{"redis://u:p@10.0.0.1:7000?addr=10.0.0.2:7001&addr=10.0.0.3:7002", func(tg target) bool { // go-redis's cluster URL
			c := tg.cluster
			return tg.server == nil && c.Username == "u" && c.Password == "p" &&
				slices.Equal(c.Addrs, []string{"10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.3:7002"})
		}},
		{"redis+cluster://u:p@h1:7000,h2,[::1]:7002?dial_timeout=3s", func(tg target) bool {
			c := tg.cluster
			return tg.server == nil && c.Username == "u" && c.Password == "p" && c.DialTimeout == 3*time.Second && c.TLSConfig == nil &&
				slices.Equal(c.Addrs, []string{"h1:7000", "h2:6379", "[::1]:7002"}) &&
				tg.where() == "cluster h1:7000,h2:6379,[::1]:7002"
		}},
		{"REDIS+CLUSTER://h1:7000/", func(tg target) bool { return slices.Equal(tg.cluster.Addrs, []string{"h1:7000"}) }},
		{"rediss+cluster://h1:7000,h2:7001", func(tg target) bool {
			// Each node is verified under the name it is dialled by.
			tc := tg.cluster.TLSConfig
			return tc != nil && tc.ServerName == "" && len(tg.cluster.Addrs) == 2
		}},
		{"redis+sentinel://:pw@s1,s2:26380/mymaster/2", func(tg target) bool {
			f := tg.failover
			return tg.server == nil && tg.cluster == nil && f.MasterName == "mymaster" && f.DB == 2 && f.Password == "pw" &&
				f.SentinelPassword == "" && f.TLSConfig == nil && slices.Equal(f.SentinelAddrs, []string{"s1:26379", "s2:26380"}) &&
				tg.where() == `master "mymaster" of sentinels s1:26379,s2:26380`
		}},
		{"redis+sentinel://app:p%40s%2Cs@[fe80::1]:1,[fe80::2]/m", func(tg target) bool { // "@" and "," in the password, IPv6 hosts
			f := tg.failover
			return f.Username == "app" && f.Password == "p@s,s" && f.DB == 0 &&
				slices.Equal(f.SentinelAddrs, []string{"[fe80::1]:1", "[fe80::2]:26379"})
		}},
		{"rediss+sentinel://s1:1/m?sentinel_username=su&sentinel_password=sp&read_timeout=2s", func(tg target) bool {
			f := tg.failover
			return f.TLSConfig != nil && f.TLSConfig.ServerName == "" && f.SentinelUsername == "su" && f.SentinelPassword == "sp" &&
				f.Password == "" && f.ReadTimeout == 2*time.Second && f.MasterName == "m"
		}},
	} {
		tg, err := parseTarget(tc.url)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if !tc.check(tg) {
			t.Errorf("%s: server %+v, cluster %+v, failover %+v", tc.url, tg.server, tg.cluster, tg.failover)
		}
	}
}

// TestParseRedisURLRefuses: bad URLs get an error that says what is
// wrong; from $DLOCK_REDIS_URL, one that repeats nothing of the URL.
func TestParseRedisURLRefuses(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"http://:s3cret@h", "unknown scheme"},
		{"10.0.0.1:6379", "not a URL"},
		{"redis://:s3cret@h:port", "not a valid URL"},
		{"redis://:s3cret@h?master_name=m", "redis+sentinel://"},
		{"redis://:s3cret@h:1/2?addr=h2:2", "database 0 only"},
		{"redis+cluster://:s3cret@h1:1/3", "database 0 only"},
		{"redis+cluster://:s3cret@h1:1,,h2:2", "an empty entry"},
		{"redis+cluster://:s3cret@h1:99999", "from 1 to 65535"},
		{"redis+cluster://:s3cret@h1:x", "from 1 to 65535"},
		{"redis+cluster://:s3cret@::1:7000", "without brackets"},
		{"redis+cluster://:s3cret@[::1:7000", "closing bracket"},
		{"redis+cluster://:s3cret@a%20b:1", "characters"},
		{"redis+sentinel://:s3cret@s1:1", "no master name"},
		{"redis+sentinel://:s3cret@s1:1/", "no master name"},
		{"redis+sentinel://:s3cret@s1:1/m/x", "not a number"},
		{"redis+sentinel://:s3cret@s1:1/m/1/2", "too many parts"},
		{"redis+sentinel://s1:1/m?master_name=x", "no master_name query parameter"},
		{"redis+sentinel://s1:1/m?password=s3cret", "no password query parameter"},
		{"redis+sentinel://s1:1/m?addr=s2:2", "no addr query parameter"},
		// go-redis's own reasons: shown for --redis only.
		{"redis+cluster://:s3cret@h1:1?bogus=1", "unexpected option: bogus"},
		{"redis+sentinel://:s3cret@s1:1/m?dial_timeout=s3cret", "dial_timeout"},
		{"redis://:s3cret@h:1/db", "invalid database number"},
	} {
		_, err := connFlags{url: tc.url}.options(noEnv)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "--redis ") {
			t.Errorf("--redis %s: error %v, want one saying %q", tc.url, err, tc.want)
		}
		_, err = connFlags{}.options(func(k string) string {
			if k == redisURLEnv {
				return tc.url
			}
			return ""
		})
		if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.HasPrefix(err.Error(), "$"+redisURLEnv+": ") {
			t.Errorf("$%s=%s: error %v; want one that names the variable and not the password", redisURLEnv, tc.url, err)
		}
	}
}

// TestTLSFlagsEveryForm: the --tls-* flags apply to the cluster and
// Sentinel forms as to a server, and are refused without TLS.
func TestTLSFlagsEveryForm(t *testing.T) {
	tg, err := connFlags{url: "rediss+cluster://h1:1,h2:2", tlsInsecure: true}.options(noEnv)
	if err != nil || !tg.cluster.TLSConfig.InsecureSkipVerify || tg.cluster.TLSConfig.ServerName != "" {
		t.Errorf("rediss+cluster:// --tls-insecure: %+v, %v", tg.cluster, err)
	}
	tg, err = connFlags{url: "rediss+sentinel://s1/m", tlsInsecure: true}.options(noEnv)
	if err != nil || !tg.failover.TLSConfig.InsecureSkipVerify || tg.failover.TLSConfig.ServerName != "" {
		t.Errorf("rediss+sentinel:// --tls-insecure: %+v, %v", tg.failover, err)
	}
	tg, err = connFlags{url: "rediss://h1:1", tlsInsecure: true}.options(noEnv)
	if err != nil || !tg.server.TLSConfig.InsecureSkipVerify || tg.server.TLSConfig.ServerName != "h1" ||
		!tg.cluster.TLSConfig.InsecureSkipVerify || tg.cluster.TLSConfig.ServerName != "" {
		t.Errorf("rediss:// --tls-insecure: the server's or the cluster's TLS config is wrong: %+v, %v", tg, err)
	}
	for _, url := range []string{"redis+cluster://h1:1", "redis+sentinel://s1/m"} {
		if _, err := (connFlags{url: url, tlsInsecure: true}).options(noEnv); err == nil || !strings.Contains(err.Error(), "not a rediss:// URL") {
			t.Errorf("%s --tls-insecure: %v, want a refusal", url, err)
		}
	}
}
