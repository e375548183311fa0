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

pub use receiver::UdpReceiver;
pub use sender::{CloseError, UdpSender};

use crate::{ChannelConfig, DriverError};
use tickwire_transport::{ImpairSettings, Impaired, TcpTransport, Transport, UdpTransport};

/// The transport of a publication (`publication`) or a subscription: a UDP
/// socket, or over `tcp://` a connection to the endpoint (publication) or
/// a listener on it (subscription); wrapped in the URI's impairment if it
/// asks for any.
fn open_transport(cfg: &ChannelConfig, publication: bool) -> Result<Box<dyn Transport>, DriverError> {
    fn wrap<T: Transport + 'static>(t: T, impair: ImpairSettings) -> Box<dyn Transport> {
        if impair.is_none() {
            Box::new(t)
        } else {
            Box::new(Impaired::new(t, impair))
        }
    }
    let impair = if publication { cfg.publication_impair } else { cfg.subscription_impair };
    Ok(match (cfg.uri.tcp, publication) {
        (true, true) => wrap(TcpTransport::connect(cfg.uri.endpoint), impair),
        (true, false) => wrap(TcpTransport::listen(cfg.uri.endpoint)?, impair),
        (false, true) => wrap(UdpTransport::open(&cfg.publication_socket()?)?, impair),
        (false, false) => wrap(UdpTransport::open(&cfg.subscription_socket()?)?, impair),
    })
}
