package main

import (
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// The -io poll mode: nats.go's connections on sockets this program polls
// itself, as tickwire's lab polls its native clients' (one thread; one
// epoll_wait(0) a turn over every socket, then a read of only the
// readable ones), instead of Go's network poller. The client is
// nats.go's all the same (nats.SetCustomDialer, a public option): its
// parser, buffers, flusher and subscriptions; only the waiting is ours.
//
// Everything runs on one P (GOMAXPROCS=1): a goroutine with nothing to
// do yields (runtime.Gosched) and the next one runs, so no thread ever
// sleeps and none wakes another. Between rounds (active false) the
// waiting goroutines sleep 10 ms at a time instead of spinning, so the
// CPU is the native harness's while it measures.

// active: a round (or the set-up) runs, every goroutine spins.
var active atomic.Bool

// yield gives the P to the next goroutine (spinning), or sleeps between rounds.
func yield() {
	if active.Load() {
		runtime.Gosched()
	} else {
		time.Sleep(10 * time.Millisecond)
	}
}

type poller struct {
	epfd   int
	ready  []atomic.Bool // by connection
	events []syscall.EpollEvent
	polls  atomic.Uint64
}

func newPoller() (*poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	p := &poller{epfd: epfd, ready: make([]atomic.Bool, 1024), events: make([]syscall.EpollEvent, 64)}
	go p.run()
	return p, nil
}

// run: one epoll_wait(0) a turn, marking the readable connections.
func (p *poller) run() {
	for {
		n, err := syscall.EpollWait(p.epfd, p.events, 0)
		p.polls.Add(1)
		if err == nil {
			for _, e := range p.events[:n] {
				p.ready[e.Fd].Store(true)
			}
		}
		yield()
	}
}

// Dial is nats.CustomDialer's: a TCP connection (TCP_NODELAY, as Go's net
// sets it) on a non-blocking socket in the poller.
func (p *poller) Dial(network, address string) (net.Conn, error) {
	addr, err := net.ResolveTCPAddr(network, address)
	if err != nil {
		return nil, err
	}
	ip4 := addr.IP.To4()
	if ip4 == nil {
		return nil, errors.New("-io poll: IPv4 addresses only")
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if fd >= len(p.ready) {
		syscall.Close(fd)
		return nil, errors.New("-io poll: too many descriptors")
	}
	sa := &syscall.SockaddrInet4{Port: addr.Port}
	copy(sa.Addr[:], ip4)
	if err := syscall.Connect(fd, sa); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
	if err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	local, _ := syscall.Getsockname(fd)
	c := &pollConn{p: p, fd: fd, remote: addr}
	if l, ok := local.(*syscall.SockaddrInet4); ok {
		c.local = &net.TCPAddr{IP: net.IP(l.Addr[:]), Port: l.Port}
	}
	return c, nil
}

type pollConn struct {
	p      *poller
	fd     int
	closed atomic.Bool
	local  net.Addr
	remote net.Addr
}

func (c *pollConn) Read(b []byte) (int, error) {
	for {
		if c.closed.Load() {
			return 0, net.ErrClosed
		}
		if c.p.ready[c.fd].Load() {
			n, err := syscall.Read(c.fd, b)
			switch {
			case n > 0:
				// A TCP read shorter than asked emptied the socket: the
				// next read waits for the poller's readiness (as the
				// router's links do) instead of a read that would only
				// return EAGAIN, a system call per message.
				if n < len(b) {
					c.p.ready[c.fd].Store(false)
				}
				return n, nil
			case n == 0 && err == nil:
				return 0, io.EOF
			case err == syscall.EAGAIN:
				c.p.ready[c.fd].Store(false)
			case err == syscall.EINTR:
				continue
			default:
				return 0, err
			}
		}
		yield()
	}
}

func (c *pollConn) Write(b []byte) (int, error) {
	done := 0
	for done < len(b) {
		if c.closed.Load() {
			return done, net.ErrClosed
		}
		n, err := syscall.Write(c.fd, b[done:])
		if n > 0 {
			done += n
		}
		switch {
		case err == nil || err == syscall.EINTR:
		case err == syscall.EAGAIN:
			yield()
		default:
			return done, err
		}
	}
	return done, nil
}

func (c *pollConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	_ = syscall.EpollCtl(c.p.epfd, syscall.EPOLL_CTL_DEL, c.fd, nil)
	return syscall.Close(c.fd)
}

func (c *pollConn) LocalAddr() net.Addr  { return c.local }
func (c *pollConn) RemoteAddr() net.Addr { return c.remote }

// Deadlines: nats.go sets one around its handshake; the loopback
// handshake is bounded by the lab's own time-outs instead.
func (c *pollConn) SetDeadline(time.Time) error      { return nil }
func (c *pollConn) SetReadDeadline(time.Time) error  { return nil }
func (c *pollConn) SetWriteDeadline(time.Time) error { return nil }
