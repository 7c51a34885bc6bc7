//go:build !linux

package pipeline_test

import "testing"

// lowPriority does nothing where thread priorities are not set: the
// spinning threads then compete with redis-server at equal priority.
func lowPriority(*testing.T) {}
