//! The far side of each measurement: a separate process started as
//! `tickwire lab worker ROLE`, where ROLE is a [`Role`] serialized as one
//! JSON argument. Each role pins itself, does its part, may print lines the
//! measuring side reads while it runs (`listening ADDR`), and prints one
//! result line last.

use crate::modes::network;
use crate::transports::sockets::{Proto, Wait};
use crate::LabError;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a worker waits for a silent peer before giving up.
pub(crate) const IDLE_LIMIT: Duration = Duration::from_secs(30);

/// What a worker process does, with everything it needs to do it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Role {
    /// Answers each cache-line ping (floor).
    Cacheline { path: PathBuf, cpu: usize },
    /// Echoes raw-ring messages from `ping` to `pong` (floor).
    RingPong { ping: PathBuf, pong: PathBuf, cpu: usize },
    /// Counts a raw-ring stream (floor throughput).
    RingSink { path: PathBuf, cpu: usize },
    /// Reads a stream of cache lines (the line-transfer limit).
    LineSink { path: PathBuf, cpu: usize, batch: u64 },
    /// Records one-way latency of an open-loop raw-ring stream (the
    /// open-loop floor); the sender's pauses arrive in `pauses`.
    RingOnewaySink { path: PathBuf, cpu: usize, expected: u64, pauses: PathBuf },
    /// Reflects one message in `every` of a raw-ring stream onto `back`
    /// (the rate sweep's open-loop floor); its pauses go to `pauses`.
    RingReflect { stream: PathBuf, back: PathBuf, cpu: usize, every: u64, pauses: PathBuf },
    /// Echoes IPC pings on the channel's pong stream.
    IpcPong { dir: PathBuf, channel: String, cpu: usize, capacity: usize, wait: Wait },
    /// Counts an IPC stream (throughput).
    IpcSink { dir: PathBuf, channel: String, cpu: usize },
    /// Receives an IPC stream and reflects one message in `every` (rate sweep).
    Reflect { dir: PathBuf, channel: String, cpu: usize, every: u64, capacity: usize, pauses: PathBuf },
    /// Subscribes `subscribers` times to each of `publishers` streams and
    /// records one-way latency; the stall is a test hook.
    OnewaySink {
        dir: PathBuf,
        channel: String,
        cpu: usize,
        publishers: usize,
        subscribers: usize,
        stall_every: u64,
        stall_for: Duration,
        /// Messages expected (sample buffer size).
        expected: u64,
        /// Where the publisher leaves its pauses.
        pauses: PathBuf,
    },
    /// Echoes over a kernel UDP or TCP socket bound to `addr`.
    SockPong { proto: Proto, addr: String, cpu: usize, wait: Wait, size: usize },
    /// The ping side over a kernel socket (inside a namespace); prints its histogram.
    SockPing {
        proto: Proto,
        peer: SocketAddr,
        cpu: usize,
        wait: Wait,
        size: usize,
        count: u64,
        warmup: u64,
        limit: Option<Duration>,
    },
    /// Echoes reliable-UDP pings, bound at `host`, back to `back`.
    RudpPong { host: std::net::Ipv4Addr, back: std::net::SocketAddrV4, cpu: usize, params: String },
    /// The ping side of reliable UDP at `host` (in a namespace), its pong at
    /// `far` in `far_netns`; prints its histogram.
    RudpPing {
        host: std::net::Ipv4Addr,
        far: std::net::Ipv4Addr,
        far_netns: String,
        size: usize,
        count: u64,
        warmup: u64,
        cpu: usize,
        far_cpu: usize,
        limit: Option<Duration>,
        params: String,
    },
    /// Echoes datagrams over AF_XDP (`xdp` mode) or kernel UDP (`None`).
    XdpPong { addr: String, cpu: usize, xdp: Option<String> },
    /// The ping side of [`Role::XdpPong`]; prints its histogram.
    XdpPing {
        local: std::net::Ipv4Addr,
        peer: std::net::SocketAddrV4,
        cpu: usize,
        size: usize,
        count: u64,
        warmup: u64,
        limit: Option<Duration>,
        xdp: Option<String>,
    },
    /// Sends 32-datagram batches over AF_XDP or kernel UDP for `duration`.
    XdpBlast {
        local: std::net::Ipv4Addr,
        peer: std::net::SocketAddrV4,
        cpu: usize,
        size: usize,
        duration: Duration,
        xdp: Option<String>,
    },
    /// Counts [`Role::XdpBlast`]'s datagrams.
    XdpSink { addr: String, cpu: usize, xdp: Option<String> },
    /// Sends reliable UDP as fast as flow control allows for `duration`.
    RudpBlast { port: u16, cpu: usize, size: usize, duration: Duration, params: String },
    /// Sends plain UDP datagrams packed as reliable UDP's would, as fast as
    /// the socket takes them (reliable UDP's throughput floor).
    UdpBlast { port: u16, cpu: usize, size: usize, duration: Duration },
    /// The sending end of `lab transfer`.
    RudpSend { dir: PathBuf, uri: String, bytes: u64, max_size: usize, seed: u64, receivers: usize, timeout: Duration },
    /// A receiving end of `lab transfer`.
    RudpRecv { dir: PathBuf, uri: String },
    /// Receives an open-loop stream over the network (one-way: records
    /// latency; sweep: reflects one message in N).
    NetSink(network::SinkSpec),
    /// Sends an open-loop stream over the network (sweep: and receives the
    /// reflections).
    NetSource(network::SourceSpec),
    /// The router under test of `lab router`, steered by lines on its stdin.
    RouterHost(crate::modes::router::host::HostSpec),
    /// `lab cluster`'s measuring side, in the hub namespace.
    Cluster(Box<crate::modes::router::cluster::ClusterSpec>),
    /// `lab cluster`'s floor: a TCP forwarder in a router's namespace.
    Relay(crate::modes::router::relay::RelaySpec),
    /// The system under test of tick-to-trade: a UDP tick in, a TCP order out to `gateway`.
    TickToTradeSut { gateway: SocketAddr, cpu: usize, tick_size: usize, order_size: usize },
}

