//go:build !linux

package pipeline_test

import "testing"

// lowPriority does nothing where thread priorities are not set: the
// spinning threads then compete with redis-server at equal priority.
func lowPriority(*testing.T) {}

// favour does nothing where process priorities are not set.
func favour(*testing.T, int) {}
