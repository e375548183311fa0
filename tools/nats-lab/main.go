// nats-lab: the load generator of `tickwire lab router --nats`, on the
// real NATS Go client (github.com/nats-io/nats.go, unmodified).
//
// It connects P publisher and S subscriber connections to a NATS server,
// each subscriber on the subject of one publisher (md.topic0000...; the
// router maps md.topic0000 to its topic md/topic0000) or, with -fanout,
// every subscriber on md.>. (-prefix nt: nt.topic0000..., the same
// length, what the lab uses so that its native clients, on md/..., and
// these never receive each other's messages.) It returns once every subscription carries
// messages (a probe from each publisher it wants), prints "ready", then
// runs rounds on command, one a line on stdin:
//
//	round RATE DURATION_NS PATH
//
// Open loop at RATE messages per second (all publishers together) for
// DURATION_NS: message i is due at t0 + i/RATE and goes from publisher
// i%P; its first 16 bytes carry the stamp of tickwire_wire::stamp
// (sequence number, then the intended send time in ns on
// CLOCK_MONOTONIC, both little-endian), the rest of the SIZE bytes zero.
// Every subscriber is an asynchronous subscription whose callback takes
// CLOCK_MONOTONIC at once. After the round (and a drain of at most 2 s for
// what is still on its way) PATH holds one record per delivery, 16 bytes:
// the intended send time then the arrival, both u64 little-endian ns; and
// a line of JSON goes to stdout:
//
//	{"sent":N,"secs":S,"received":R,"late_max_ns":L}
//
// (secs: from the first intended send time to the end of the sending;
// late_max_ns: the most a message went after its intended time). End of
// input, or "stop", closes the connections and exits.
//
// One process, one CPU: run it pinned (taskset, or the lab starts it from
// a pinned thread). How it waits, -io:
//
//   - poll (the default): as tickwire's lab drives its native clients.
//     GOMAXPROCS=1; nats.go's connections are on sockets this program
//     polls (nats.SetCustomDialer, poll.go): one goroutine does an
//     epoll_wait(0) over all of them a turn, a connection's read loop
//     reads only when its socket is readable, and every goroutine with
//     nothing to do yields (runtime.Gosched). The sending loop spins on
//     the clock, yielding while it waits and once every 16 messages when
//     behind. Nothing sleeps during a round, so nothing waits for a
//     wake-up (on this VM a 20 us timerfd wait ends about 20 us late).
//   - netpoller: Go's own network poller, as an application would be
//     built. GOMAXPROCS=2: the sending loop spins on its own P on a
//     SCHED_IDLE thread (any other thread of the process that wakes
//     preempts it), nats.go's goroutines run on the other.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"
)

// nanotime is the Go runtime's clock: CLOCK_MONOTONIC through the vDSO
// on Linux, the clock tickwire's stamps are on.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// spin: -io poll.
var spin bool

// catchUp: a sender behind schedule yields once in this many messages.
const catchUp = 16

// probe is the set-up probes' sequence number (tickwire's lab: u64::MAX - 1).
const probe = ^uint64(0) - 1

type sub struct {
	mu      sync.Mutex
	samples []uint64 // intended, arrived, ...
	seen    []bool   // probes seen, per publisher
}

type lab struct {
	pubs     []*nats.Conn
	subs     []*nats.Conn
	subjects []string
	state    []*sub
	fan      uint64
	size     int
	counting atomic.Bool
	received atomic.Uint64
}

func main() {
	url := flag.String("url", "nats://127.0.0.1:4222", "the NATS server")
	publishers := flag.Int("publishers", 10, "publisher connections, each on its own subject PREFIX.topicNNNN")
	subscribers := flag.Int("subscribers", 10, "subscriber connections (one per publisher, or any number with -fanout)")
	fanout := flag.Bool("fanout", false, "every subscriber on PREFIX.> instead of one subject each")
	prefix := flag.String("prefix", "md", "the subjects' first token: PREFIX.topic0000...")
	size := flag.Int("size", 100, "payload bytes (at least 16)")
	mode := flag.String("io", "poll", "poll: the connections' sockets polled by this program, one goroutine after another on one P; netpoller: Go's own network poller")
	flag.Parse()
	if *mode != "poll" && *mode != "netpoller" {
		fmt.Fprintln(os.Stderr, "nats-lab: -io poll or -io netpoller")
		os.Exit(2)
	}
	spin = *mode == "poll"
	if spin {
		runtime.GOMAXPROCS(1)
	} else {
		// One P for the sending goroutine, one for nats.go's (the affinity
		// of one CPU would make the default 1).
		runtime.GOMAXPROCS(2)
	}
	if err := run(*url, *prefix, *publishers, *subscribers, *fanout, *size); err != nil {
		fmt.Fprintln(os.Stderr, "nats-lab:", err)
		os.Exit(1)
	}
}

