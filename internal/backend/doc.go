// Package backend is the deployment seam, data in and data out: what a
// deployment can do (Caps), the Request a primitive states and an
// acquire's attempt at it (AttemptSpec in, Outcome out), and the three
// deployments — single (scripts on one deployment: a node, Sentinel's
// primary, a cluster), plain (script-free), Quorum (RedLock over
// independent masters) — with what a kind of hold does in Redis
// (HoldOps, Op) and script calls sent as one pipeline (RunBatch).
//
// The argument below is the proof the quorum's fences rest on; the code
// it justifies points here by its heading.
//
// # Fences on a quorum
//
// Each node INCRs its own counter when it grants, so
// the nodes' counters differ; a fence is the highest of them, written back
// so that any later majority, which shares a node with this one, counts on
// from it. That argument needs the shared node to still have its counter,
// and a node restarted without persistence has lost it (the delayed-
// restart rule keeps its locks from being granted twice, as they expire,
// but not its counters). So every node carries a mark (quorum_fence.lua),
// lost with its counters; a node is marked only when its counters are
// known to be at least every fence issued, and fences are decided by
// marked nodes only:
//
//   - After a majority granted, every node that answered (granting or
//     not) is raised to the highest granted value (a second round trip).
//     If a majority of those that answer are marked, the fence is above
//     every counter that may have been issued: at least the highest
//     granted value (each granting node INCRed for it, so it is above
//     every fence that node had seen), and above the counter of every
//     node that answered without granting (its counter may be a fence
//     issued, and it did not move past it). It is written back to every
//     node that answered, which marks the unmarked ones (a third round
//     trip, only then).
//   - If no node that answers is marked and every node answers, the
//     deployment is new (or lost every node at once): the same, marking
//     them all.
//   - Otherwise no fence is issued: the round is given back; a TryLock
//     fails with a *QuorumError of Op "fence" naming the nodes not yet
//     seen, and a Lock tries again within its ctx until a majority of
//     marked nodes answers (its error says why, if its ctx ends first).
//
// Why a fence never repeats or goes back, as long as a majority of nodes
// never loses its state at once: every fence F issued was written to a
// majority M_F, all marked once the write-back returned. A later fence G
// is decided from a majority of marked nodes, which shares a node n with
// M_F. If n kept its state since F, its counter is at least F, so G > F:
// G is at least n's INCRed value when n granted, and above n's counter
// when it did not. (Taking the highest counter as G, as an earlier
// version did, repeated F when n said "held by another", its counter
// staying at F, while a node that had missed F granted with an INCR that
// came to F again: the torture's qsplit found it.)
// If n restarted since, it was marked again only by a write-back of some
// fence F' decided after its restart — by the same argument, from a
// majority that shared a node with M_F, after F was issued, so F' >= F
// and n's counter is at least F' >= F. A node marked again holds, from
// then on, at least every fence issued before its mark. (Two holders
// never race for a fence: only one holds a majority at a time.) What the
// argument does not cover: a majority of nodes that lose their state
// together (every node marked again by a "new deployment": fences start
// over, as on a single node restarted without persistence). The price: a
// new deployment issues no fence, so grants no lock, until every node has
// answered once; after that a majority of marked nodes suffices.
//
// Older fences, from counters this Client does not take fences from (an
// older dlock's, one per lock name, or the other WithSlotFences
// layout's), are a second kind of state a node's counter may lack: they
// reach it only when the Client's fold (internal/deploy/fold.go) has
// added them to it on that node. The older dlock issued each fence F_old
// the same way, written back to a majority M_old, whose old counters
// are at least F_old. So "marked" above is "marked and folded": a node
// counts only once this Client's fold has ended there (Folds, read
// before the round's fence step, so that the counter it reads is the
// folded one), and a new deployment is taken as one only when every
// node is folded. Then the majority that decides G (nodes that answered,
// marked and folded) shares a node n with M_old; n's counter holds its
// old counter's value, at least F_old (the fold adds it with INCRBY
// before it deletes the old one, and Folds records n only after), and G
// is above n's counter, so G > F_old. Hence the folded nodes must be a
// majority of those that decide G — not any folded node, nor a majority
// of the quorum folded while the round is decided by others: two folded
// nodes (old counters 10) and three unfolded ones (50) decided fence 11
// after 50 (issue 45, 10). A round without such a majority issues no
// fence: a TryLock fails with a *QuorumError of Op "fence" naming the
// nodes not folded and why; a Lock folds again before its next round
// and tries again within its ctx. A node whose fold ended stays folded
// for the Client: what it loses since (a restart without persistence)
// takes its old counters too, and its lost mark says so.
package backend
