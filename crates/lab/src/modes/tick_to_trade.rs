//! Tick-to-trade (the method of paper 004): a harness sends 64-byte UDP
//! "ticks"; the system under test (a worker pinned to the other CPU) receives
//! each, does minimal work, and sends a 400-byte TCP "order" on a connection
//! to the harness. The harness measures tick -> order with kernel software
//! timestamps (`SO_TIMESTAMPING`: the tick's TX timestamp from the socket
//! error queue, the order's RX timestamp from the receive control message;
//! both CLOCK_REALTIME in the kernel) and, side by side, with user-space
//! clock reads around its own send and receive. No NIC here offers hardware
//! timestamps; if one did, the same control messages carry them.

use crate::base::common::parse_size;
use crate::base::host::machine::Machine;
use crate::base::output::print::Common;
use crate::base::output::report::{histogram, LatencyRow};
use crate::base::output::Measured;
use crate::{LabError, WorkerProcess};
use hdrhistogram::Histogram;
use nix::sys::socket::{
    recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage, TimestampingFlag,
};
use nix::sys::time::TimeSpec;
use std::io::{ErrorKind, IoSliceMut, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};
use tickwire_agent::pin_current_thread;

/// A tick-to-trade run.
#[derive(Debug, Clone, clap::Args)]
pub struct TickToTrade {
    #[command(flatten)]
    pub common: Common,
    /// Ticks measured.
    #[arg(long, default_value_t = 25_000)]
    pub runs: u64,
    /// Ticks before measuring.
    #[arg(long, default_value_t = 1_000)]
    pub warmup: u64,
    /// Tick size (UDP payload).
    #[arg(long, default_value = "64", value_parser = parse_size)]
    pub tick_size: usize,
    /// Order size (TCP payload).
    #[arg(long, default_value = "400", value_parser = parse_size)]
    pub order_size: usize,
    /// Write an SVG plot of the percentile distributions.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Also write the histograms as an HdrHistogram interval log.
    #[arg(long)]
    pub hlog: Option<PathBuf>,
    /// Where the floor measured beside it puts its files.
    #[arg(skip)]
    pub dir: PathBuf,
}

const TIMEOUT: Duration = Duration::from_secs(10);

fn io(what: &str, e: impl std::fmt::Display) -> LabError {
    LabError::Worker(format!("{what}: {e}"))
}

fn ns(t: &TimeSpec) -> i128 {
    i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec())
}

/// A timestamp from SO_TIMESTAMPING: the NIC's (raw hardware) if it gave
/// one, else the kernel's software one. Returns (ns, was_hardware).
fn pick(ts: &nix::sys::socket::Timestamps) -> (i128, bool) {
    let hw = ns(&ts.hw_raw);
    if hw != 0 {
        (hw, true)
    } else {
        (ns(&ts.system), false)
    }
}

/// The TX timestamp of datagram `id` (counted from 0 by the kernel,
/// `SOF_TIMESTAMPING_OPT_ID`), from the error queue: older entries left
/// there (a stamp that came late) are read past, so a stamp is never
/// paired with another tick's.
fn tx_timestamp(sock: &UdpSocket, id: u64) -> Result<Option<(i128, bool)>, LabError> {
    let start = Instant::now();
    loop {
        let mut data = [0u8; 256];
        let mut iov = [IoSliceMut::new(&mut data)];
        let mut cmsg = nix::cmsg_space!([TimeSpec; 3], nix::libc::sock_extended_err, nix::libc::sockaddr_storage);
        match recvmsg::<SockaddrStorage>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::MSG_ERRQUEUE) {
            Ok(msg) => {
                let (mut stamp, mut of) = (None, None);
                for c in msg.cmsgs().map_err(|e| io("cmsgs", e))? {
                    match c {
                        ControlMessageOwned::ScmTimestampsns(ts) => stamp = Some(pick(&ts)),
                        ControlMessageOwned::Ipv4RecvErr(e, _) => of = Some(u64::from(e.ee_data)),
                        _ => {}
                    }
                }
                // The id is 32 bits in the kernel.
                match of.map(|o| o.cmp(&(id & u64::from(u32::MAX)))) {
                    Some(std::cmp::Ordering::Less) => continue,
                    Some(std::cmp::Ordering::Greater) => return Ok(None),
                    _ => return Ok(stamp),
                }
            }
            Err(nix::errno::Errno::EAGAIN) if start.elapsed() < Duration::from_millis(100) => std::hint::spin_loop(),
            Err(nix::errno::Errno::EAGAIN) => return Ok(None),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(io("error queue", e)),
        }
    }
}

