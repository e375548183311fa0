//! From a [`ChannelUri`] to protocol and transport settings.
//!
//! | key | default (unicast / multicast) | meaning |
//! |---|---|---|
//! | `interface` | 0.0.0.0 | local address to join and send multicast on |
//! | `mtu` | 1408 | largest datagram; small messages are batched up to it |
//! | `window` | 1MiB | receiver window (reorder buffer and flow-control grant) |
//! | `retention` | 16MiB | sender bytes kept for retransmission |
//! | `max-message` | 1MiB | largest message |
//! | `fc` | max / min | flow control across receivers |
//! | `nak-delay` | 20us / - | static NAK delay (unicast) |
//! | `nak-delay-max`, `group-size` | - / 500us, 10 | randomised NAK delay (multicast) |
//! | `nak-retry` | 500us / 10ms | least wait before NAKing again (stretched to 2x the measured repair time, doubled per retry) |
//! | `nak-retry-initial` | 10ms | retry wait before any repair time was measured |
//! | `nak-retry-max` | 250ms | longest wait between NAKs of one gap |
//! | `linger` | 200us / 5ms | ignore repeated NAKs of a range just retransmitted |
//! | `heartbeat` | 1ms | heartbeat after this long idle |
//! | `status-interval` | 100ms | STATUS at least this often (and after each quarter window consumed) |
//! | `session-timeout` | 1s | a silent session may be replaced |
//! | `receiver-timeout` | 1s | a silent receiver stops counting for flow control |
//! | `control-poll` | 100us | how often a publication reads NAK/STATUS |
//! | `buffer` | 4MiB | socket buffers (forced past rmem_max when root) |
//! | `receiver-id`, `seed` | random | identity and NAK back-off seed |
//! | `auth` | - | a file holding a shared key: every datagram carries a MAC (see `tickwire keygen`) |
//! | `loss`, `reorder`, `duplicate` | 0 | impair what this end sends |
//! | `{send,recv}-{data,control}-{loss,reorder,duplicate}` | 0 | one path and class |
//! | `{send,recv}-data-drop` | - | drop `FROM-TO` once (not the retransmission) |

use crate::uri::{ChannelUri, UriError};
use std::net::SocketAddrV4;
use std::time::Duration;
use tickwire_impair::ImpairConfig;
use tickwire_proto::{FlowControl, NakDelay, ReceiverConfig, SenderConfig};
use tickwire_transport::{ImpairSettings, TransportError, UdpConfig};