impl Role {
    /// Parses the worker's one argument.
    ///
    /// # Errors
    /// [`LabError::Usage`] naming what was wrong with it.
    pub fn from_arg(arg: &str) -> Result<Self, LabError> {
        serde_json::from_str(arg).map_err(|e| LabError::Usage(format!("worker: bad role {arg:?}: {e}")))
    }

    /// The one argument that carries this role.
    pub fn to_arg(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Runs the role; returns the result line to print.
    ///
    /// # Errors
    /// Set-up failures, or a peer silent for 30 s.
    pub fn run(self) -> Result<String, LabError> {
        use crate::modes::{oneway, sweep, tick_to_trade, transfer};
        use crate::transports::{floor, ipc, line_limit, rudp, sockets, xdp};
        match self {
            Role::Cacheline { path, cpu } => floor::cacheline_worker(&path, cpu),
            Role::RingPong { ping, pong, cpu } => floor::ring_pong(&ping, &pong, cpu),
            Role::RingSink { path, cpu } => floor::ring_sink(&path, cpu),
            Role::LineSink { path, cpu, batch } => line_limit::line_sink(&path, cpu, batch),
            Role::RingOnewaySink { path, cpu, expected, pauses } => {
                floor::ring_oneway_sink(&path, cpu, expected, &pauses)
            }
            Role::RingReflect { stream, back, cpu, every, pauses } => {
                floor::ring_reflect(&stream, &back, cpu, every.max(1), &pauses)
            }
            Role::IpcPong { dir, channel, cpu, capacity, wait } => ipc::ipc_pong(&dir, &channel, cpu, capacity, wait),
            Role::IpcSink { dir, channel, cpu } => ipc::ipc_sink(&dir, &channel, cpu),
            Role::Reflect { dir, channel, cpu, every, capacity, pauses } => {
                sweep::reflect(&dir, &channel, cpu, every.max(1), capacity, &pauses)
            }
            Role::OnewaySink {
                dir,
                channel,
                cpu,
                publishers,
                subscribers,
                stall_every,
                stall_for,
                expected,
                pauses,
            } => {
                let stall = (stall_every > 0).then_some((stall_every, stall_for));
                oneway::sink(&dir, &channel, cpu, (publishers, subscribers), stall, expected, &pauses)
            }
            Role::SockPong { proto, addr, cpu, wait, size } => sockets::pong(proto, &addr, cpu, wait, size),
            Role::SockPing { proto, peer, cpu, wait, size, count, warmup, limit } => {
                let h = sockets::ping_loop(proto, peer, wait, size, count, warmup, cpu, limit)?;
                Ok(crate::output::encode_histogram(&h))
            }
            Role::RudpPong { host, back, cpu, params } => rudp::pong(host, back, cpu, &params),
            Role::RudpPing { host, far, far_netns, size, count, warmup, cpu, far_cpu, limit, params } => {
                let cpus = crate::Cpus { local: cpu, remote: far_cpu };
                let h = rudp::ping(host, far, Some(&far_netns), size, count, warmup, cpus, limit, &params)?;
                Ok(crate::output::encode_histogram(&h))
            }
            Role::XdpPong { addr, cpu, xdp: x } => xdp::pong(&addr, cpu, x.as_deref()),
            Role::XdpPing { local, peer, cpu, size, count, warmup, limit, xdp: x } => {
                xdp::ping(local, peer, cpu, size, count, warmup, limit, x.as_deref())
            }
            Role::XdpBlast { local, peer, cpu, size, duration, xdp: x } => {
                xdp::blast(local, peer, cpu, size, duration, x.as_deref())
            }
            Role::XdpSink { addr, cpu, xdp: x } => xdp::sink(&addr, cpu, x.as_deref()),
            Role::RudpBlast { port, cpu, size, duration, params } => rudp::blast(port, cpu, size, duration, &params),
            Role::UdpBlast { port, cpu, size, duration } => rudp::raw_blast(port, cpu, size, duration),
            Role::RudpSend { dir, uri, bytes, max_size, seed, receivers, timeout } => {
                transfer::sender(&dir, &uri, bytes, max_size, seed, receivers, timeout)
            }
            Role::RudpRecv { dir, uri } => transfer::receiver(&dir, &uri),
            Role::NetSink(spec) => network::sink(&spec),
            Role::NetSource(spec) => network::source(&spec),
            Role::RouterHost(spec) => crate::modes::router::host::serve(&spec),
            Role::Cluster(spec) => crate::modes::router::cluster::measure(&spec),
            Role::Relay(spec) => crate::modes::router::relay::relay(&spec),
            Role::TickToTradeSut { gateway, cpu, tick_size, order_size } => {
                tick_to_trade::sut(gateway, cpu, tick_size, order_size)
            }
        }
    }
}

/// Parses a worker's JSON result line (`what` names the worker in the error).
///
/// # Errors
/// [`LabError::Worker`] quoting the line.
pub(crate) fn parse_report<T: serde::de::DeserializeOwned>(what: &str, line: &str) -> Result<T, LabError> {
    serde_json::from_str(line).map_err(|e| LabError::Worker(format!("bad {what} output {line:?}: {e}")))
}

/// In a worker: reads the line the measuring side sends with
/// [`WorkerProcess::write_line`] and takes what follows `prefix`.
///
/// # Errors
/// [`LabError::Worker`] if stdin closes first or the line is not `prefix ...`.
pub(crate) fn read_stdin_line(prefix: &str) -> Result<String, LabError> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    line.trim()
        .strip_prefix(prefix)
        .map(|v| v.trim().to_owned())
        .ok_or_else(|| LabError::Worker(format!("expected {prefix:?} on stdin, got {:?}", line.trim())))
}

