//! The network endpoints behind a `udp://` [`Publication`](crate::Publication)
//! and [`Subscription`](crate::Subscription): the sans-IO protocol core
//! (`tickwire-proto`) driven over a [`Transport`](tickwire_transport::Transport),
//! in the caller's thread.
//!
//! * [`UdpSender`]: `proto::Sender` over a socket: batches datagrams into
//!   `sendmmsg`, reads NAK/STATUS every `control-poll`, runs the timers.
//! * [`UdpReceiver`]: `proto::Receiver` over a socket: one `recvmmsg` per
//!   poll, delivery to the handler, NAK/STATUS back to the sender.

mod receiver;
mod sender;
pub mod xdp;

pub use receiver::UdpReceiver;
pub use sender::{CloseError, UdpSender};

use crate::{ChannelConfig, DriverError};
use tickwire_transport::{ImpairSettings, Impaired, TcpTransport, Transport, UdpTransport};

/// The transport of a publication (`publication`) or a subscription: a UDP
/// socket (or AF_XDP, `xdp=`), or over `tcp://` a connection to the
/// endpoint (publication) or a listener on it (subscription); wrapped in the
/// URI's impairment if it asks for any.
fn open_transport(cfg: &ChannelConfig, publication: bool) -> Result<xdp::Opened, DriverError> {
    fn wrap<T: Transport + 'static>(t: T, impair: ImpairSettings) -> Box<dyn Transport> {
        if impair.is_none() {
            Box::new(t)
        } else {
            Box::new(Impaired::new(t, impair))
        }
    }
    let impair = if publication { cfg.publication_impair } else { cfg.subscription_impair };
    let plain = |t: Box<dyn Transport>| xdp::Opened { transport: wrap(t, impair), note: None, fell_back: false };
    let udp = match (cfg.uri.tcp, publication) {
        (true, true) => return Ok(plain(Box::new(TcpTransport::connect(cfg.uri.endpoint)))),
        (true, false) => return Ok(plain(Box::new(TcpTransport::listen(cfg.uri.endpoint)?))),
        (false, true) => cfg.publication_socket()?,
        (false, false) => cfg.subscription_socket()?,
    };
    if cfg.xdp.want == xdp::XdpUse::Off {
        return Ok(plain(Box::new(UdpTransport::open(&udp)?)));
    }
    let peer = publication.then_some(*cfg.uri.endpoint.ip());
    let opened = xdp::open(&cfg.xdp, udp, peer)?;
    Ok(xdp::Opened { transport: wrap(opened.transport, impair), ..opened })
}

/// Publishes an AF_XDP counter set (`tickwire stat`) for a channel that
/// asked for AF_XDP: the transport's counters, or a fallback.
fn publish_xdp(set: Option<&tickwire_shm::CounterSet>, transport: &dyn Transport, fell_back: bool) {
    if let Some(c) = set {
        let s = transport
            .xdp_stats()
            .unwrap_or(tickwire_transport::XdpStats { fallbacks: u64::from(fell_back), ..Default::default() });
        c.set_all(&s.values());
    }
}
