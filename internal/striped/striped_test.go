package striped

import "testing"

func TestDue(t *testing.T) {
	tests := []struct {
		name         string
		entries, use int   // entries held, uses counted before the one asked about
		now, every   int64 // the clock and the sweep interval
		want         bool
	}{
		{"fresh", 0, 0, 0, 0, false},
		{"uses beyond entries plus 64", 10, 74, 0, 0, true},
		{"uses up to entries plus 64", 10, 73, 0, 0, false},
		{"interval passed", 10, 0, 1000, 1000, true},
		{"interval not passed", 10, 0, 999, 1000, false},
		{"no interval", 10, 0, 1 << 40, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New[int, int](1).At(0)
			for i := range tt.entries {
				s.M[i] = i
			}
			s.touches = tt.use
			if got := s.Due(tt.now, tt.every); got != tt.want {
				t.Errorf("Due(%d, %d) with %d entries after %d uses = %v, want %v", tt.now, tt.every, tt.entries, tt.use, got, tt.want)
			}
		})
	}
}

func TestSweep(t *testing.T) {
	m := New[int, int](4)
	for i := range 100 {
		s := m.Of(string(rune('a' + i%26)))
		s.Lock()
		s.M[i] = i
		s.Unlock()
	}
	for i := range m.Stripes() {
		s := &m.Stripes()[i]
		s.Lock()
		s.Sweep(50, func(k, _ int) bool { return k%2 == 0 })
		if !s.SweptWithin(60, 20) || s.SweptWithin(70, 20) || s.SweptWithin(40, 20) {
			t.Errorf("stripe %d swept at 50: within 20 of 60, 70, 40 = %v %v %v, want true false false",
				i, s.SweptWithin(60, 20), s.SweptWithin(70, 20), s.SweptWithin(40, 20))
		}
		s.Unlock()
	}
	if got := m.Len(); got != 50 {
		t.Errorf("after sweeping the even keys of 100: %d left, want 50", got)
	}
}