/// A worker process killed on drop unless it exited.
#[derive(Debug)]
#[must_use = "the worker is killed when this is dropped"]
pub struct WorkerProcess {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: Option<std::io::BufReader<std::process::ChildStdout>>,
}

impl WorkerProcess {
    /// Starts `tickwire lab worker ROLE` from the current executable (or
    /// `$TICKWIRE_EXE`).
    ///
    /// # Errors
    /// If the executable cannot be spawned.
    pub fn spawn(role: &Role) -> Result<Self, LabError> {
        Self::spawn_in(None, role)
    }

    /// Starts the worker inside network namespace `netns` (`ip netns exec`).
    ///
    /// # Errors
    /// If the executable cannot be spawned.
    pub fn spawn_in(netns: Option<&str>, role: &Role) -> Result<Self, LabError> {
        let exe =
            std::env::var_os("TICKWIRE_EXE").map(std::path::PathBuf::from).map_or_else(std::env::current_exe, Ok)?;
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let mut child = cmd
            .arg("lab")
            .arg("worker")
            .arg(role.to_arg())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(std::io::BufReader::new);
        Ok(Self { child, stdin, stdout })
    }

    /// Tells the running worker one more thing (a line on its stdin, read
    /// with [`read_stdin_line`]), e.g. an address known only now.
    ///
    /// # Errors
    /// [`LabError::Worker`] if the worker is gone.
    pub fn write_line(&mut self, line: &str) -> Result<(), LabError> {
        use std::io::Write;
        let stdin = self.stdin.as_mut().ok_or_else(|| LabError::Worker("stdin already closed".into()))?;
        writeln!(stdin, "{line}").and_then(|()| stdin.flush()).map_err(|e| LabError::Worker(format!("stdin: {e}")))
    }

