//! The journal behind tickwire's guaranteed delivery.
//!
//! Layers, bottom up:
//! - [`record`]: one record, a zero-copy view checked once (length, CRC,
//!   topic) and its fields to write;
//! - [`segment`]: segment files (a header, then records) and the scan that
//!   checks them at start;
//! - [`Journal`] (`journal`): the directory of segments, appended in
//!   batches (one `pwrite` each), recovered at open (a torn tail is cut,
//!   damage before it refused unless skipped), trimmed by retention;
//! - [`SyncPolicy`] (`sync`): when a record is durable, made so by a
//!   thread of its own, so the writer never waits for the disk;
//! - [`Reader`] (`reader`): a cursor from any sequence, which reports what
//!   retention removed as a loss;
//! - [`snapshot`]: a checkpoint of the segments (for a member of a
//!   high-availability group that lags too far for the Raft log), and
//!   the install of one in place of a journal's own;
//! - [`inspect`]: what `tickwire journal inspect` prints.
//!
//! ```
//! use tickwire_journal::{Journal, JournalConfig, Read, Reader, SyncPolicy};
//! let dir = std::env::temp_dir().join(format!("tw-journal-doc-{}", std::process::id()));
//! let (mut j, recovery) = Journal::open(JournalConfig { sync: SyncPolicy::Os, ..JournalConfig::new(&dir) })?;
//! assert_eq!(recovery.records, 0);
//! let seq = j.append(7, 1, "orders/desk/1", b"buy 100")?;
//! j.write()?;
//! assert_eq!(j.durable(), seq);
//! let mut r = Reader::new(1);
//! let Read::Record(rec) = r.next(&j, j.durable())? else { panic!() };
//! assert_eq!((rec.topic(), rec.payload()), ("orders/desk/1", &b"buy 100"[..]));
//! # drop(j); std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), tickwire_journal::JournalError>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod inspect;
mod journal;
mod reader;
pub mod record;
pub mod segment;
pub mod snapshot;
mod sync;

pub use journal::{Journal, JournalConfig, JournalError, Recovery};
pub use reader::{Read, Reader};
pub use record::{Record, RecordRepr};
pub use sync::SyncPolicy;
