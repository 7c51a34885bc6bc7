// Package limit decides whether a request fits its rate limits.
//
// It holds the pure part of sluice: the description of a limit ([Limit]), a
// request to take tokens from one key's limits ([Request]), the answer
// ([Decision]), and the algorithms that turn a stored [State], a time and a
// cost into an [Outcome]. It does no I/O and reads no clock: time is always an
// argument, in Unix milliseconds, so every algorithm is a deterministic
// function that tests can drive without sleeping.
//
// Where the state lives is the business of a [Store]: the in-process store
// (package memstore) keeps it in a map, the Redis store (package redisstore)
// keeps the same numbers in Redis and evaluates them in one server-side
// script. Both must pass the conformance suite in package limittest, so a
// decision never depends on which store made it.
package limit
