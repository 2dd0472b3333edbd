// Package wire is dlock's own connection to one Redis server, which the
// go-redis driver sends a single server's client's commands on
// (internal/goredis; a failover client stays on its pool, which alone
// hears the sentinels) instead of through the client's pool: made from
// the client's options (its Dialer, so TLS comes with it; its
// credentials, database and timeouts), it does what the pool cannot do
// without a goroutine per call.
//
//   - Bounded by ctx on the caller's goroutine. The replies come in
//     order, and one reader at a time reads them, handing each to its
//     caller: the caller that found nobody reading, which reads until its
//     own reply has come (so a lone call is written and read on its
//     caller's goroutine, as go-redis does, with no goroutine woken), and
//     then hands the reading to the next caller waiting (see conn.readAs);
//     unless other connections of the process await replies too, when a
//     reader goroutine reads it (see "Who reads").
//     A reading caller's ctx bounds its reads (a deadline on the socket);
//     when it ends, the caller hands the reading to a goroutine between
//     two replies (nothing half read: a caller parses a reply only once
//     all of it is in the buffer, scanReply) and returns. A caller whose
//     ctx ends first gets an *errs.Late, whose Done closes
//     when the reply has come (to nobody) or the connection has died: the
//     command may have run until then, and not after, so the acquire path
//     waits for it before it undoes what the command may have granted.
//   - Pipelined. All the calls of a Mux share one connection (and a
//     second one the large pipelines, the watchdog's renewals, share:
//     bulkMin), ordered: a
//     caller appends its command to the connection's buffer, and the
//     caller that finds no write in progress writes the buffer, then what
//     others appended meanwhile, until it is empty. Many goroutines' calls
//     go in one write; a lone call goes at once, with no timer.
//     A writing caller's ctx bounds its write too: when it ends with
//     bytes left (a stopped server, full socket buffers), a goroutine
//     writes the rest of the buffer, in order, and the caller returns
//     an *errs.Late (see conn.flush).
//   - Never sent twice unsaid. A connection that fails (a write or a
//     read error, no reply within ReadTimeout) fails every call on it
//     (their outcome is unknown) and the next call dials anew. A call
//     whose connection was closed or reset by the other end (EOF,
//     ECONNRESET, EPIPE: a proxy or load balancer restarting) is sent
//     again, as go-redis's pool sends it again (MaxRetries), though its
//     first copy may have run or may still run later; its replies then
//     say so (driver.Reply.SentTwice), and the acquire path treats it as
//     a copy (it buries its token). A call whose reply did not come in
//     time is never sent again. So the driver's Info.ResendAfter is 0.
//     (Why re-send and mark rather than report the outcome unknown: a
//     team moving from go-redis's pool expects a reset to be ridden out
//     as the pool rides it out, and the mark costs one call, at the
//     release, of only the leases whose acquire was sent twice.)
//
// Dedicated lends a connection of its own (WAIT after a write, WATCH and
// MULTI), from a few kept idle. Pub/sub stays with go-redis.
package wire