/// Why a publication or subscription could not be opened or run.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The channel URI is unusable.
    #[error(transparent)]
    Uri(#[from] UriError),
    /// A setting is out of range.
    #[error("channel setting: {0}")]
    Config(&'static str),
    /// The key file of `auth=FILE` cannot be used.
    #[error("auth key {path}: {why}")]
    Key {
        /// The file named by `auth=`.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// The socket failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// `xdp=required` and AF_XDP could not be set up: why.
    #[error("AF_XDP: {0}")]
    Xdp(String),
    /// A shared-memory log or the counters file failed.
    #[error(transparent)]
    Shm(#[from] tickwire_shm::ShmError),
    /// A shared-memory log broke the protocol while being read.
    #[error(transparent)]
    Poll(#[from] tickwire_shm::PollError),
}

/// Socket buffers a channel asks for unless its URI says `buffer=` (4 MiB).
pub const DEFAULT_BUFFER_BYTES: usize = 4 << 20;

/// Everything a channel URI decides.
#[derive(Debug, Clone)]
pub struct ChannelConfig {
    /// The URI.
    pub uri: ChannelUri,
    /// Sender settings (session and stream filled in at open).
    pub sender: SenderConfig,
    /// Receiver settings (stream filled in at open).
    pub receiver: ReceiverConfig,
    /// Impairments for a publication (what it sends: data).
    pub publication_impair: ImpairSettings,
    /// Impairments for a subscription (what it sends: control).
    pub subscription_impair: ImpairSettings,
    /// How often a publication reads control datagrams.
    pub control_poll: Duration,
    /// Socket buffer size.
    pub buffer_bytes: usize,
    /// AF_XDP: `xdp`, `xdp-mode`, `xdp-checksum`.
    pub xdp: crate::udp::xdp::XdpSettings,
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// A random non-zero u32 from the operating system (session and receiver
/// ids: another host cannot guess the next one from the last).
pub(crate) fn random_u32() -> u32 {
    // getrandom fails only where the OS has no entropy source at all; the
    // clock and pid are then the best there is.
    getrandom::u32().unwrap_or_else(|_| {
        let t = tickwire_shm::os::monotonic_ns();
        (tickwire_impair::Rng::new(t ^ u64::from(std::process::id())).next_u64() >> 32) as u32
    }) | 1
}

/// The first sequence of a keyed endpoint's datagrams: the wall clock in
/// nanoseconds, so that an endpoint restarted with the same id starts above
/// everything it sent before (and is not taken for a replay).
fn first_sequence() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
}

/// Writes a new random key to `path` (64 hexadecimal digits, mode 0600),
/// for `auth=FILE`. Refuses to replace an existing file unless `replace`.
///
/// # Errors
/// [`DriverError::Key`] naming the file: it exists, or cannot be written,
/// or the OS has no randomness.
pub fn write_key(path: &str, replace: bool) -> Result<(), DriverError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |why: String| DriverError::Key { path: path.to_string(), why };
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| err(format!("no randomness from the OS: {e}")))?;
    let key = tickwire_proto::AuthKey::new(bytes);
    // A directory that is not there yet is made, the owner's alone.
    if let Some(parent) = std::path::Path::new(path).parent().filter(|p| !p.as_os_str().is_empty()) {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| err(format!("cannot create its directory {}: {e}", parent.display())))?;
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).mode(0o600);
    if replace {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    let mut f = opts.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => err("exists (--force replaces it)".into()),
        _ => err(e.to_string()),
    })?;
    // A replaced file keeps its mode: make it the owner's alone first.
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(|e| err(e.to_string()))?;
    writeln!(f, "{}", key.to_hex()).map_err(|e| err(e.to_string()))
}

/// Reads the shared key of `auth=FILE`: 64 hexadecimal digits, in a file
/// that only its owner can read.
///
/// # Errors
/// [`DriverError::Key`] naming the file and what is wrong.
pub fn read_key(path: &str) -> Result<tickwire_proto::AuthKey, DriverError> {
    let err = |why: String| DriverError::Key { path: path.to_string(), why };
    // The one check of a secret file's mode (TLS keys and password files
    // too): refused, naming the mode and `chmod 600 FILE`, if others may
    // read it.
    let bytes = tickwire_transport::tls::read_secret(std::path::Path::new(path)).map_err(|e| err(e.to_string()))?;
    let text = std::str::from_utf8(&bytes).map_err(|_| err("not text: a key is 64 hex digits".into()))?;
    tickwire_proto::AuthKey::from_hex(text).map_err(|e| err(e.to_string()))
}

