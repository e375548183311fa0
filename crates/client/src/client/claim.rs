//! Publishing in place: [`Client::try_claim`] reserves a message's bytes
//! (over shared memory, in the log the router reads) and [`ClientClaim`]
//! commits or aborts them.

use super::{Client, PublishError, State};
use crate::conn::{ClaimInner, SendError};
use tickwire_topic::check_topic;
use tickwire_wire::client::{ClientKind, ClientRepr};

/// A message being written in place ([`Client::try_claim`]). Commit it, or
/// drop it to abort.
#[must_use = "a claim is aborted unless committed"]
pub struct ClientClaim<'a>(Option<ClaimInner<'a>>);

impl ClientClaim<'_> {
    /// The payload's bytes, to fill.
    pub fn buffer(&mut self) -> &mut [u8] {
        self.0.as_mut().map_or(&mut [], |c| c.buffer())
    }
    /// Publishes it.
    pub fn commit(mut self) {
        if let Some(c) = self.0.take() {
            c.commit();
        }
    }
}

impl Drop for ClientClaim<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.abort();
        }
    }
}

impl Client {
    /// Reserves a message of `len` bytes on `topic` to write in place
    /// (shared memory: straight into the log the router reads).
    ///
    /// # Errors
    /// As [`Client::publish`].
    pub fn try_claim(&mut self, topic: &str, len: usize) -> Result<ClientClaim<'_>, PublishError> {
        check_topic(topic)?;
        self.check_size(topic, len)?;
        if self.state != State::Connected {
            return Err(PublishError::NotConnected);
        }
        let sequence = self.next_sequence;
        let Some(conn) = &mut self.conn else { return Err(PublishError::NotConnected) };
        match conn.claim(&ClientRepr { sequence, topic, ..ClientRepr::new(ClientKind::Publish) }, len) {
            Ok(c) => {
                self.next_sequence += 1;
                Ok(ClientClaim(Some(c)))
            }
            Err(SendError::Full) => Err(PublishError::BackPressured),
            Err(SendError::Broken(_) | SendError::Refused(_)) => Err(PublishError::NotConnected),
        }
    }
}