    /// Reads one line the worker printed (e.g. the port it bound), waiting
    /// at most until the worker exits.
    ///
    /// # Errors
    /// [`LabError::Worker`] if the worker exited without printing one.
    pub fn read_line(&mut self) -> Result<String, LabError> {
        use std::io::BufRead;
        let mut line = String::new();
        let n = self.stdout.as_mut().map_or(Ok(0), |s| s.read_line(&mut line))?;
        if n == 0 {
            return Err(LabError::Worker("exited before reporting".into()));
        }
        Ok(line.trim().to_owned())
    }

    /// Reads the worker's `listening ADDR` line and parses ADDR.
    ///
    /// # Errors
    /// [`LabError::Worker`] if the line is missing or malformed.
    pub fn read_listening<T: std::str::FromStr>(&mut self) -> Result<T, LabError> {
        let line = self.read_line()?;
        line.strip_prefix("listening ")
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| LabError::Worker(format!("unexpected worker output {line:?}")))
    }

    /// Waits for the worker to exit (bounded by `timeout`) and returns the
    /// last line it printed.
    ///
    /// # Errors
    /// [`LabError::Timeout`] or [`LabError::Worker`] if it failed.
    pub fn finish(mut self, timeout: Duration) -> Result<String, LabError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                let mut out = String::new();
                if let Some(mut s) = self.stdout.take() {
                    use std::io::Read;
                    s.read_to_string(&mut out)?;
                }
                if !status.success() {
                    return Err(LabError::Worker(format!("exited with {status}")));
                }
                return Ok(out.lines().last().unwrap_or("").to_owned());
            }
            if Instant::now() > deadline {
                return Err(LabError::Timeout("worker did not exit".into()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_round_trips_through_its_argument_and_bad_ones_are_named() {
        let r = Role::RudpBlast {
            port: 9,
            cpu: 1,
            size: 64,
            duration: Duration::from_millis(250),
            params: "loss=0.1".into(),
        };
        assert_eq!(Role::from_arg(&r.to_arg()).unwrap(), r);
        let r = Role::NetSink(network::SinkSpec {
            transport: crate::transports::Transport::Rudp,
            bind: "127.0.0.1:0".parse().unwrap(),
            cpu: 1,
            size: 64,
            reflect_every: 100,
            expected: 1000,
            pauses: "/tmp/p".into(),
            params: String::new(),
        });
        assert_eq!(Role::from_arg(&r.to_arg()).unwrap(), r);
        let e = Role::from_arg(r#"{"role":"ring-sink","path":"/x"}"#).unwrap_err().to_string();
        assert!(e.contains("cpu"), "{e}");
        let e = Role::from_arg(r#"{"role":"nope"}"#).unwrap_err().to_string();
        assert!(e.contains("nope"), "{e}");
    }
}
