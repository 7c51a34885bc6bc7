package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/internal/balancersvc"
	"github.com/sluice-rl/sluice/internal/sharesync"
	"github.com/sluice-rl/sluice/share"
)

// regionInterval is how often the regions scenario's balancer rebalances
// and its gateways report: the design's 10 s, scaled down so that a run
// of seconds sees shares move several times.
const regionInterval = 250 * time.Millisecond

// world is the regions scenario's quota balancer, served on loopback in
// this process, and the clients that keep each gateway's share layer in
// step with it. close stops them all.
type world struct {
	url    string
	srv    *http.Server
	ctx    context.Context // the clients' and the balancer's; close cancels it
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startWorld starts a balancer for regions on a free loopback port.
func startWorld(ctx context.Context, regions []string) (*world, error) {
	quiet := slog.New(slog.DiscardHandler)
	b, err := balancersvc.New(balancersvc.Config{CoreConfig: balancer.CoreConfig{Regions: regions}, Interval: regionInterval, MaxWait: time.Second,
		TrustedNetwork: true, Logger: quiet})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("balancer: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &world{url: "http://" + ln.Addr().String(), srv: &http.Server{Handler: b.Handler(), ReadHeaderTimeout: time.Second}, ctx: ctx, cancel: cancel}
	w.wg.Go(func() { _ = b.Run(ctx) })
	w.wg.Go(func() {
		if err := w.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cancel()
		}
	})
	return w, nil
}

// attach keeps s, the share layer of one gateway of region, in step with
// the balancer until close.
func (w *world) attach(s *share.Store, region, gateway string) error {
	c, err := sharesync.New(sharesync.Config{URLs: []string{w.url}, Region: region, Gateway: gateway, Store: s,
		Interval: regionInterval, Wait: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	w.wg.Go(func() { c.Run(w.ctx) })
	return nil
}

func (w *world) close() {
	w.cancel()
	_ = w.srv.Close()
	w.wg.Wait()
}
