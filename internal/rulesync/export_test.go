package rulesync

import "github.com/prometheus/client_golang/prometheus"

// ErrorsForTest exposes the sync error counter.
func (c *Client) ErrorsForTest() prometheus.Counter { return c.metrics.errors }
