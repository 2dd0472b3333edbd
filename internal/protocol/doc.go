// Package protocol names, once, what dlock's Go code and its Lua scripts
// (scripts/*.lua, embedded) agree on: the kinds of lock and their keys in
// Redis, the shared fence counters, reply codes, hash fields, wake
// messages, and the scripts with the calls that run them. It imports only
// the driver seam's values (package driver) and internal/keyslot.
//
// The arguments below are the proofs the package's code rests on; the
// code they justify points here by heading.
//
// # Fence counters
//
// A lock's fences must grow, forever, across restarts of
// its Clients, so the counter they come from can never expire; one per
// lock name would leave a key behind for every name ever used (orders/42,
// orders/43, ...). So the locks share counters: off a cluster, one per key
// prefix, <prefix>:fence; on a cluster, where a script may only touch the
// keys of one slot, one per hash slot, <prefix>:fence:{<tag>}, where tag
// is a short string of the lock's slot (keyslot.Tag). The server keeps at
// most 16 384 of them, whatever the number of names. A fence is the
// shared counter's next value (next_fence in lib_queue.lua), so a lock's
// fences still only grow, though not one by one; a hold keeps its own in
// its lock's key. Fences of an older dlock, which counted in a key per
// name (<lock>:fence), are folded into the shared counters before the
// first fence is taken (internal/deploy/fold.go).
//
// # Fast scripts
//
// Most Lock+Unlock pairs find the lock free and nobody
// waiting. lock.lua and unlock.lua take every argument that any of their
// cases reads (14 keys and arguments each), and the server pays for each
// of them, read or not (some 1 000-1 700 of its instructions apiece, as
// much as its common case's own work: bench/README, "the server's work
// counted in instructions"). So a mutex's first attempt to acquire, and
// its final release, go first as lock_fast.lua and unlock_fast.lua: each
// is its full script's common case alone, with only the keys and
// arguments that case reads (5 and 6), behind the same condition, and
// otherwise changes nothing and answers ReplySlow; the full script then
// runs in its place (Next), one round trip later. Both are the full
// scripts' words under the full scripts' conditions, so every argument
// written there for who may hold the lock holds for them unchanged (see
// their headers).
//
// The round trip more is paid where the lock is contended: a first
// attempt that finds it held, a release that finds waiters. So each lock
// keeps a hint (Keys.Contended), per Client (Hints: every handle of the
// lock shares it): a fast script that answers
// slow, or a full first attempt that finds the lock held, marks the lock
// contended for BusyFor, and meanwhile its calls go to the full scripts
// at once. (A holder that took the lock at once cannot tell that waiters
// came since; the hint, kept a while, tells it that they did lately.) A
// hint wrong either way costs a round trip or the full scripts' price,
// never a grant.
package protocol
