//! [`Impaired`]: any transport with built-in loss, reorder and duplication.

use crate::{RecvBatch, Transport, TransportError};
use std::collections::VecDeque;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};
use tickwire_impair::{ImpairConfig, ImpairStats, Impairment};
use tickwire_wire::{FrameHeader, FrameType};

/// Impairments for each path and frame class. Data = DATA, HEARTBEAT, SETUP
/// (sender to receivers); control = STATUS, NAK, ERROR (receivers to sender).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ImpairSettings {
    /// Outgoing data datagrams.
    pub send_data: ImpairConfig,
    /// Outgoing control datagrams.
    pub send_control: ImpairConfig,
    /// Incoming data datagrams.
    pub recv_data: ImpairConfig,
    /// Incoming control datagrams.
    pub recv_control: ImpairConfig,
}

impl ImpairSettings {
    /// No impairment anywhere.
    pub fn is_none(&self) -> bool {
        self.send_data.is_none()
            && self.send_control.is_none()
            && self.recv_data.is_none()
            && self.recv_control.is_none()
    }
}

fn is_control(d: &[u8]) -> bool {
    matches!(
        FrameHeader::new_checked(d).map(|h| h.frame_type()),
        Ok(FrameType::Status | FrameType::Nak | FrameType::Error)
    )
}

/// Wraps a transport; every datagram crossing it passes the impairment of
/// its path and class. Held (reordered) datagrams are released by later
/// traffic or after 1 ms, on the next call.
#[derive(Debug)]
pub struct Impaired<T> {
    inner: T,
    epoch: Instant,
    send: [Impairment; 2],
    recv: [Impairment; 2],
    inbox: VecDeque<(Vec<u8>, SocketAddrV4)>,
    outbox: Vec<Vec<u8>>,
    scratch: RecvBatch,
    last_to: Option<SocketAddrV4>,
    last_from: SocketAddrV4,
}

impl<T: Transport> Impaired<T> {
    /// Wraps `inner`.
    pub fn new(inner: T, s: ImpairSettings) -> Self {
        Self {
            inner,
            epoch: Instant::now(),
            send: [Impairment::new(s.send_data), Impairment::new(s.send_control)],
            recv: [Impairment::new(s.recv_data), Impairment::new(s.recv_control)],
            inbox: VecDeque::new(),
            outbox: Vec::new(),
            scratch: RecvBatch::new(crate::sys::MAX_BATCH, 65_536),
            last_to: None,
            last_from: SocketAddrV4::new(0.into(), 0),
        }
    }

    /// What each path did: send data, send control, receive data, receive
    /// control.
    pub fn stats(&self) -> [ImpairStats; 4] {
        [*self.send[0].stats(), *self.send[1].stats(), *self.recv[0].stats(), *self.recv[1].stats()]
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn flush_held(&mut self) -> Result<(), TransportError> {
        let now = self.now();
        let mut out = std::mem::take(&mut self.outbox);
        for imp in &mut self.send {
            imp.poll(now, &mut |d| out.push(d.to_vec()));
        }
        if let (Some(to), false) = (self.last_to, out.is_empty()) {
            let refs: Vec<&[u8]> = out.iter().map(Vec::as_slice).collect();
            self.inner.send_batch(to, &refs)?;
        }
        out.clear();
        self.outbox = out;
        Ok(())
    }
}

impl<T: Transport> Transport for Impaired<T> {
    fn send_batch(&mut self, to: SocketAddrV4, datagrams: &[&[u8]]) -> Result<usize, TransportError> {
        let now = self.now();
        self.last_to = Some(to);
        let mut out = std::mem::take(&mut self.outbox);
        for d in datagrams {
            let class = usize::from(is_control(d));
            self.send[class].process(now, d, &mut |x| out.push(x.to_vec()));
        }
        let refs: Vec<&[u8]> = out.iter().map(Vec::as_slice).collect();
        // What the inner transport could not take is lost, like a full NIC queue.
        self.inner.send_batch(to, &refs)?;
        out.clear();
        self.outbox = out;
        Ok(datagrams.len())
    }

    fn recv_batch(&mut self, batch: &mut RecvBatch) -> Result<usize, TransportError> {
        self.flush_held()?;
        let now = self.now();
        self.inner.recv_batch(&mut self.scratch)?;
        for i in 0..self.scratch.len() {
            let (d, from) = self.scratch.get(i);
            self.last_from = from;
            let class = usize::from(is_control(d));
            let inbox = &mut self.inbox;
            self.recv[class].process(now, d, &mut |x| inbox.push_back((x.to_vec(), from)));
        }
        let from = self.last_from;
        let inbox = &mut self.inbox;
        for imp in &mut self.recv {
            imp.poll(now, &mut |x| inbox.push_back((x.to_vec(), from)));
        }
        batch.clear();
        while let Some((d, from)) = self.inbox.front() {
            if !batch.push(d, *from) {
                break;
            }
            self.inbox.pop_front();
        }
        Ok(batch.len())
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), TransportError> {
        let held = self.send.iter().chain(&self.recv).any(|i| i.held() > 0);
        if !self.inbox.is_empty() {
            return Ok(());
        }
        self.inner.wait(if held { timeout.min(Duration::from_millis(1)) } else { timeout })
    }

    fn local_addr(&self) -> SocketAddrV4 {
        self.inner.local_addr()
    }

    fn impairment(&self) -> Option<[ImpairStats; 4]> {
        Some(self.stats())
    }

    fn xdp_stats(&self) -> Option<crate::XdpStats> {
        self.inner.xdp_stats()
    }
}