/// How long warm-up may go on waiting for the kernel's first receive
/// timestamp.
const STAMPS_WAIT: Duration = Duration::from_secs(2);

/// Reads one whole order; returns the RX timestamp of the segment that
/// completed it, if the kernel gave one.
fn read_order(s: &TcpStream, buf: &mut [u8]) -> Result<Option<(i128, bool)>, LabError> {
    let mut got = 0;
    let mut ts = None;
    let start = Instant::now();
    while got < buf.len() {
        let mut cmsg = nix::cmsg_space!([TimeSpec; 3]);
        let mut iov = [IoSliceMut::new(&mut buf[got..])];
        match recvmsg::<SockaddrStorage>(s.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::MSG_DONTWAIT) {
            Ok(msg) if msg.bytes == 0 => {
                return Err(LabError::Worker("system under test closed the connection".into()))
            }
            Ok(msg) => {
                got += msg.bytes;
                for c in msg.cmsgs().map_err(|e| io("cmsgs", e))? {
                    if let ControlMessageOwned::ScmTimestampsns(t) = c {
                        ts = Some(pick(&t));
                    }
                }
            }
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {
                if start.elapsed() > TIMEOUT {
                    return Err(LabError::Timeout("no order".into()));
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(io("recvmsg", e)),
        }
    }
    Ok(ts)
}

/// Runs the harness; returns (kernel-timestamp intervals if available,
/// user-space intervals).
///
/// # Errors
/// Socket errors, or a system under test that stops answering.
pub fn run(o: &TickToTrade, machine: &Machine) -> Result<(Option<Measured>, Measured), LabError> {
    if o.tick_size < 8 || o.order_size < 8 {
        return Err(LabError::Usage("tick and order sizes must be at least 8".into()));
    }
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| io("bind", e))?;
    let gateway = listener.local_addr().map_err(|e| io("addr", e))?;
    let mut sut = WorkerProcess::spawn(&TickToTradeSut {
        gateway,
        cpu: o.common.cpus.remote,
        tick_size: o.tick_size,
        order_size: o.order_size,
    })?;
    let feed: SocketAddr = sut.read_listening()?;
    listener.set_nonblocking(true).map_err(|e| io("nonblocking", e))?;
    let start = Instant::now();
    let orders = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock && start.elapsed() < TIMEOUT => {
                std::thread::sleep(Duration::from_micros(100));
            }
            Err(e) => return Err(io("accept", e)),
        }
    };
    orders.set_nodelay(true).map_err(|e| io("nodelay", e))?;
    let ticks = UdpSocket::bind("127.0.0.1:0").map_err(|e| io("bind", e))?;
    // Ask for hardware timestamps too: used when the NIC gives them (never
    // on loopback), software ones otherwise.
    let hw = TimestampingFlag::SOF_TIMESTAMPING_RAW_HARDWARE;
    let tx = TimestampingFlag::SOF_TIMESTAMPING_TX_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_OPT_TSONLY
        | TimestampingFlag::SOF_TIMESTAMPING_OPT_ID;
    let rx = TimestampingFlag::SOF_TIMESTAMPING_RX_SOFTWARE | TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE;
    let set = |sock: &dyn std::os::fd::AsFd, flags: TimestampingFlag, hw_flags: TimestampingFlag| {
        setsockopt(&sock.as_fd(), sockopt::Timestamping, &(flags | hw | hw_flags)).is_ok()
            || setsockopt(&sock.as_fd(), sockopt::Timestamping, &flags).is_ok()
    };
    let kernel_ts = set(&ticks, tx, TimestampingFlag::SOF_TIMESTAMPING_TX_HARDWARE)
        && set(&orders, rx, TimestampingFlag::SOF_TIMESTAMPING_RX_HARDWARE);
    let mut hardware_used = false;
    pin_current_thread(o.common.cpus.local)?;
    let (mut hk, mut hu) = (histogram(), histogram());
    let mut tick = vec![0u8; o.tick_size];
    let mut order = vec![0u8; o.order_size];
    let mut kernel_missing = 0u64;
    let wall = SystemTime::now();
    let t_all = Instant::now();
    // The kernel turns its receive timestamps on lazily (a static key
    // flipped from a work queue once a socket asks), so the first orders
    // may carry none: warm-up goes on until one does, for at most
    // STAMPS_WAIT, and only then are runs counted.
    let (mut measured, mut i, mut stamped) = (0u64, 0u64, !kernel_ts);
    let warm_until = Instant::now() + STAMPS_WAIT;
    while measured < o.runs {
        tick[..8].copy_from_slice(&i.to_le_bytes());
        let u0 = Instant::now();
        ticks.send_to(&tick, feed).map_err(|e| io("tick", e))?;
        let rx_ts = read_order(&orders, &mut order)?;
        let user = u0.elapsed().as_nanos() as u64;
        if order[..8] != i.to_le_bytes() {
            return Err(LabError::Worker("the order does not answer the tick".into()));
        }
        let tx_ts = if kernel_ts { tx_timestamp(&ticks, i)? } else { None };
        i += 1;
        stamped |= tx_ts.is_some() && rx_ts.is_some();
        if i <= o.warmup || (!stamped && Instant::now() < warm_until) {
            continue;
        }
        measured += 1;
        hu.saturating_record(user);
        match (tx_ts, rx_ts) {
            // Both from the same source: two hardware or two software stamps.
            (Some((a, ha)), Some((b, hb))) if b > a && ha == hb => {
                hardware_used |= ha;
                hk.saturating_record((b - a) as u64);
            }
            _ => kernel_missing += 1,
        }
    }
    let elapsed = t_all.elapsed();
    ticks.send_to(&[0u8], feed).map_err(|e| io("stop", e))?;
    sut.finish(TIMEOUT)?;
    let row = |h: &Histogram<u64>, probe: &str, clock: &str| {
        let mut r = LatencyRow::from_histogram("tick-to-trade", "udp-tcp", o.tick_size, h);
        r.probe = Some(probe.into());
        r.clock = clock.into();
        r.cpus = o.common.cpus.to_string();
        r.machine = machine.summary();
        r.achieved_rate = Some((h.len() as f64 / elapsed.as_secs_f64().max(1e-9)).round());
        r
    };
    let user = Measured {
        row: row(&hu, "user-space", "Instant::now() before the tick's sendto and after the order's last recvmsg"),
        hist: hu,
        start: wall,
        elapsed,
    };
    let kernel = (kernel_ts && !hk.is_empty()).then(|| {
        let mut r = if hardware_used {
            row(&hk, "nic-hw-timestamps", "SO_TIMESTAMPING raw hardware (NIC clock): tick TX to order RX")
        } else {
            row(
                &hk,
                "kernel-sw-timestamps",
                "SO_TIMESTAMPING software: tick TX (error queue) to order RX (control message), CLOCK_REALTIME",
            )
        };
        r.lost = kernel_missing;
        Measured { row: r, hist: hk, start: wall, elapsed }
    });
    Ok((kernel, user))
}

