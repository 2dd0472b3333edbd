package dlock

// The protocol between Go and the Lua scripts, named once. scripts/lib.lua
// names the same values for the scripts; TestProtocolAgrees checks that
// both say the same.

// Reply codes: the first element of a script's array reply, or its whole
// integer reply.
const (
	replyHeld       = 1  // {1, fence}: acquired or re-entered
	replyBusy       = 0  // {0, pttl}: held by another owner
	replyNotHeld    = -1 // {-1} or -1: the caller holds nothing
	replyTooMany    = -2 // {-2, capacity}: more permits than the semaphore has
	replyTTLNotHeld = -3 // a ttl script: the caller holds nothing
)

// Wake messages, published on a lock's channel. Any other message is the
// owner token of the one waiter whose turn it is (a fair lock's head).
const (
	wakeOne  = "one"   // wake one waiter per process
	wakeAll  = "all"   // wake every waiter
	wakeFree = "free:" // + the number of free permits: wake the waiters that fit
)
