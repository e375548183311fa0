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

use crate::DriverError;
use tickwire_transport::{ImpairSettings, Impaired, Transport, UdpConfig, UdpTransport};

/// The socket, wrapped in the URI's impairment if it asks for any.
fn open_transport(socket: &UdpConfig, impair: ImpairSettings) -> Result<Box<dyn Transport>, DriverError> {
    let udp = UdpTransport::open(socket)?;
    Ok(if impair.is_none() { Box::new(udp) } else { Box::new(Impaired::new(udp, impair)) })
}