/// Worker job [`TickToTradeSut`]. Binds the feed
/// (prints `listening ADDR`), connects to the order gateway, and answers each
/// tick with an order until a 1-byte tick arrives.
pub(crate) fn sut(gateway: SocketAddr, cpu: usize, tick_size: usize, order_size: usize) -> Result<String, LabError> {
    let feed = UdpSocket::bind("127.0.0.1:0").map_err(|e| io("bind", e))?;
    println!("listening {}", feed.local_addr().map_err(|e| io("addr", e))?);
    let mut orders = TcpStream::connect_timeout(&gateway, TIMEOUT).map_err(|e| io("connect", e))?;
    orders.set_nodelay(true).map_err(|e| io("nodelay", e))?;
    feed.set_nonblocking(true).map_err(|e| io("nonblocking", e))?;
    pin_current_thread(cpu)?;
    let mut tick = vec![0u8; tick_size + 1];
    let mut order = vec![0u8; order_size];
    order[8..12].copy_from_slice(b"BUY ");
    let mut idle_since = Instant::now();
    loop {
        match feed.recv_from(&mut tick) {
            Ok((1, _)) => return Ok("done".into()),
            Ok((n, _)) if n >= 8 => {
                // Minimal work: the order echoes the tick's sequence number.
                order[..8].copy_from_slice(&tick[..8]);
                orders.write_all(&order).map_err(|e| io("order", e))?;
                idle_since = Instant::now();
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                if idle_since.elapsed() > Duration::from_secs(30) {
                    return Err(LabError::Timeout("no tick for 30 s".into()));
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(io("feed", e)),
        }
    }
}

/// Worker job: the system under test of tick-to-trade: a UDP tick in, a TCP order out to `gateway`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct TickToTradeSut {
    pub gateway: SocketAddr,
    pub cpu: usize,
    pub tick_size: usize,
    pub order_size: usize,
}

impl crate::base::worker::Job for TickToTradeSut {
    const ROLE: &'static str = "tick-to-trade-sut";

    fn run(self) -> Result<String, LabError> {
        sut(self.gateway, self.cpu, self.tick_size, self.order_size)
    }
}
