package redisstore

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

func TestEncode(t *testing.T) {
	for _, c := range []struct{ key, want string }{
		{"user1000", "user1000"},
		{"A-z_0.9~", "A-z_0.9~"},
		{"k:key_8f3a", "k:key_8f3a"},
		{"ip:203.0.113.7", "ip:203.0.113.7"},
		{"ip:2001:db8::1", "ip:2001:db8::1"},
		{"a/b@c+d=e,f;g!h$i&j'k(l)m*", "a/b@c+d=e,f;g!h$i&j'k(l)m*"},
		{"", "%"},
		{"%", "%25"},
		{"%25", "%2525"},
		{"a b", "a%20b"},
		{"{a}", "%7Ba%7D"},
		{"a:s", "a:s"},
		{"\x00", "%00"},
		{"\xff\xfe", "%FF%FE"},
		{`"q"\`, "%22q%22%5C"},
		{"ключ", "%D0%BA%D0%BB%D1%8E%D1%87"},
	} {
		if got := string(appendEncoded(nil, c.key)); got != c.want {
			t.Errorf("encode %q: got %q, want %q", c.key, got, c.want)
		}
	}
}

// decode inverts appendEncoded, refusing any text it could not have
// written: that it exists, and that encodings round-trip through it, is
// what makes the encoding injective.
func decode(enc string) (string, bool) {
	if enc == "%" {
		return "", true
	}
	if enc == "" {
		return "", false
	}
	var b []byte
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if c != escapeMark {
			if !plainBytes[c] {
				return "", false
			}
			b = append(b, c)
			continue
		}
		if i+2 >= len(enc) {
			return "", false
		}
		hi, lo := strings.IndexByte(hexDigits, enc[i+1]), strings.IndexByte(hexDigits, enc[i+2])
		if hi < 0 || lo < 0 || plainBytes[hi<<4|lo] {
			return "", false // plain bytes are never escaped
		}
		b = append(b, byte(hi<<4|lo))
		i += 2
	}
	return string(b), true
}

func TestKeyEndsWithBucketID(t *testing.T) {
	for _, l := range []limit.Limit{
		{Name: "s", Count: 1, Period: time.Second},
		{Name: "login", Count: 5, Period: 15 * time.Minute, Algorithm: limit.TokenBucket},
		{Name: "x.y-z", Count: 1, Period: time.Millisecond, Algorithm: limit.GCRA},
		{Name: "g", Count: 3, Period: time.Second, Burst: 5, Algorithm: limit.GCRA},
		{Name: "d", Count: 1, Period: 24 * time.Hour, Algorithm: limit.SlidingLog},
		{Name: "s", Count: 1, Period: time.Second, Shadow: true},
		{Name: "g", Count: 3, Period: time.Second, Burst: 5, Algorithm: limit.GCRA, Shadow: true},
	} {
		got := string(appendKey(nil, "sl:", "k", &l))
		want := "sl:{k}:" + l.BucketID()
		if l.Alg() == limit.TokenBucket {
			want += ":b" // its state is binary
		}
		if got != want {
			t.Errorf("key of %v: got %q, want %q", l, got, want)
		}
	}
}

// TestCRC16 checks the checksum against the value the Redis Cluster
// specification gives for "123456789".
func TestCRC16(t *testing.T) {
	if got := crc16(0, []byte("123456789")); got != 0x31c3 {
		t.Errorf("crc16(123456789): got %#x, want 0x31c3", got)
	}
}

// checkEncoding holds for any key: the encoding is not empty and has no
// brace, it decodes back to the key, and Slot is the CRC16 of the encoding.
func checkEncoding(t *testing.T, key string) string {
	t.Helper()
	enc := string(appendEncoded(nil, key))
	if strings.ContainsAny(enc, "{}") {
		t.Errorf("encoding of %q holds a brace: %q", key, enc)
	}
	if got, want := Slot(key), crc16(0, []byte(enc))%slots; got != want {
		t.Errorf("Slot(%q): got %d, want %d, the slot of its encoding %q", key, got, want, enc)
	}
	if enc == "" {
		t.Errorf("encoding of %q is empty: Redis would hash the whole key", key)
	}
	if back, ok := decode(enc); !ok || back != key {
		t.Errorf("encoding of %q is %q, which decodes to %q (ok %v)", key, enc, back, ok)
	}
	return enc
}

func TestEncodingInjective(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]string{}
	for i := range 5000 {
		b := make([]byte, rng.IntN(200))
		for j := range b {
			if i%3 == 0 {
				b[j] = byte(rng.IntN(256))
			} else {
				b[j] = "ab=%{}-_.~AZ09:2F"[rng.IntN(17)]
			}
		}
		key := string(b)
		enc := checkEncoding(t, key)
		if other, ok := seen[enc]; ok && other != key {
			t.Fatalf("keys %q and %q both encode to %q", key, other, enc)
		}
		seen[enc] = key
	}
}

func FuzzEncoding(f *testing.F) {
	for _, k := range []string{"", "a", "{a}", "=a", "%a", "%", "%25", "%2", "k:key_1", "ip:::1", "\x00", strings.Repeat("x", 100)} {
		f.Add(k, k+"}")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, eb := checkEncoding(t, a), checkEncoding(t, b)
		if a != b && ea == eb {
			t.Errorf("keys %q and %q both encode to %q", a, b, ea)
		}
	})
}

func TestSlotDoesNotAllocate(t *testing.T) {
	long := strings.Repeat("\xff", 4096)
	if n := testing.AllocsPerRun(100, func() { Slot("user1000"); Slot(long) }); n != 0 {
		t.Errorf("Slot: %v allocations per run, want 0", n)
	}
}

// BenchmarkSlot is the cost of naming a key's node for a per-node breaker
// (Node), which rueidis repeats when it routes the take: it exposes
// neither its slot map nor a way to route by a slot computed already.
func BenchmarkSlot(b *testing.B) {
	var sum uint16
	for b.Loop() {
		sum += Slot("k:key_8f3a9c2e41")
	}
	_ = sum
}
