package protocol

import (
	"maps"
	"testing"
)

func TestParseHold(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Hold
		ok   bool
	}{
		{"ab12 7 1700000000123 1 0 0 ", Hold{Token: "ab12", Fence: "7", Stamp: "1700000000123", Count: "1", Seq: "0"}, true},
		{"ab12 7 1 3 9 5 night", Hold{Token: "ab12", Fence: "7", Stamp: "1", Count: "3", Seq: "9", Label: "night"}, true},
		{"ab12 7 1 1 2 5v nightleader one", Hold{Token: "ab12", Fence: "7", Stamp: "1", Count: "1", Seq: "2", Label: "night",
			Value: "leader one", HasValue: true}, true},
		{"ab12 7 1 1 2 0v ", Hold{Token: "ab12", Fence: "7", Stamp: "1", Count: "1", Seq: "2", HasValue: true}, true},
		{"ab12 7 1 1 2 3  \n ", Hold{Token: "ab12", Fence: "7", Stamp: "1", Count: "1", Seq: "2", Label: " \n "}, true},
		{"@next 1:ab12:h3000", Hold{KeptFor: "1:ab12:h3000"}, true},
		{"ab12", Hold{}, false},                 // a script-free Mutex's key
		{"ab12 7 1 1 2 9 short", Hold{}, false}, // a label longer than what is left
		{"ab12 7 1 1 2 x ", Hold{}, false},
		{"@next ", Hold{}, false},
		{"", Hold{}, false},
	} {
		got, ok := ParseHold(c.in)
		if ok != c.ok || got != c.want {
			t.Errorf("ParseHold(%q) = %+v, %v; want %+v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	h, _ := ParseHold("ab12 7 1 3 9 5v nightv")
	if want := map[string]string{"ab12": "3", "t:ab12": "1", "f:ab12": "7", "q:ab12": "9", "l:ab12": "night", "v:ab12": "v"}; !maps.Equal(h.Fields(), want) {
		t.Errorf("Fields = %v, want %v", h.Fields(), want)
	}
}
