package protocol

import (
	"fmt"
	"io/fs"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A script's header names each of its KEYS and ARGV slots, one a line:
//
//	-- ARGV[n]  (go: Name) what it is
//	-- ARGV[n]  (go: Name, if Variant|Other) sent only by those variants
//
// where Name is, for an ARGV slot, the field of the script's args struct
// (args.go) tagged lua:"ARGV[n]", and for a KEYS slot the field of Keys
// (or KindKeys) whose key the call puts there; n may be "5i-4", "i+5"
// (one slot per lock of lock_all.lua) or "2.." (a slice's elements).
// TestScriptHeadersMatchGo checks, for every script and every variant of
// its call, that the header and the Go side agree: how many keys and
// arguments, which ones, and that each field lands in the slots its tag
// says.

// wakeSample is a WakeTo whose boxed words are recognisable.
var wakeSample = WakeTo{Base: "base:", Publish: "PUBLISH", BaseArg: "wake-base", PublishArg: "wake-publish"}

// scriptCase is one script's Go side: a sample of its args (every
// variant flag false) and how a call is made of them.
type scriptCase struct {
	args  any
	build func(a any) Call
}

// scriptCases are the Go side of every script (lib*.lua aside), on
// sample keys.
func scriptCases() (map[string]scriptCase, map[string]string) {
	mk := NewKeys("p", MutexKind, "m")
	ek := NewKeys("p", ElectionKind, "e")
	rk := NewKeys("p", RWKind, "r")
	sk := NewKeys("p", SemaphoreKind, "s")
	lk := NewKeys("p", LatchKind, "l")
	mk2 := NewKeys("p", MutexKind, "m2")
	lkeys := LatchKeys(lk)
	names := map[string]string{lkeys[1]: "Calls", lkeys[2]: "CallsPrev", "MARK": "Mark", "CLIENT": "Client"}
	for _, k := range []*Keys{mk, ek, rk, sk, lk, mk2} {
		v := reflect.ValueOf(k).Elem()
		for _, s := range []reflect.Value{v, v.FieldByName("KindKeys").Elem()} {
			for i := range s.NumField() {
				if f := s.Field(i); f.Kind() == reflect.String && f.String() != "" && s.Type().Field(i).Name != "Name" {
					names[f.String()] = s.Type().Field(i).Name
				}
			}
		}
	}
	w := wakeSample
	cases := map[string]scriptCase{
		"lock.lua": {LockArgs{Token: "tok", TTL: 30000, Count: 2, Member: "mem", PlaceTTL: 500, Wake: w, Seq: 3, Tail: "0v val", Observers: "obs"},
			func(a any) Call { return a.(LockArgs).Call(mk) }},
		"lock_fast.lua":   {LockFastArgs{Token: "tok", TTL: 30000, Stamp: 1, Tail: "0v val", Observers: "obs", Publish: "PUBLISH"}, func(a any) Call { return a.(LockFastArgs).Call(mk) }},
		"unlock_fast.lua": {UnlockFastArgs{Token: "tok", Fence: 9, Observers: "obs", Publish: "PUBLISH", ReceiptTTL: 100}, func(a any) Call { return a.(UnlockFastArgs).Call(mk) }},
		"unlock.lua": {UnlockArgs{Token: "tok", Left: 1, Wake: w, Observers: "obs", Seq: 3, Fence: 9, ReceiptTTL: 100},
			func(a any) Call { return a.(UnlockArgs).Call(ek) }},
		"leave.lua": {LeaveArgs{Member: "mem", Wake: w}, func(a any) Call { return a.(LeaveArgs).Call(mk) }},
		"force.lua": {ForceArgs{Wake: w, ID: "id", ReceiptTTL: 100, Observers: "obs"},
			func(a any) Call { return a.(ForceArgs).Call(ek) }},
		"elect.lua": {ElectArgs{Token: "tok", Value: "val", Observers: "obs", Publish: "PUBLISH", Seq: 3},
			func(a any) Call { return a.(ElectArgs).Call(ek) }},
		"elect_read.lua": {ElectReadArgs{}, func(a any) Call { return a.(ElectReadArgs).Call(ek) }},
		"renew.lua":      {RenewArgs{Token: "tok", TTL: 30000, Seq: 3}, func(a any) Call { return a.(RenewArgs).Call(mk) }},
		"ttl.lua":        {TTLArgs{Token: "tok"}, func(a any) Call { return a.(TTLArgs).Call(mk) }},
		"rw_read.lua": {RWReadArgs{Token: "tok", TTL: 30000, Count: 2, Member: "mem", PlaceTTL: 500, Parent: "par", Seq: 3},
			func(a any) Call { return a.(RWReadArgs).Call(rk) }},
		"rw_write.lua": {RWWriteArgs{Token: "tok", TTL: 30000, Count: 2, Member: "mem", PlaceTTL: 500, Wake: w, Seq: 3},
			func(a any) Call { return a.(RWWriteArgs).Call(rk) }},
		"rw_unlock.lua": {RWUnlockArgs{Token: "tok", Side: "r", Left: 1, Wake: w, Seq: 3, ReceiptTTL: 100},
			func(a any) Call { return a.(RWUnlockArgs).Call(rk) }},
		"rw_leave.lua": {RWLeaveArgs{Member: "mem", Side: "w", Wake: w}, func(a any) Call { return a.(RWLeaveArgs).Call(rk) }},
		"rw_renew.lua": {RWRenewArgs{Token: "tok", Side: "r", TTL: 30000, Seq: 3},
			func(a any) Call { return a.(RWRenewArgs).Call(rk) }},
		"rw_ttl.lua":   {RWTTLArgs{Token: "tok", Side: "r"}, func(a any) Call { return a.(RWTTLArgs).Call(rk) }},
		"rw_force.lua": {RWForceArgs{Wake: w, ID: "id", ReceiptTTL: 100}, func(a any) Call { return a.(RWForceArgs).Call(rk) }},
		"sem_acquire.lua": {SemAcquireArgs{Token: "tok", TTL: 30000, Permits: 2, Capacity: 5, Member: "mem", PlaceTTL: 500},
			func(a any) Call { return a.(SemAcquireArgs).Call(sk) }},
		"sem_release.lua": {SemReleaseArgs{Token: "tok", Wake: w, ReceiptTTL: 100},
			func(a any) Call { return a.(SemReleaseArgs).Call(sk) }},
		"sem_renew.lua": {SemRenewArgs{Token: "tok", TTL: 30000, Seq: 3}, func(a any) Call { return a.(SemRenewArgs).Call(sk) }},
		"sem_ttl.lua":   {SemTTLArgs{Token: "tok"}, func(a any) Call { return a.(SemTTLArgs).Call(sk) }},
		"sem_permits.lua": {SemPermitsArgs{Capacity: 5, Set: 6, Wake: w},
			func(a any) Call { return a.(SemPermitsArgs).Call(sk) }},
		"sem_leave.lua": {SemLeaveArgs{Member: "mem", Wake: w}, func(a any) Call { return a.(SemLeaveArgs).Call(sk) }},
		"sem_force.lua": {SemForceArgs{Wake: w, ID: "id", ReceiptTTL: 100}, func(a any) Call { return a.(SemForceArgs).Call(sk) }},
		"latch_set.lua": {LatchSetArgs{Count: 3, TTL: 1000, ID: "id"}, func(a any) Call { return a.(LatchSetArgs).Call(lkeys) }},
		"latch_down.lua": {LatchDownArgs{ID: "id", Phase: "ph", Once: "once", Channel: "ch", Publish: "PUBLISH"},
			func(a any) Call { return a.(LatchDownArgs).Call(lkeys) }},
		"latch_open.lua": {LatchOpenArgs{Channel: "ch", Publish: "PUBLISH", ID: "id", ReceiptTTL: 100},
			func(a any) Call { return a.(LatchOpenArgs).Call(lk) }},
		"lock_all.lua": {LockAllArgs{Token: "tok", Member: "mem", PlaceTTL: 500, Wake: w, TTLs: []int64{30000, 40000}},
			func(a any) Call { return a.(LockAllArgs).Call([]*Keys{mk, mk2}) }},
		"bury.lua":         {BuryArgs{Token: "tok", For: 100}, func(a any) Call { return a.(BuryArgs).Call(mk) }},
		"quorum_fence.lua": {QuorumFenceArgs{Fence: 9}, func(a any) Call { return a.(QuorumFenceArgs).Call(mk, "MARK") }},
		"label.lua":        {LabelArgs{Token: "tok", Label: "lab"}, func(a any) Call { return a.(LabelArgs).Call(mk) }},
		"owner.lua": {OwnerArgs{TTL: 100, Fields: []any{"host", "h", "pid", 1}},
			func(a any) Call { return a.(OwnerArgs).Call("CLIENT") }},
	}
	return cases, names
}

// slotLine is one KEYS or ARGV line of a header.
type slotLine struct {
	kind, at string   // "ARGV", "7" (or "5i-4", "i+5", "2..")
	name     string   // the Go name
	when     []string // the variants that send it; none: always
}

var (
	slotRE = regexp.MustCompile(`^-- (KEYS|ARGV)\[([^\]]+)\]\s+(?:\(go: ([A-Za-z]+)(?:, if ([A-Za-z|]+))?\))?`)
	iRE    = regexp.MustCompile(`^(\d*)i([+-]\d+)?$`)
)

// parseHeader reads the KEYS and ARGV lines of src's header (its first
// comment lines).
func parseHeader(src string) ([]slotLine, error) {
	var out []slotLine
	for _, ln := range strings.Split(src, "\n") {
		if !strings.HasPrefix(ln, "--") {
			break
		}
		if strings.Contains(ln, ", KEYS[") || strings.Contains(ln, ", ARGV[") {
			return nil, fmt.Errorf("a slot inside a line, give it its own: %q", ln)
		}
		m := slotRE.FindStringSubmatch(ln)
		if m == nil {
			continue
		}
		if m[3] == "" {
			return nil, fmt.Errorf("no (go: Name) on %q", ln)
		}
		s := slotLine{kind: m[1], at: m[2], name: m[3]}
		if m[4] != "" {
			s.when = strings.Split(m[4], "|")
		}
		out = append(out, s)
	}
	return out, nil
}

// positions are the 1-based slots that s takes, n being the number of
// "i" (locks) and of a "n.." slice's elements.
func (s slotLine) positions(n int) ([]int, error) {
	if v, err := strconv.Atoi(s.at); err == nil {
		return []int{v}, nil
	}
	if from, ok := strings.CutSuffix(s.at, ".."); ok {
		v, err := strconv.Atoi(from)
		if err != nil {
			return nil, err
		}
		var out []int
		for j := range n {
			out = append(out, v+j)
		}
		return out, nil
	}
	m := iRE.FindStringSubmatch(s.at)
	if m == nil {
		return nil, fmt.Errorf("slot %s[%s]: not n, ai+b nor n..", s.kind, s.at)
	}
	a, b := 1, 0
	if m[1] != "" {
		a, _ = strconv.Atoi(m[1])
	}
	if m[2] != "" {
		b, _ = strconv.Atoi(m[2])
	}
	var out []int
	for i := 1; i <= n; i++ {
		out = append(out, a*i+b)
	}
	return out, nil
}

// variants are the args a with each variant flag (a bool field tagged
// lua:"variant") set alone, beside a itself.
func variants(a any) (out []reflect.Value, flags []string) {
	t := reflect.TypeOf(a)
	out = append(out, reflect.ValueOf(a))
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("lua") == "variant" {
			v := reflect.New(t).Elem()
			v.Set(reflect.ValueOf(a))
			v.Field(i).SetBool(true)
			out = append(out, v)
			flags = append(flags, t.Field(i).Name)
		}
	}
	return out, flags
}

