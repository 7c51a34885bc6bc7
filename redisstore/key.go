package redisstore

import (
	"strconv"

	"github.com/sluice-rl/sluice/limit"
)

// Request keys are client input: an API key from a header, an address. They
// become part of Redis keys, and in a cluster the part between the first
// '{' and the next '}' picks the slot. So a key is never written raw: it is
// encoded injectively into a string without braces, and only that encoding
// is put inside the hash tag. No key can then choose another key's slot
// (a '}' in it would end the tag early) or reach another key's bucket (two
// keys never encode alike, and the tag ends at the first '}', so the bucket
// ID after it is never part of a key).
//
// The encoding is percent-encoding: a byte that is printable and plain
// (see plain) stands for itself, any other byte, '%' included, becomes '%'
// and two upper-case hex digits. The gateway's keys, "k:key_8f3" and
// "ip:203.0.113.7", are written as they are, readable in redis-cli. Every
// '%' starts an escape of exactly two digits, so a text decodes one way
// only: the encoding is injective. The empty key, whose encoding would be
// empty, is written as a lone "%", which no other key's encoding is: an
// empty hash tag "{}" would make Redis hash the whole Redis key, putting a
// request's limits in different slots.
const escapeMark = '%'

// plainBytes marks the bytes written as they are: letters, digits and
// RFC 3986's unreserved and sub-delimiter characters with ':', '@' and '/',
// less the ones redis-cli quotes or escapes. Braces, '%', space, quotes,
// backslashes, control bytes and everything above 0x7e are escaped.
var plainBytes = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "-._~!$&'()*+,;=:@/" {
		t[c] = true
	}
	return t
}()

const hexDigits = "0123456789ABCDEF"

// appendEncoded appends the encoding of key to b.
func appendEncoded(b []byte, key string) []byte {
	if key == "" {
		return append(b, escapeMark)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if plainBytes[c] {
			b = append(b, c)
		} else {
			b = append(b, escapeMark, hexDigits[c>>4], hexDigits[c&15])
		}
	}
	return b
}

// appendKey appends the Redis key of limit l of request key to b:
// <prefix>{<encoded key>}:<l.BucketID()>, and for a token bucket or a
// sliding window ":b", the mark of its binary state
// (lua/alg_token_bucket.lua, lua/alg_sliding_window.lua): a gateway of a
// version that kept that state as text uses the key without it, so the two
// never read each other's values. It writes the bucket ID itself rather
// than calling BucketID, which formats with fmt and allocates; a test
// checks the two agree.
func appendKey(b []byte, prefix, key string, l *limit.Limit) []byte {
	b = append(b, prefix...)
	b = append(b, '{')
	b = appendEncoded(b, key)
	b = append(b, '}', ':')
	b = append(b, l.Name...)
	b = append(b, ':')
	b = append(b, l.Alg()...)
	b = append(b, ':')
	b = strconv.AppendInt(b, l.PeriodMillis(), 10)
	if u := l.Unit(); u > 0 {
		b = append(b, ':')
		b = strconv.AppendInt(b, u, 10)
	}
	if l.Shadow {
		b = append(b, shadowMark...)
	}
	if a := l.Alg(); a == limit.TokenBucket || a == limit.SlidingWindow {
		b = append(b, binaryMark...)
	}
	return b
}

// binaryMark ends the key of a state kept in binary (a token bucket's, a
// sliding window's).
const binaryMark = ":b"

// shadowMark ends a shadow limit's bucket ID (limit.Limit.BucketID).
const shadowMark = ":shadow"

// Slot returns the Redis Cluster hash slot (0 to 16383) that holds every
// bucket of request key: the CRC16 of its encoded hash tag, as Redis
// computes it. It does not allocate, and it is the same for a standalone
// server, where slots mean nothing but still name a key's shard.
func Slot(key string) uint16 {
	if key == "" {
		return crc16(0, []byte{escapeMark}) & (slots - 1)
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		c := key[i]
		if plainBytes[c] {
			crc = crc<<8 ^ crcTable[byte(crc>>8)^c]
			continue
		}
		for _, e := range [3]byte{escapeMark, hexDigits[c>>4], hexDigits[c&15]} {
			crc = crc<<8 ^ crcTable[byte(crc>>8)^e]
		}
	}
	return crc & (slots - 1)
}

// slots is how many hash slots a Redis Cluster has.
const slots = 16384

// crc16 continues the CRC16-CCITT (XMODEM) of b from crc: the checksum
// Redis Cluster uses for slots.
func crc16(crc uint16, b []byte) uint16 {
	for _, c := range b {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^c]
	}
	return crc
}

// crcTable is the CRC16-CCITT table for polynomial 0x1021, computed once
// when the package loads and only read after that.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