func run(url, prefix string, publishers, subscribers int, fanout bool, size int) error {
	if size < 16 || publishers < 1 || subscribers < 1 || (!fanout && publishers != subscribers) {
		return fmt.Errorf("needs -size >= 16 and one subscriber per publisher (or -fanout)")
	}
	l := &lab{size: size, fan: 1}
	if fanout {
		l.fan = uint64(subscribers)
	}
	var opts []nats.Option
	if spin {
		p, err := newPoller()
		if err != nil {
			return fmt.Errorf("epoll: %w", err)
		}
		opts = append(opts, nats.SetCustomDialer(p))
		active.Store(true)
	}
	// A PING from every connection each second: tickwire's router closes
	// a NATS connection it has heard nothing from in 10 s (its heartbeat
	// limit), and a subscriber's connection sends nothing after SUB
	// (nats.go's own PING comes every 2 minutes).
	opts = append(opts, nats.PingInterval(time.Second))
	// What the server or the client did to a connection goes to stderr:
	// a round that lost its subscribers says why.
	opts = append(opts,
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				fmt.Fprintf(os.Stderr, "nats-lab: %s disconnected: %v\n", nc.Opts.Name, err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			fmt.Fprintf(os.Stderr, "nats-lab: %s reconnected\n", nc.Opts.Name)
		}),
		nats.ErrorHandler(func(nc *nats.Conn, _ *nats.Subscription, err error) {
			fmt.Fprintf(os.Stderr, "nats-lab: %s: %v\n", nc.Opts.Name, err)
		}))
	connect := func(name string) (*nats.Conn, error) {
		return nats.Connect(url, append([]nats.Option{nats.Name(name)}, opts...)...)
	}
	for i := 0; i < publishers; i++ {
		nc, err := connect(fmt.Sprintf("lab-pub-%d", i))
		if err != nil {
			return fmt.Errorf("publisher %d: %w", i, err)
		}
		l.pubs = append(l.pubs, nc)
		l.subjects = append(l.subjects, fmt.Sprintf("%s.topic%04d", prefix, i))
	}
	for i := 0; i < subscribers; i++ {
		nc, err := connect(fmt.Sprintf("lab-sub-%d", i))
		if err != nil {
			return fmt.Errorf("subscriber %d: %w", i, err)
		}
		s := &sub{seen: make([]bool, publishers)}
		subject := prefix + ".>"
		if !fanout {
			subject = l.subjects[i]
		}
		if _, err := nc.Subscribe(subject, l.callback(s)); err != nil {
			return fmt.Errorf("subscribe %s: %w", subject, err)
		}
		if err := nc.Flush(); err != nil {
			return fmt.Errorf("subscriber %d: %w", i, err)
		}
		l.subs = append(l.subs, nc)
		l.state = append(l.state, s)
	}
	if err := l.probe(fanout); err != nil {
		return err
	}
	active.Store(false)
	if !spin {
		// The sending loop's thread: its own P, spinning at SCHED_IDLE.
		runtime.LockOSThread()
		if err := idle(); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		if f[0] == "stop" {
			break
		}
		if f[0] != "round" || len(f) != 4 {
			return fmt.Errorf("expected `round RATE DURATION_NS PATH` or `stop`, got %q", in.Text())
		}
		rate, err1 := strconv.ParseUint(f[1], 10, 64)
		dur, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || rate == 0 || dur <= 0 {
			return fmt.Errorf("bad round %q", in.Text())
		}
		res, err := l.round(rate, time.Duration(dur), f[3])
		if err != nil {
			return err
		}
		line, _ := json.Marshal(res)
		fmt.Println(string(line))
	}
	for _, nc := range append(l.pubs, l.subs...) {
		nc.Close()
	}
	return in.Err()
}

