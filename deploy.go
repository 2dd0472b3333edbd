package dlock

// What a Client learns and keeps about its deployment — the checks of its
// first acquire (eviction policy) and first wait (pub/sub ACLs), the
// refusals the driver stack reports, the fold of older fence counters,
// the owner record it writes about itself — is internal/deploy's. Here
// are its options and what a Client tells of it.

// WithEvictionRisk lets the Client run on a server whose maxmemory-policy
// may evict keys (anything but noeviction). Without it, the first Lock or
// TryLock of such a Client fails with an error matching ErrEvictionPolicy.
// With it, the Client works there and logs one warning: an evicted lock
// key lets a second owner in while the first still holds a live lease,
// and an evicted fence counter issues fences that were issued before.
// Default: off.
func WithEvictionRisk() Option {
	return func(c *clientConfig) { c.evictionRisk = true }
}

// Health returns nil, or an error saying what the deployment refuses that
// the Client works around at a cost. It is an error matching
// ErrPubSubRefused once the Client found that its ACL user may not publish
// on its channels (the check of the first Lock or TryLock, or a release
// whose wake-up was refused): locks stay correct, but releases wake
// nobody, so every wait polls (from 16 ms, doubling, up to 256 ms) and
// costs that much more. The Client also logs it once (WithLogger). Health
// does no I/O and does not block.
func (c *Client) Health() error { return c.dep.Refused() }
