package rls

import "testing"

func TestGlob(t *testing.T) {
	tests := []struct {
		pattern, v string
		want       bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"/api/*", "/api/", true},
		{"/api/*", "/api", false},
		{"/api/*/action", "/api/1/action", true},
		{"/api/*/action", "/api//action", true},
		{"/api/*/action", "/api/1/2/action", true},
		{"/api/*/action", "/api/1/action/", false},
		{"/api/*/action", "/api/1/actio", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "acb", false},
		{"a*a*a", "aaaa", true},
		{"*x", "xxxx", true},
		{"**", "", true},
		{"exact", "exact", true},
		{"exact", "exacts", false},
	}
	for _, tt := range tests {
		if got := glob(tt.pattern, tt.v); got != tt.want {
			t.Errorf("glob(%q, %q): got %v, want %v", tt.pattern, tt.v, got, tt.want)
		}
	}
}