// callback is a subscription's handler: the arrival, at once.
func (l *lab) callback(s *sub) nats.MsgHandler {
	return func(m *nats.Msg) {
		now := uint64(nanotime())
		if len(m.Data) < 16 {
			return
		}
		seq := binary.LittleEndian.Uint64(m.Data)
		intended := binary.LittleEndian.Uint64(m.Data[8:])
		s.mu.Lock()
		if seq == probe {
			// A probe's time field carries its publisher's index.
			if intended < uint64(len(s.seen)) {
				s.seen[intended] = true
			}
		} else if l.counting.Load() {
			s.samples = append(s.samples, intended, now)
			l.received.Add(1)
		}
		s.mu.Unlock()
	}
}

// probe publishes a probe on every subject until every subscriber has had
// one from each publisher it wants: the server has taken every subscription.
func (l *lab) probe(fanout bool) error {
	want := 1
	if fanout {
		want = len(l.pubs)
	}
	msg := make([]byte, 16)
	deadline := time.Now().Add(10 * time.Second)
	for {
		done := true
		for _, s := range l.state {
			s.mu.Lock()
			n := 0
			for _, b := range s.seen {
				if b {
					n++
				}
			}
			s.mu.Unlock()
			done = done && n >= want
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server never delivered the set-up probes")
		}
		for i, nc := range l.pubs {
			binary.LittleEndian.PutUint64(msg, probe)
			binary.LittleEndian.PutUint64(msg[8:], uint64(i))
			if err := nc.Publish(l.subjects[i], msg); err != nil {
				return fmt.Errorf("probe %d: %w", i, err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type result struct {
	Sent      uint64  `json:"sent"`
	Secs      float64 `json:"secs"`
	Received  uint64  `json:"received"`
	LateMaxNs uint64  `json:"late_max_ns"`
}

func (l *lab) round(rate uint64, duration time.Duration, path string) (result, error) {
	for _, s := range l.state {
		s.mu.Lock()
		s.samples = s.samples[:0]
		s.mu.Unlock()
	}
	l.received.Store(0)
	l.counting.Store(true)
	if spin {
		// Every waiting goroutine spins from now on (each sleeps at most
		// 10 ms before it sees this).
		active.Store(true)
		defer active.Store(false)
		time.Sleep(20 * time.Millisecond)
	}
	msg := make([]byte, l.size)
	interval := 1e9 / float64(rate)
	t0 := nanotime() + 1_000_000
	end := t0 + int64(duration)
	var sent, lateMax uint64
	for {
		intended := t0 + int64(float64(sent)*interval)
		if intended >= end {
			break
		}
		now := nanotime()
		if now >= end+1_000_000_000 {
			// Still behind a second after the end: the rate is not
			// sustained (the achieved rate says so).
			break
		}
		for now < intended {
			if spin {
				runtime.Gosched()
			}
			now = nanotime()
		}
		if late := uint64(now - intended); late > lateMax {
			lateMax = late
		}
		binary.LittleEndian.PutUint64(msg, sent)
		binary.LittleEndian.PutUint64(msg[8:], uint64(intended))
		i := sent % uint64(len(l.pubs))
		if err := l.pubs[i].Publish(l.subjects[i], msg); err != nil {
			return result{}, fmt.Errorf("publisher %d: %w", i, err)
		}
		sent++
		if spin && sent%catchUp == 0 {
			// Behind schedule: the others get a turn every few messages.
			runtime.Gosched()
		}
	}
	res := result{Sent: sent, Secs: float64(nanotime()-t0) / 1e9, LateMaxNs: lateMax}
	drain := time.Now().Add(2 * time.Second)
	for l.received.Load() < sent*l.fan && time.Now().Before(drain) {
		if spin {
			runtime.Gosched()
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
	l.counting.Store(false)
	f, err := os.Create(path)
	if err != nil {
		return result{}, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var rec [8]byte
	for _, s := range l.state {
		s.mu.Lock()
		for _, v := range s.samples {
			binary.LittleEndian.PutUint64(rec[:], v)
			w.Write(rec[:])
		}
		res.Received += uint64(len(s.samples) / 2)
		s.mu.Unlock()
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return result{}, err
	}
	return res, f.Close()
}

// idle makes the calling thread SCHED_IDLE (sched_setattr): any other
// thread of the process that wakes on the same CPU preempts it at once.
func idle() error {
	attr := [12]uint32{48, schedIdle} // struct sched_attr: size, policy, the rest 0
	if _, _, e := syscall.RawSyscall(sysSchedSetattr, 0, uintptr(unsafe.Pointer(&attr)), 0); e != 0 {
		return fmt.Errorf("sched_setattr(SCHED_IDLE): %w", e)
	}
	return nil
}

const (
	schedIdle       = 5
	sysSchedSetattr = 314 // x86-64
)
