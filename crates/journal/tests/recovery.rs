//! The journal across restarts: records come back, a torn or damaged tail
//! is cut, damage before the tail is refused (or skipped when asked),
//! and retention shows as a loss to a reader. (What the sync policies make
//! durable is checked on a disk of its own in `durable.rs`.)

use std::path::{Path, PathBuf};
use tickwire_journal::{inspect, Journal, JournalConfig, JournalError, Read, Reader, SyncPolicy};

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tw-journal-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn cfg(dir: &Path) -> JournalConfig {
    JournalConfig { sync: SyncPolicy::Os, segment_bytes: 4096, ..JournalConfig::new(dir) }
}

/// Appends `n` records (publisher 1, sequences from `from`), written in
/// batches of 10.
fn fill(j: &mut Journal, from: u64, n: u64) {
    for i in from..from + n {
        j.append(1, i, &format!("md/{}", i % 3), &i.to_le_bytes()).unwrap();
        if i % 10 == 0 {
            j.write().unwrap();
        }
    }
    j.write().unwrap();
}

/// Every record a reader from `from` gets: Ok(publisher sequence) or
/// Err((lost from, lost to)).
fn read_all(j: &Journal, from: u64) -> Vec<Result<u64, (u64, u64)>> {
    let mut r = Reader::new(from);
    let mut out = Vec::new();
    loop {
        match r.next(j, u64::MAX).unwrap() {
            Read::Record(rec) => {
                if rec.publisher() == 1 {
                    assert_eq!(rec.payload(), rec.publisher_sequence().to_le_bytes());
                }
                out.push(Ok(rec.publisher_sequence()));
            }
            Read::Lost { from, to } => out.push(Err((from, to))),
            Read::End => return out,
        }
    }
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    tickwire_journal::segment::list(dir).unwrap().into_iter().map(|s| s.1).collect()
}

#[test]
fn records_survive_a_reopen_across_segments_and_sequences_go_on() {
    let dir = tempdir("reopen");
    let (mut j, rec) = Journal::open(cfg(&dir)).unwrap();
    assert_eq!((rec.records, rec.first, rec.last), (0, 1, 0));
    fill(&mut j, 1, 500);
    assert!(j.segment_count() > 3, "4 KiB segments roll");
    drop(j);
    let (mut j, rec) = Journal::open(cfg(&dir)).unwrap();
    assert_eq!((rec.records, rec.first, rec.last, rec.cut.clone()), (500, 1, 500, None), "{rec}");
    assert_eq!(rec.publishers.get(&1), Some(&500));
    assert_eq!(j.append(2, 1, "x", b"").unwrap(), 501);
    j.write().unwrap();
    let got = read_all(&j, 1);
    assert_eq!(got.len(), 501);
    assert!(got[..500].iter().enumerate().all(|(i, r)| *r == Ok(i as u64 + 1)));
    // From the middle, through the index.
    assert_eq!(read_all(&j, 250).first(), Some(&Ok(250)));
    let inspected = inspect::inspect(&dir).unwrap();
    assert_eq!((inspected.records(), inspected.damaged()), (501, 0), "{inspected}");
    drop(j);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_torn_last_record_is_cut_and_reported() {
    let dir = tempdir("torn");
    let (mut j, _) = Journal::open(cfg(&dir)).unwrap();
    fill(&mut j, 1, 100);
    drop(j);
    let last = segments(&dir).pop().unwrap();
    let len = std::fs::metadata(&last).unwrap().len();
    // Half of the last record: as if the process died inside the write.
    let f = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    f.set_len(len - 13).unwrap();
    drop(f);
    let (mut j, rec) = Journal::open(cfg(&dir)).unwrap();
    assert_eq!(rec.records, 99, "{rec}");
    let (seg, _, bytes) = rec.cut.clone().expect("the torn record is cut");
    assert_eq!(seg, last);
    assert!(bytes > 0 && rec.to_string().contains("cut"), "{rec}");
    assert_eq!(rec.publishers.get(&1), Some(&99), "the publisher resends 100");
    assert_eq!(j.append(1, 100, "md/1", &100u64.to_le_bytes()).unwrap(), 100);
    j.write().unwrap();
    drop(j);
    let (_, rec) = Journal::open(cfg(&dir)).unwrap();
    assert_eq!((rec.records, rec.cut), (100, None));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Flips one bit at `offset_from_end` bytes before the end of `path`.
fn flip(path: &Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0x10;
    std::fs::write(path, b).unwrap();
}

#[test]
fn a_flipped_bit_in_the_last_record_is_a_damaged_tail_and_cut() {
    let dir = tempdir("flip-tail");
    let (mut j, _) = Journal::open(cfg(&dir)).unwrap();
    fill(&mut j, 1, 50);
    drop(j);
    let last = segments(&dir).pop().unwrap();
    flip(&last, std::fs::metadata(&last).unwrap().len() - 12);
    let (_, rec) = Journal::open(cfg(&dir)).unwrap();
    assert_eq!(rec.records, 49, "{rec}");
    assert!(rec.cut.is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn damage_before_the_tail_stops_the_open_unless_skipped() {
    let dir = tempdir("flip-middle");
    let (mut j, _) = Journal::open(cfg(&dir)).unwrap();
    fill(&mut j, 1, 300);
    drop(j);
    // A record in the middle of the second segment.
    let second = segments(&dir)[1].clone();
    flip(&second, 64 + 48 + 2);
    let e = Journal::open(cfg(&dir)).unwrap_err();
    let text = e.to_string();
    assert!(matches!(&e, JournalError::Corrupt { segment, .. } if *segment == second), "{e}");
    assert!(text.contains("offset 64") && text.contains("skip"), "{text}");
    let report = inspect::inspect(&dir).unwrap();
    assert_eq!(report.damaged(), 1, "{report}");
    assert!(report.to_string().contains("valid records follow"), "{report}");

    let (j, rec) = Journal::open(JournalConfig { skip_corrupt: true, ..cfg(&dir) }).unwrap();
    assert_eq!(rec.records, 299, "{rec}");
    let (_, _, _, from, to) = rec.skipped[0].clone();
    assert_eq!(from, to, "one record lost");
    let got = read_all(&j, 1);
    assert!(got.contains(&Err((from, from))), "the reader hears of it");
    assert_eq!(got.iter().filter(|r| r.is_ok()).count(), 299);
    drop(j);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn retention_removes_old_segments_and_a_reader_behind_hears_of_the_loss() {
    let dir = tempdir("retention");
    let (mut j, _) = Journal::open(JournalConfig { retain_bytes: Some(16 << 10), ..cfg(&dir) }).unwrap();
    fill(&mut j, 1, 2000);
    let before = j.segment_count();
    let removed = j.enforce_retention().unwrap();
    assert!(removed > 0 && j.segment_count() == before - removed && j.bytes() <= 16 << 10);
    let first = j.first();
    let got = read_all(&j, 1);
    assert_eq!(got[0], Err((1, first - 1)));
    assert_eq!(got[1], Ok(first));
    assert_eq!(got.len() as u64, 1 + 2000 - first + 1);
    drop(j);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_process_cannot_open_the_same_journal() {
    let dir = tempdir("locked");
    let (_j, _) = Journal::open(cfg(&dir)).unwrap();
    assert!(matches!(Journal::open(cfg(&dir)), Err(JournalError::Locked(_))));
    let _ = std::fs::remove_dir_all(&dir);
}
