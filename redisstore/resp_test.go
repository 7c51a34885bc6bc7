package redisstore

import (
	"bufio"
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestReadReply reads the replies a take can get, in RESP2 and RESP3, and
// what it cannot, which must be read past whole.
func TestReadReply(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		kind     byte
		str      string
		ints     []int64
		bad      bool
		err      string
	}{
		{"bulk", "$3\r\nabc\r\n", '$', "abc", nil, false, ""},
		{"binary bulk", "$4\r\n\r\n\x00\n\r\n", '$', "\r\n\x00\n", nil, false, ""},
		{"simple", "+OK\r\n", '+', "OK", nil, false, ""},
		{"integers", "*3\r\n:1\r\n:-1\r\n:9007199254740992\r\n", '*', "", []int64{1, -1, 1 << 53}, false, ""},
		{"empty array", "*0\r\n", '*', "", nil, false, ""},
		{"array of other", "*2\r\n$1\r\nx\r\n:2\r\n", '*', "", []int64{2}, true, ""},
		{"nested", "*2\r\n*1\r\n:1\r\n%1\r\n+a\r\n:1\r\n", '*', "", nil, true, ""},
		{"error", "-MOVED 3999 127.0.0.1:6381\r\n", 0, "", nil, false, "MOVED 3999 127.0.0.1:6381"},
		{"ERR error", "-ERR sluice: invalid limit\r\n", 0, "", nil, false, "sluice: invalid limit"},
		{"blob error", "!21\r\nSYNTAX invalid syntax\r\n", 0, "SYNTAX invalid syntax", nil, false, "SYNTAX invalid syntax"},
		{"verbatim", "=7\r\ntxt:abc\r\n", '$', "txt:abc", nil, false, ""},
		{"null", "_\r\n", '_', "", nil, false, ""},
		{"null bulk", "$-1\r\n", '$', "", nil, false, ""},
		{"attribute first", "|1\r\n+key\r\n*1\r\n:1\r\n$2\r\nok\r\n", '$', "ok", nil, false, ""},
		{"push", ">2\r\n+invalidate\r\n*1\r\n$1\r\nk\r\n", '>', "", nil, false, ""},
		{"map", "%1\r\n+server\r\n+redis\r\n", '%', "", nil, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(tt.in + "+next\r\n"))
			var r reply
			if err := readReply(br, &r); err != nil {
				t.Fatalf("readReply(%q): %v", tt.in, err)
			}
			gotErr := ""
			if r.err != nil {
				gotErr = r.err.Error()
			}
			if r.kind != tt.kind || string(r.str) != tt.str || !slices.Equal(r.ints, tt.ints) || r.bad != tt.bad || gotErr != tt.err {
				t.Errorf("readReply(%q) = kind %q, %q, %v, bad %v, error %q; want %q, %q, %v, %v, %q",
					tt.in, r.kind, r.str, r.ints, r.bad, gotErr, tt.kind, tt.str, tt.ints, tt.bad, tt.err)
			}
			if err := readReply(br, &r); err != nil || string(r.str) != "next" {
				t.Errorf("the reply after %q: got %q, %v; want it read whole", tt.in, r.str, err)
			}
		})
	}
}

// FuzzReadReply: no input makes readReply panic or read past a reply it
// says it read whole.
func FuzzReadReply(f *testing.F) {
	for _, s := range []string{"$3\r\nabc\r\n", "*2\r\n:1\r\n:2\r\n", "-ERR x\r\n", "|1\r\n+a\r\n+b\r\n:1\r\n", "$-1\r\n", "*-1\r\n", ":99999999999999999999\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var r reply
		readReply(bufio.NewReader(strings.NewReader(in)), &r)
	})
}

// TestDivert: the replies that ran nothing on the node go through rueidis,
// and those that say the slot map is stale read it again.
func TestDivert(t *testing.T) {
	for _, tt := range []struct {
		err           error
		divert, stale bool
	}{
		{redisError("MOVED 3999 127.0.0.1:6381"), true, true},
		{redisError("READONLY You can't write against a read only replica."), true, true},
		{redisError("ASK 3999 127.0.0.1:6381"), true, false},
		{redisError("TRYAGAIN Multiple keys request during rehashing of slot"), true, false},
		{redisError("CLUSTERDOWN The cluster is down"), true, false},
		{redisError("LOADING Redis is loading the dataset in memory"), true, false},
		{redisError("Function not found"), true, false},
		{redisError("WRONGTYPE Operation against a key holding the wrong kind of value"), false, false},
		{redisError("sluice: invalid limit"), false, false},
		{errors.New("MOVED, but from the connection"), false, false},
		{nil, false, false},
	} {
		if divert, stale := divert(tt.err); divert != tt.divert || stale != tt.stale {
			t.Errorf("divert(%v) = %v, %v; want %v, %v", tt.err, divert, stale, tt.divert, tt.stale)
		}
	}
}