impl ChannelConfig {
    /// Reads every setting from the URI.
    ///
    /// # Errors
    /// [`DriverError::Uri`] naming the bad key, or [`DriverError::Config`].
    pub fn from_uri(uri: &ChannelUri) -> Result<Self, DriverError> {
        let mc = uri.is_multicast();
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        let fc = match uri.get("fc") {
            None if mc => FlowControl::Min,
            None => FlowControl::Max,
            Some("min") => FlowControl::Min,
            Some("max") => FlowControl::Max,
            Some(_) => {
                return Err(UriError::Value {
                    key: "fc".into(),
                    value: uri.get("fc").unwrap_or("").into(),
                    why: "min or max",
                }
                .into())
            }
        };
        let seed = uri.number("seed", u64::from(random_u32()))?;
        let nak_delay = if uri.get("nak-delay").is_some() || !mc {
            NakDelay::Static(ns(uri.duration("nak-delay", us(20))?))
        } else {
            NakDelay::Optimal {
                max: ns(uri.duration("nak-delay-max", us(500))?),
                group_size: uri.number("group-size", 10)?.min(u64::from(u32::MAX)) as u32,
            }
        };
        let max_message = uri.size("max-message", 1 << 20)?;
        let auth = uri.get("auth").map(read_key).transpose()?;
        let sender = SenderConfig {
            session_id: 0,
            stream_id: 0,
            mtu: uri.size("mtu", 1408)?,
            retention: uri.size("retention", 16 << 20)?,
            max_message,
            heartbeat_interval: ns(uri.duration("heartbeat", ms(1))?),
            setup_interval: ns(ms(10)),
            linger: ns(uri.duration("linger", if mc { ms(5) } else { us(200) })?),
            flow_control: fc,
            receiver_timeout: ns(uri.duration("receiver-timeout", ms(1000))?),
            multicast: mc,
            auth: auth.clone(),
            first_sequence: first_sequence(),
        };
        let receiver = ReceiverConfig {
            stream_id: 0,
            receiver_id: uri.number("receiver-id", u64::from(random_u32()))? as u32,
            window: uri.size("window", 1 << 20)?,
            nak_delay,
            nak_retry: ns(uri.duration("nak-retry", if mc { ms(10) } else { us(500) })?),
            nak_retry_initial: ns(uri.duration("nak-retry-initial", ms(10))?),
            nak_retry_max: ns(uri.duration("nak-retry-max", ms(250))?),
            status_interval: ns(uri.duration("status-interval", ms(100))?),
            session_timeout: ns(uri.duration("session-timeout", ms(1000))?),
            setup_request_interval: ns(ms(1)),
            max_message,
            seed,
            multicast: mc,
            auth,
            first_sequence: first_sequence(),
            challenge_seed: u64::from(random_u32()) << 32 | u64::from(random_u32()),
        };
        let imp = |prefix: &str, own: bool, s: u64| -> Result<ImpairConfig, DriverError> {
            let key = |k: &str| format!("{prefix}-{k}");
            let pick = |k: &str| -> Result<f64, UriError> {
                let specific = uri.probability(&key(k))?;
                Ok(if own && specific == 0.0 { uri.probability(k)? } else { specific })
            };
            Ok(ImpairConfig {
                loss: pick("loss")?,
                reorder: pick("reorder")?,
                duplicate: pick("duplicate")?,
                drop_range: if prefix.ends_with("data") { uri.range(&key("drop"))? } else { None },
                seed: seed.wrapping_add(s),
            })
        };
        let publication_impair = ImpairSettings {
            send_data: imp("send-data", true, 1)?,
            send_control: imp("send-control", false, 2)?,
            recv_data: imp("recv-data", false, 3)?,
            recv_control: imp("recv-control", false, 4)?,
        };
        let subscription_impair = ImpairSettings {
            send_data: imp("send-data", false, 5)?,
            send_control: imp("send-control", true, 6)?,
            recv_data: imp("recv-data", false, 7)?,
            recv_control: imp("recv-control", false, 8)?,
        };
        Ok(Self {
            uri: uri.clone(),
            sender,
            receiver,
            publication_impair,
            subscription_impair,
            control_poll: uri.duration("control-poll", us(100))?,
            buffer_bytes: uri.size("buffer", DEFAULT_BUFFER_BYTES)?,
            xdp: crate::udp::xdp::XdpSettings::from_uri(uri)?,
        })
    }

    /// The socket of a publication: an ephemeral port for unicast, the
    /// group's port for multicast (to hear NAK and STATUS).
    pub(crate) fn publication_socket(&self) -> Result<UdpConfig, DriverError> {
        let ep = self.uri.endpoint;
        Ok(if self.uri.is_multicast() {
            UdpConfig { bind: ep, multicast: Some((*ep.ip(), self.uri.interface()?)), buffer_bytes: self.buffer_bytes }
        } else {
            let bind = SocketAddrV4::new(self.uri.interface()?, 0);
            UdpConfig { bind, multicast: None, buffer_bytes: self.buffer_bytes }
        })
    }

    /// The socket of a subscription: the endpoint itself.
    pub(crate) fn subscription_socket(&self) -> Result<UdpConfig, DriverError> {
        let ep = self.uri.endpoint;
        let multicast = if self.uri.is_multicast() { Some((*ep.ip(), self.uri.interface()?)) } else { None };
        Ok(UdpConfig { bind: ep, multicast, buffer_bytes: self.buffer_bytes })
    }
}
