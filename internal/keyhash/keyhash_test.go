package keyhash

import "testing"

func TestOf(t *testing.T) {
	// The recipe in Of's doc: printf %s 'k:KEY' | sha256sum | cut -c1-16
	for _, tt := range []struct{ key, want string }{
		{"k:demo", "k:21fae07dc0b1f3f0"},
		{"ip:192.0.2.1", "ip:4fa79423ef2fc7de"},
		{"other", "ip:d9298a10d1b07358"},
	} {
		if got := Of(tt.key); got != tt.want {
			t.Errorf("Of(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}
