package hold

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlb/ringlb/balancer/hold/share"
	"github.com/ringlb/ringlb/ring"
)

// ExpireEvery is how often the expiry pass walks the store a little
// (Store.Expire), so that ringlb_hold_keys follows the keys going idle
// when traffic is low.
const ExpireEvery = time.Second

// Keeper is what a pool's hold keeps across reloads: the one store of its
// records with its expiry pass, the shared store's client (kept, with its
// queue, while its options stay), when each key was last written there,
// and the counters that outlive them. Install, Keep and Close are called
// by one goroutine at a time; the rest is safe for concurrent use.
type Keeper struct {
	// Prefix is added to the shared store's prefix: pools are
	// independent, each writes its own records, also when several share
	// one server and prefix. Log receives the client's lines. Now and
	// AfterFunc are the balancer's clock: the records' times (monotonic
	// nanoseconds) and the expiry pass's timer. All are set before the
	// first Install.
	Prefix    string
	Log       *slog.Logger
	Now       func() int64
	AfterFunc func(d time.Duration, f func()) Timer
	// Held is ringlb_held_total: the requests held elsewhere than the
	// ring would send them. Counts are the shared store's
	// (ringlb_hold_share_*).
	Held   atomic.Uint64
	Counts share.Counters

	store   atomic.Pointer[Store]
	client  atomic.Pointer[share.Client]
	opts    share.Options // what client was made from
	written *Written
	mu      sync.Mutex // serialises the expiry pass with Install and Close
	timer   Timer      // the expiry pass's; nil when none runs
}

// Timer is the expiry pass's timer, set by Keeper.AfterFunc.
type Timer interface {
	Stop() bool
}

// State is the hold of one snapshot of a pool: its settings, the pool's
// store, the ring version records are made under and the members by
// name. With share on (rule 14) it also has the client, the names a
// record read from it may carry (the members), and the window in which
// keys without a record of this process are looked up in the store (see
// window), which the snapshots of one ring version share.
type State struct {
	Settings
	Store   *Store
	Current Version        // the ring's version
	Index   map[string]int // member name → index in the snapshot

	share   *share.Client
	members *share.Members
	window  *atomic.Pointer[window]
	written *Written
}

// Install returns the hold of a snapshot about to be installed (nil when
// hs turns hold off), whose ring is r; prev is the hold of the snapshot it
// replaces (nil for none). The store stays across reloads: a new one when
// hold is turned on; when max_keys changes, one of the new size with the
// records carried over (what requests still on the previous snapshot
// record meanwhile goes to the old store and is lost). The expiry pass
// runs while hold is on.
func (k *Keeper) Install(hs Settings, r *ring.Ring, prev *State) *State {
	now := k.Now()
	k.installShare(hs)
	k.mu.Lock()
	defer k.mu.Unlock()
	if hs.Rule.Idle <= 0 {
		k.store.Store(nil)
		k.stopTimer()
		return nil
	}
	st := k.store.Load()
	switch {
	case st == nil:
		st = NewStore(StoreOptions{MaxKeys: hs.MaxKeys, Idle: hs.Rule.Idle})
	case st.MaxKeys() != hs.MaxKeys:
		ns := NewStore(StoreOptions{MaxKeys: hs.MaxKeys, Idle: hs.Rule.Idle})
		st.Range(now, func(h uint64, rec Rec) bool {
			ns.Record(h, rec.Upstream, rec.Version, rec.LastUse)
			return true
		})
		st = ns
	default:
		st.SetIdle(hs.Rule.Idle)
	}
	k.store.Store(st)
	if k.timer == nil {
		k.timer = k.AfterFunc(ExpireEvery, k.expire)
	}
	s := &State{Settings: hs, Store: st, Current: VersionOf(r.Version()), Index: make(map[string]int, r.Len())}
	names := make([]string, r.Len())
	for i, m := range r.Members() {
		s.Index[m.Name], names[i] = i, m.Name
	}
	if c := k.client.Load(); c != nil {
		s.share, s.written, s.members = c, k.written, share.NewMembers(names)
		if prev != nil && prev.share == c && prev.Current == s.Current {
			s.window = prev.window
		} else {
			s.window = new(atomic.Pointer[window])
			s.window.Store(newWindow(now, hs.MaxKeys))
		}
	}
	return s
}

// installShare keeps, starts or stops the shared store's client for the
// settings about to be installed: a reload that keeps the share options
// keeps the client and its queue.
func (k *Keeper) installShare(hs Settings) {
	want := hs.Share
	if hs.Rule.Idle <= 0 {
		want = share.Options{}
	}
	c := k.client.Load()
	if c != nil && (want.Redis == "" || !k.opts.Same(want)) {
		k.client.Store(nil)
		c.Close()
		c = nil
	}
	if want.Redis == "" || c != nil {
		return
	}
	opts := want
	opts.Prefix += k.Prefix
	opts.Logger = k.Log
	opts.Counters = &k.Counts
	c, err := share.New(opts)
	if err != nil { // Compile checked the options
		k.Log.Error("hold share: not started", "err", err)
		return
	}
	k.client.Store(c)
	k.opts = want
	if k.written == nil {
		k.written = NewWritten(hs.MaxKeys)
	}
}

// Keep forgets, once s is installed (nil: hold off), the records of
// every upstream that is not a member of it (the previous snapshot's
// members that s has not, and any other name recorded meanwhile by
// requests that began on an older snapshot): removing an upstream sends
// its keys along the ring at once, and the store's table of names holds
// the members only (and those dropped lately).
func (k *Keeper) Keep(s *State) {
	if st := k.store.Load(); st != nil && s != nil {
		st.Keep(func(name string) bool { _, ok := s.Index[name]; return ok }, k.Now())
	}
}

// expire walks the store a little and sets the timer again, until hold
// is turned off or the Keeper closed.
func (k *Keeper) expire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.store.Load()
	if st == nil || k.timer == nil {
		return
	}
	st.Expire(k.Now(), 64)
	k.timer = k.AfterFunc(ExpireEvery, k.expire)
}

// stopTimer stops the expiry pass. Callers hold k.mu.
func (k *Keeper) stopTimer() {
	if k.timer != nil {
		k.timer.Stop()
		k.timer = nil
	}
}

// Store returns the pool's records; nil while hold is off.
func (k *Keeper) Store() *Store { return k.store.Load() }

// CountByUpstream counts the live records by upstream now (see
// Store.CountByUpstream); nil while hold is off.
func (k *Keeper) CountByUpstream() map[string]int {
	st := k.store.Load()
	if st == nil {
		return nil
	}
	return st.CountByUpstream(k.Now())
}

// Close stops the expiry pass and the shared store's client, which
// writes what it has queued first.
func (k *Keeper) Close() {
	k.mu.Lock()
	k.stopTimer()
	k.mu.Unlock()
	if c := k.client.Swap(nil); c != nil {
		c.Close()
	}
}

// Status is the hold block in force, for the status page; its zero value:
// hold off.
type Status struct {
	On      bool
	Idle    time.Duration
	MaxKeys int
	Cookie  string // the hold cookie's name; "" for none
	Share   share.Status
}

// Status returns the hold in force in a snapshot whose hold is s (nil:
// off), with the shared store's state.
func (k *Keeper) Status(s *State) Status {
	if s == nil {
		return Status{}
	}
	st := Status{On: true, Idle: s.Rule.Idle, MaxKeys: s.MaxKeys, Cookie: s.Cookie}
	if c := k.client.Load(); c != nil {
		st.Share = c.Status()
	}
	return st
}
