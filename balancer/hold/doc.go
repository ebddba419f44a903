// Package hold keeps keys in use on the upstream that served them through
// membership changes of the ring.
//
// A membership change (an upstream added or removed, a weight changed)
// builds a new ring and moves about 1/N of the keys. For an upstream that
// holds state for its keys (sessions, a cache) every moved key is lost
// state. With hold, ringlb remembers for each key it serves the upstream
// that served it, the ring version it was served under and when; a key in
// use stays where it is, and only new or idle keys follow the new ring:
//
//	ring v1: key → A    (record: A, v1, t)
//	ring v2: key → B    record younger than idle, made under v1 ≠ v2, A a
//	                    member and available → serve on A, refresh t
//	... key idle for longer than idle → record expires → key follows v2 → B
//
// A record made under the current ring version never overrides the ring:
// an ejection is not a membership change, so the ring's own remapping
// around an unavailable upstream, and the return of exactly its keys when
// it comes back, are untouched.
//
// The package has three parts, none of which knows about the balancer:
//
//   - Store: the records, keyed by the key's 64-bit ring hash, bounded by
//     a maximum number of keys with approximate least-recently-used
//     eviction. Lookups and refreshes of an existing record take no lock.
//   - Rule: routing rule 11 as a pure function: given a record, the
//     current ring version, the time and what the balancer knows of the
//     held upstream, hold or route as usual, and what to record after
//     serving.
//   - Codec: the signed cookie (HMAC-SHA256) that carries a hold to every
//     replica sharing the secret, and NeedSet, which decides when a
//     response should set it.
//
// On top of them, what a pool of the balancer runs: Options, the hold
// block as the config file writes it, and Compile, which turns it into
// Settings; Keeper, the store and the shared store's client (package
// share) a pool keeps across reloads; State, the hold of one snapshot of
// its ring; and Request, rule 11 for one request, which State finds the
// record for (this process's, the shared store's within rule 14's window,
// or the cookie's), decides, records after serving and writes the cookie
// of. What only the balancer knows (how the walk judges a member, where
// the ring sends a key) it passes in.
//
// Times given to Store and Rule are monotonic nanoseconds from one clock
// (see Clock); the cookie, which travels between processes, uses wall-clock
// time.
package hold
