package protocol

import (
	"strconv"
	"strings"
)

// Hold is a mutex's hold (a Mutex's, FairMutex's, Election's, a LockAll
// part's) as its lock key keeps it: one string, '<token> <fence> <stamp>
// <count> <seq> <lablen>[v] <label><value>' (scripts/lib_mutex.lua), or
// RESERVED and a waiter's member for a lock kept for that waiter.
type Hold struct {
	Token    string
	Fence    string // as the fence counter gave it
	Stamp    string // when it was taken, server ms
	Count    string // the hold count
	Seq      string // the highest of the hold's sequence numbers that ran
	Label    string
	Value    string // an Election leader's, when HasValue
	HasValue bool
	KeptFor  string // a lock kept for a waiter: its member (and nothing else is set)
}

// ParseHold reads a mutex's lock key; ok is false when v is neither a
// hold nor a lock kept for a waiter (a script-free Mutex's key is its
// owner's token alone).
func ParseHold(v string) (h Hold, ok bool) {
	if m, kept := strings.CutPrefix(v, FieldNext+" "); kept {
		return Hold{KeptFor: m}, m != ""
	}
	var f [5]string
	rest := v
	for i := range f {
		var found bool
		if f[i], rest, found = strings.Cut(rest, " "); !found || f[i] == "" {
			return Hold{}, false
		}
	}
	n, rest, found := strings.Cut(rest, " ")
	h = Hold{Token: f[0], Fence: f[1], Stamp: f[2], Count: f[3], Seq: f[4]}
	if !found {
		return Hold{}, false
	}
	n, h.HasValue = strings.CutSuffix(n, "v")
	size, err := strconv.Atoi(n)
	if err != nil || size < 0 || size > len(rest) {
		return Hold{}, false
	}
	h.Label = rest[:size]
	if h.HasValue {
		h.Value = rest[size:]
	}
	return h, true
}

// HoldTail is what a hold keeps after its sequence number (see Hold):
// the label, after its length, then, for an Election's leader (value
// true), its value. lock.lua and lock_fast.lua write it as Go made it.
func HoldTail(label, val string, value bool) string {
	v := ""
	if value {
		v = "v"
	}
	return strconv.Itoa(len(label)) + v + " " + label + val
}

// Fields is the hold as the hash fields that a lock's hash keeps for
// the other kinds (owner token -> count, FieldTaken, FieldFence, FieldSeq,
// FieldLabel, FieldValue + token; FieldNext): what inspection reads.
func (h Hold) Fields() map[string]string {
	if h.KeptFor != "" {
		return map[string]string{FieldNext: h.KeptFor}
	}
	m := map[string]string{h.Token: h.Count, FieldTaken + h.Token: h.Stamp, FieldFence + h.Token: h.Fence, FieldSeq + h.Token: h.Seq}
	if h.Label != "" {
		m[FieldLabel+h.Token] = h.Label
	}
	if h.HasValue {
		m[FieldValue+h.Token] = h.Value
	}
	return m
}
