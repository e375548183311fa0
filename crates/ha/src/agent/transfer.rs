//! Snapshot transfers on the member's side ([`crate::snapshot`] has the
//! protocol): a leader hands each FETCH link to a thread that sends the
//! files of the snapshot it offers, one transfer per member at a time; a
//! follower runs one fetch at a time on a thread, and steps the held
//! snapshot message into raft-rs once the files are staged.
//!
//! A transfer's progress keeps the leader from giving up on it (the
//! snapshot's deadline, [`crate::Node::snapshot_progress`]); a transfer
//! that fails ends the fetch, and the leader offers the snapshot again
//! after its deadline.

use super::Member;
use crate::snapshot::{self, FetchFrom, Manifest};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::thread::JoinHandle;

/// A snapshot being sent to a member.
pub(super) struct Serving {
    member: u64,
    sent: Arc<AtomicU64>,
    seen: u64,
    thread: JoinHandle<bool>,
}

/// The snapshot being fetched from the leader.
pub(super) struct Fetching {
    index: u64,
    got: Arc<AtomicU64>,
    seen: u64,
    done: Receiver<Result<PathBuf, String>>,
}

/// The snapshot this member offers: its directory and manifest.
pub(super) type Offer = (PathBuf, Manifest);

impl Member {
    /// Sends the offered snapshot on `stream`, which member `from` opened
    /// with FETCH for `index`.
    pub(super) fn serve(&mut self, from: u64, index: u64, stream: std::net::TcpStream) {
        let offer = self.offer.as_ref().filter(|(_, m)| m.index == index).cloned();
        let busy = self.serving.iter().any(|s| s.member == from && !s.thread.is_finished());
        let Some((dir, manifest)) = offer.filter(|_| !busy) else {
            // Not (or no longer) offered, or one transfer to it runs: it
            // fetches again when the leader offers again.
            self.links.refused += 1;
            tracing::info!(member = self.cfg.id, peer = from, index, busy, "ha: a snapshot fetch refused");
            return;
        };
        let sent = Arc::new(AtomicU64::new(0));
        let counter = sent.clone();
        let me = self.cfg.id;
        let spawned =
            std::thread::Builder::new().name(format!("tw-ha-send-{from}")).spawn(move || {
                match snapshot::serve(stream, &dir, &manifest, &counter) {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!(member = me, peer = from, index, error = %e, "ha: a snapshot not sent");
                        false
                    }
                }
            });
        match spawned {
            Ok(thread) => {
                tracing::info!(member = me, peer = from, index, "ha: sending a snapshot");
                self.serving.push(Serving { member: from, sent, seen: 0, thread });
            }
            Err(e) => tracing::warn!(member = me, error = %e, "ha: no thread to send a snapshot"),
        }
    }

    /// Starts fetching the snapshots the node asks for (one at a time).
    pub(super) fn start_fetches(&mut self) {
        while let Some((leader, manifest)) = self.node.poll_fetch() {
            if self.fetching.is_some() {
                continue; // the leader offers it again if this one fails
            }
            let Some(&addr) = self.cfg.members.get(&leader) else {
                self.node.handle_fetched(manifest.index, false);
                continue;
            };
            let from = FetchFrom {
                me: (self.cfg.id, self.cfg.members[&self.cfg.id]),
                leader: (leader, addr),
                group: self.cfg.group.clone(),
                dir: self.cfg.snapshot_dir(),
            };
            let (tx, done) = std::sync::mpsc::channel();
            let got = Arc::new(AtomicU64::new(0));
            let counter = got.clone();
            let index = manifest.index;
            tracing::info!(
                member = self.cfg.id,
                leader,
                index,
                bytes = manifest.bytes(),
                "ha: fetching a snapshot (the leader's log no longer holds what this member lacks)"
            );
            let spawned = std::thread::Builder::new().name("tw-ha-fetch".into()).spawn(move || {
                let r = snapshot::fetch(&from, &manifest, &counter).map_err(|e| e.to_string());
                let _ = tx.send(r);
            });
            match spawned {
                Ok(_) => self.fetching = Some(Fetching { index, got, seen: 0, done }),
                Err(e) => {
                    tracing::warn!(member = self.cfg.id, error = %e, "ha: no thread to fetch a snapshot");
                    self.node.handle_fetched(index, false);
                }
            }
        }
    }

    /// Takes a finished fetch's result to the node.
    pub(super) fn finish_fetch(&mut self) {
        let Some(f) = &mut self.fetching else { return };
        let got = f.got.load(Ordering::Relaxed);
        self.links.snapshot_bytes_in += got - f.seen;
        f.seen = got;
        let r = match f.done.try_recv() {
            Ok(r) => r,
            Err(std::sync::mpsc::TryRecvError::Empty) => return,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => Err("the fetch's thread ended".into()),
        };
        let index = f.index;
        self.fetching = None;
        match r {
            Ok(dir) => {
                tracing::info!(member = self.cfg.id, index, dir = %dir.display(), "ha: snapshot fetched and staged");
                self.node.handle_fetched(index, true);
            }
            Err(e) => {
                self.links.transfers_failed += 1;
                tracing::warn!(member = self.cfg.id, index, error = %e, "ha: a snapshot fetch failed (fetched again when the leader offers it again)");
                self.node.handle_fetched(index, false);
            }
        }
    }

    /// Counts the transfers' progress (which keeps the leader waiting for
    /// them) and ends the finished ones.
    pub(super) fn watch_serving(&mut self) {
        for s in &mut self.serving {
            let sent = s.sent.load(Ordering::Relaxed);
            if sent > s.seen {
                self.links.snapshot_bytes_out += sent - s.seen;
                s.seen = sent;
                self.node.snapshot_progress(s.member);
            }
        }
        let (done, running): (Vec<Serving>, Vec<Serving>) =
            std::mem::take(&mut self.serving).into_iter().partition(|s| s.thread.is_finished());
        self.serving = running;
        for s in done {
            match s.thread.join() {
                Ok(true) => self.links.snapshots_sent += 1,
                _ => self.links.transfers_failed += 1,
            }
        }
    }
}
