package redisstore

import (
	"encoding/base64"
	"strconv"

	"github.com/sluice-rl/sluice/limit"
)

// Request keys are client input: an API key from a header, an address. They
// become part of Redis keys, and in a cluster the part between the first
// '{' and the next '}' picks the slot. So a key is never written raw: it is
// encoded injectively into a string without braces, and only that encoding
// is put inside the hash tag. No key can then choose another key's slot
// (a '}' in it would end the tag early) or reach another key's bucket (two
// keys never encode alike).
//
// A key made only of characters that are safe and readable in redis-cli
// (letters, digits, '.', '_', '~', '-') is written as it is behind
// literalMark; any other key, including the empty one, is written as
// unpadded base64url behind encodedMark. The marks differ, and each scheme
// is injective on its own, so the whole encoding is injective.
const (
	literalMark = '='
	encodedMark = '%'
)

// literal reports whether key may be written as it is.
func literal(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '.' || c == '_' || c == '~' || c == '-') {
			return false
		}
	}
	return true
}

// appendEncoded appends the encoding of key to b.
func appendEncoded(b []byte, key string) []byte {
	if literal(key) {
		b = append(b, literalMark)
		return append(b, key...)
	}
	b = append(b, encodedMark)
	return base64.RawURLEncoding.AppendEncode(b, []byte(key))
}

// appendKey appends the Redis key of limit l of request key to b:
// <prefix>{<encoded key>}:<l.BucketID()>. It writes the bucket ID itself
// rather than calling BucketID, which formats with fmt and allocates; a test
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
	return b
}

// Slot returns the Redis Cluster hash slot (0 to 16383) that holds every
// bucket of request key: the CRC16 of its encoded hash tag, as Redis
// computes it. It does not allocate, and it is the same for a standalone
// server, where slots mean nothing but still name a key's shard.
func Slot(key string) uint16 {
	var crc uint16
	if literal(key) {
		crc = crc16(crc, []byte{literalMark})
		for i := 0; i < len(key); i++ {
			crc = crc<<8 ^ crcTable[byte(crc>>8)^key[i]]
		}
		return crc & (slots - 1)
	}
	crc = crc16(crc, []byte{encodedMark})
	// Encode in whole groups of 3 bytes so that the pieces join into the
	// same text as encoding the key at once.
	var src [48]byte
	var dst [64]byte
	for len(key) > 0 {
		n := copy(src[:], key)
		key = key[n:]
		m := base64.RawURLEncoding.EncodedLen(n)
		base64.RawURLEncoding.Encode(dst[:m], src[:n])
		crc = crc16(crc, dst[:m])
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
