package redistest

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestStandalone(t *testing.T) {
	s := Standalone(t)
	ctx := t.Context()
	for _, c := range []struct {
		args []string
		want any
	}{
		{[]string{"PING"}, "PONG"},
		{[]string{"SET", "k", "v"}, "OK"},
		{[]string{"GET", "k"}, "v"},
		{[]string{"GET", "missing"}, nil},
		{[]string{"INCRBY", "n", "41"}, int64(41)},
		{[]string{"CONFIG", "GET", "save"}, []any{"save", ""}},
		{[]string{"CONFIG", "GET", "appendonly"}, []any{"appendonly", "no"}},
	} {
		got, err := s.Do(ctx, c.args...)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if !equal(got, c.want) {
			t.Errorf("%v: got %#v, want %#v", c.args, got, c.want)
		}
	}
	if _, err := s.Do(ctx, "NOSUCHCOMMAND"); !errors.As(err, new(ReplyError)) {
		t.Errorf("unknown command: got error %v, want a ReplyError", err)
	}

	replies, err := s.DoMulti(ctx, []string{"INCR", "m"}, []string{"NOSUCHCOMMAND"}, []string{"INCR", "m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, isErr := replies[1].(ReplyError); len(replies) != 3 || replies[0] != int64(1) || !isErr || replies[2] != int64(2) {
		t.Errorf("DoMulti INCR, unknown, INCR: got %#v, want 1, a ReplyError, 2", replies)
	}

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if s.Running() {
		t.Error("stopped server: Running true, want false")
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = s.Do(short, "PING")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("PING to a stopped server: got error %v, want a deadline", err)
	}
	if err := s.Cont(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do(ctx, "GET", "k"); err != nil || got != "v" {
		t.Errorf("GET after Cont: got %v, %v, want v", got, err)
	}

	s.Kill()
	if _, err := s.Do(ctx, "PING"); err == nil {
		t.Error("PING to a killed server: no error")
	}
	if err := s.Stop(); err == nil {
		t.Error("Stop of a killed server: no error")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do(ctx, "GET", "k"); err != nil || got != nil {
		t.Errorf("GET after a restart without persistence: got %v, %v, want nil", got, err)
	}
}

func TestStandalonesDistinct(t *testing.T) {
	a, b := Standalone(t), Standalone(t)
	if a.Addr() == b.Addr() {
		t.Fatalf("two servers share %s", a.Addr())
	}
	if _, err := a.Do(t.Context(), "SET", "k", "a"); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Do(t.Context(), "GET", "k"); err != nil || got != nil {
		t.Errorf("GET k on the other server: got %v, %v, want nil", got, err)
	}
}

func TestNewClusterRefuses(t *testing.T) {
	for _, c := range []struct{ primaries, replicas int }{{2, 1}, {0, 0}, {3, -1}} {
		if _, _, err := NewCluster(c.primaries, c.replicas); err == nil {
			t.Errorf("NewCluster(%d, %d): no error, want one", c.primaries, c.replicas)
		}
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3, 1)
	ctx := t.Context()
	if got := len(c.Nodes()); got != 6 {
		t.Fatalf("nodes: got %d, want 6", got)
	}
	primaries, err := c.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(primaries) != 3 {
		t.Fatalf("primaries: got %d, want 3", len(primaries))
	}

	t.Run("EverySlotServedOnce", func(t *testing.T) {
		m, err := c.slotMap(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var served [Slots]int
		for _, r := range m {
			for s := r.first; s <= r.last; s++ {
				served[s]++
			}
		}
		for s, n := range served {
			if n != 1 {
				t.Fatalf("slot %d: served by %d primaries, want 1", s, n)
			}
		}
	})

	t.Run("ThreeReplicas", func(t *testing.T) {
		roles := map[any]int{}
		for _, n := range c.Nodes() {
			role, err := n.Do(ctx, "ROLE")
			if err != nil {
				t.Fatal(err)
			}
			r, ok := role.([]any)
			if !ok || len(r) == 0 {
				t.Fatalf("ROLE on %s: got %v, want an array", n.Addr(), role)
			}
			roles[r[0]]++
		}
		if roles["master"] != 3 || roles["slave"] != 3 {
			t.Errorf("roles: got %v, want 3 masters and 3 slaves", roles)
		}
	})

	t.Run("KeyLivesOnItsSlotsNode", func(t *testing.T) {
		for _, key := range []string{"a", "b", "{user1}.x", "sl:{=k}:s"} {
			owner, err := c.NodeForKey(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range primaries {
				_, err := p.Do(ctx, "SET", key, "v")
				var re ReplyError
				moved := errors.As(err, &re) && len(re) > 5 && re[:5] == "MOVED"
				if p == owner && err != nil {
					t.Errorf("SET %q on its owner %s: %v", key, p.Addr(), err)
				}
				if p != owner && !moved {
					t.Errorf("SET %q on %s, not its owner: got %v, want MOVED", key, p.Addr(), err)
				}
			}
		}
	})

	t.Run("KillFailsOver", func(t *testing.T) {
		victim, err := c.NodeForSlot(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Replication is asynchronous: WAIT, on the connection that wrote,
		// until the replica has the write.
		replies, err := victim.DoMulti(ctx, []string{"SET", "{06S}", "kept"}, []string{"WAIT", "1", "5000"})
		if err != nil || replies[0] != "OK" || replies[1] != int64(1) {
			t.Fatalf("SET then WAIT for 1 replica: got %v, %v, want OK and 1", replies, err)
		}
		if err := c.Kill(ctx, victim); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		heir, err := c.WaitFailover(wctx, victim)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("replica %s took over slot 0 %v after the kill", heir.Addr(), time.Since(began).Round(10*time.Millisecond))
		for _, p := range primaries {
			if heir == p {
				t.Errorf("heir %s was a primary already, want the victim's replica", heir.Addr())
			}
		}
		if got, err := c.NodeForSlot(ctx, 0); err != nil || got != heir {
			t.Errorf("slot 0 after failover: got %v, %v, want %s", got, err, heir.Addr())
		}
		if got, err := heir.Do(ctx, "GET", "{06S}"); err != nil || got != "kept" {
			t.Errorf("GET on the heir: got %v, %v, want the replicated value", got, err)
		}

		if err := victim.Restart(); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitHealthy(wctx); err != nil {
			t.Fatal(err)
		}
		if role, err := victim.Do(ctx, "ROLE"); err != nil || len(role.([]any)) == 0 || role.([]any)[0] != "slave" {
			t.Errorf("restarted victim: role %v, %v, want a replica of its heir", role, err)
		}
	})
}

// equal compares replies of the shapes Do returns.
func equal(a, b any) bool {
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok != bok {
		return false
	}
	if !aok {
		return a == b
	}
	if len(as) != len(bs) {
		return false
	}
	for i := range as {
		if !equal(as[i], bs[i]) {
			return false
		}
	}
	return true
}

// Killing the primary of a Sentinels deployment promotes its replica.
func TestSentinelsFailOver(t *testing.T) {
	d := StartSentinels(t, 1, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if got, err := d.PrimaryAddr(ctx); err != nil || got != d.Primary.Addr() {
		t.Fatalf("PrimaryAddr = %q, %v; want the primary %s", got, err, d.Primary.Addr())
	}
	d.Primary.Kill()
	got, err := d.WaitPrimary(ctx, d.Primary.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if want := d.Replicas[0].Addr(); got != want {
		t.Errorf("new primary %s, want the replica %s", got, want)
	}
}
