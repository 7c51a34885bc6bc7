package redisstore

import (
	"bufio"
	"runtime"
	"strings"
	"testing"
)

// TestBulkLengthBounded: a bulk length from a broken or hostile
// server is not allocated before its bytes arrive.
func TestBulkLengthBounded(t *testing.T) {
	for _, in := range []string{"$67108863\r\nabc", "*1\r\n$67108863\r\nabc", "|1\r\n$67108863\r\nabc"} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var r reply
		err := readReply(bufio.NewReader(strings.NewReader(in)), &r)
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
			t.Errorf("readReply(%q) allocated %d MB for 3 bytes received (err %v)", in, got>>20, err)
		}
	}
}

// TestAttributeInArray: RESP3 lets an attribute precede any element
// of an aggregate; it is not an element. Counted as one, the reader stops
// one element short and hands the rest to the next call as its reply.
func TestAttributeInArray(t *testing.T) {
	in := "*2\r\n|1\r\n+ttl\r\n:5\r\n:1\r\n:2\r\n" + "*1\r\n*1\r\n|1\r\n+a\r\n:1\r\n:3\r\n" + "+next\r\n"
	br := bufio.NewReader(strings.NewReader(in))
	var r reply
	if err := readReply(br, &r); err != nil || len(r.ints) != 2 || r.ints[0] != 1 || r.ints[1] != 2 {
		t.Errorf("first reply: %v, %v; want [1 2]", r.ints, err)
	}
	if err := readReply(br, &r); err != nil || !r.bad {
		t.Errorf("second reply: %v bad %v, %v; want bad", r.ints, r.bad, err)
	}
	if err := readReply(br, &r); err != nil || string(r.str) != "next" {
		t.Errorf("third reply: kind %q %q %v, %v; want +next", r.kind, r.str, r.ints, err)
	}
}