// repeat is the number of slots of an "i" or "n.." line in a's call: the
// length of its slice field.
func repeat(a reflect.Value) int {
	for i := range a.NumField() {
		if a.Field(i).Kind() == reflect.Slice {
			return a.Field(i).Len()
		}
	}
	return 0
}

// perturb returns a copy of a with field i changed, or false if it
// cannot be.
func perturb(a reflect.Value, i int) (reflect.Value, bool) {
	v := reflect.New(a.Type()).Elem()
	v.Set(a)
	f := v.Field(i)
	switch f.Kind() {
	case reflect.String:
		f.SetString(f.String() + "~")
	case reflect.Int, reflect.Int64:
		f.SetInt(f.Int() + 7)
	case reflect.Bool:
		f.SetBool(!f.Bool())
	case reflect.Struct:
		f.Set(reflect.ValueOf(WakeTo{BaseArg: "other-base", PublishArg: "other-publish"}))
	case reflect.Slice:
		if f.Len() == 0 {
			return v, false
		}
		c := reflect.MakeSlice(f.Type(), f.Len(), f.Len())
		reflect.Copy(c, f)
		e := c.Index(0)
		if e.Kind() == reflect.Int64 {
			e.SetInt(e.Int() + 7)
		} else {
			e.Set(reflect.ValueOf("other"))
		}
		f.Set(c)
	default:
		return v, false
	}
	return v, true
}

