// Package goredis is the driver.Driver of a go-redis v9 client
// (github.com/redis/go-redis/v9): a single node, a Sentinel-managed
// primary or a Redis Cluster, whichever the client was made for. dlock.New
// and dlock.GoRedisDriver are its public face; it sits beside
// rueidisdlock and valkeydlock, the drivers of rueidis and valkey-go, and
// imports only driver and internal leaf packages, never dlock.
//
// What the driver does for dlock that go-redis does not do by itself:
//
//   - Dedicated lends a connection of the pool of the key's node (a WAIT
//     after a write, the script-free mode's WATCH/MULTI/EXEC), or, for a
//     client that cannot lend one, the connection of a transaction on the
//     key.
//   - On a cluster, NodeOf asks the slot's previous master where it went
//     after a Refresh, since go-redis reloads its map from any node and at
//     most every 200 ms.
//   - Own sends a plain client's commands, and a cluster client's keyed
//     ones (one set a master: cluster.go), on dlock's own connections
//     (internal/wire), bound by their ctx without a goroutine each.
//   - Its pub/sub connections unsubscribe a sharded channel the server
//     ended by itself (its slot moved), which go-redis would subscribe
//     again on a reconnect where it no longer lives.
package goredis