func TestScriptHeadersMatchGo(t *testing.T) {
	cases, keyNames := scriptCases()
	files, err := fs.Glob(ScriptFiles, "scripts/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, path := range files {
		file := strings.TrimPrefix(path, "scripts/")
		if strings.HasPrefix(file, "lib") {
			continue
		}
		seen[file] = true
		c, ok := cases[file]
		if !ok {
			t.Errorf("%s: no Go side in scriptCases", file)
			continue
		}
		src, _ := ScriptFiles.ReadFile(path)
		slots, err := parseHeader(string(src))
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		checkScript(t, file, slots, c, keyNames)
	}
	for file := range cases {
		if !seen[file] {
			t.Errorf("%s: in scriptCases, but no such script", file)
		}
	}
}

// checkScript checks one script's header against its Go side.
func checkScript(t *testing.T, file string, slots []slotLine, c scriptCase, keyNames map[string]string) {
	typ := reflect.TypeOf(c.args)
	tagged := map[string]string{} // field -> its lua tag
	for i := range typ.NumField() {
		if tag := typ.Field(i).Tag.Get("lua"); tag != "" && tag != "variant" {
			tagged[typ.Field(i).Name] = tag
		}
	}
	named := map[string]bool{}
	vs, flags := variants(c.args)
	for _, s := range slots {
		for _, w := range s.when {
			if !slices.Contains(flags, w) {
				t.Errorf("%s: %s[%s] sent if %s: %s has no such variant (a bool field tagged lua:\"variant\")", file, s.kind, s.at, w, typ.Name())
			}
		}
		if s.kind == "ARGV" {
			named[s.name] = true
			if tag, ok := tagged[s.name]; !ok || !slices.Contains(strings.Split(tag, ","), "ARGV["+s.at+"]") {
				t.Errorf("%s: ARGV[%s] is %s in the header; %s has no field %s tagged lua:\"ARGV[%s]\" (tag %q)", file, s.at, s.name, typ.Name(), s.name, s.at, tag)
			}
		}
	}
	for f, tag := range tagged {
		if !named[f] {
			t.Errorf("%s: %s.%s (lua:%q) is in no ARGV line of the header", file, typ.Name(), f, tag)
		}
	}
	// moved: field -> the slots that changed when it did; want: field ->
	// the slots the header gives it, over every variant
	moved, want := map[string][]int{}, map[string][]int{}
	for vi, a := range vs {
		variant := "plain"
		if vi > 0 {
			variant = flags[vi-1]
		}
		sends := func(s slotLine) bool { return len(s.when) == 0 || slices.Contains(s.when, variant) }
		call := c.build(a.Interface())
		keys := call.Keys
		if call.Boxed != nil {
			keys = nil
			for _, k := range call.Boxed {
				keys = append(keys, k.(string))
			}
		}
		n := repeat(a)
		wantKeys, wantArgs := map[int]string{}, map[int]string{}
		for _, s := range slots {
			if !sends(s) {
				continue
			}
			at, err := s.positions(n)
			if err != nil {
				t.Errorf("%s: %v", file, err)
				return
			}
			into := wantArgs
			if s.kind == "KEYS" {
				into = wantKeys
			}
			for _, p := range at {
				if prev, dup := into[p]; dup {
					t.Errorf("%s: %s[%d] named twice (%s, %s)", file, s.kind, p, prev, s.name)
				}
				into[p] = s.name
				if s.kind == "ARGV" {
					want[s.name] = append(want[s.name], p)
				}
			}
		}
		if len(keys) != len(wantKeys) {
			t.Errorf("%s (%s): the header has %d KEYS, Go sends %d: %q", file, variant, len(wantKeys), len(keys), keys)
		}
		if len(call.Args) != len(wantArgs) {
			t.Errorf("%s (%s): the header has %d ARGV, Go sends %d: %v", file, variant, len(wantArgs), len(call.Args), call.Args)
		}
		for p, name := range wantKeys {
			if p < 1 || p > len(keys) {
				t.Errorf("%s (%s): KEYS[%d] (%s): Go sends %d keys", file, variant, p, name, len(keys))
			} else if got := keyNames[keys[p-1]]; got != name {
				t.Errorf("%s (%s): KEYS[%d] is %s in the header, Go sends %s (%q)", file, variant, p, name, got, keys[p-1])
			}
		}
		for p := range wantArgs {
			if p < 1 || p > len(call.Args) {
				t.Errorf("%s (%s): ARGV[%d] (%s): Go sends %d arguments", file, variant, p, wantArgs[p], len(call.Args))
			}
		}
		// each field lands where its tag says, and nowhere else
		for i := range a.NumField() {
			f := a.Type().Field(i)
			if tagged[f.Name] == "" {
				continue
			}
			b, ok := perturb(a, i)
			if !ok {
				continue
			}
			other := c.build(b.Interface())
			for p := range max(len(call.Args), len(other.Args)) {
				var x, y any = "<none>", "<none>"
				if p < len(call.Args) {
					x = call.Args[p]
				}
				if p < len(other.Args) {
					y = other.Args[p]
				}
				if fmt.Sprint(x) == fmt.Sprint(y) {
					continue
				}
				moved[f.Name] = append(moved[f.Name], p+1)
				if wantArgs[p+1] != f.Name {
					t.Errorf("%s (%s): changing %s.%s changes ARGV[%d], which the header says is %q", file, variant, typ.Name(), f.Name, p+1, wantArgs[p+1])
				}
			}
		}
	}
	for f := range tagged {
		m, w := slices.Compact(slices.Sorted(slices.Values(moved[f]))), slices.Compact(slices.Sorted(slices.Values(want[f])))
		if _, ok := perturb(reflect.ValueOf(c.args), slices.IndexFunc(reflect.VisibleFields(typ), func(x reflect.StructField) bool { return x.Name == f })); !ok {
			continue
		}
		if typ.Kind() == reflect.Struct {
			if ff, _ := typ.FieldByName(f); ff.Type.Kind() == reflect.Slice {
				w = w[:min(1, len(w))] // only the first element is changed
			}
		}
		if !slices.Equal(m, w) {
			t.Errorf("%s: %s.%s: Go sends it in ARGV%v, the header in ARGV%v", file, typ.Name(), f, m, w)
		}
	}
}
