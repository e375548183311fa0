//! Group commit and fsync report a record durable (what the router
//! acknowledges and delivers) only once a completed fdatasync put it on the
//! device. Its own test binary: it runs losetup, mkfs and mount, and a
//! child process holds copies of the parent's descriptors until it execs,
//! which would hold the lock of a journal another test of the same process
//! just closed and reopens.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tickwire_journal::{Journal, JournalConfig, SyncPolicy};

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tw-journal-durable-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn cfg(dir: &Path) -> JournalConfig {
    JournalConfig { sync: SyncPolicy::Os, segment_bytes: 4096, ..JournalConfig::new(dir) }
}

/// Skips the calling test, visibly (the harness hides `eprintln!` of a
/// passing test); a failure under CI. (tickwire_testkit::skip, which this
/// crate cannot use without it as a dev-dependency.)
fn skip(why: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = std::io::stderr().lock().write_all(format!("SKIPPED: {test}: {why}\n").as_bytes());
    let ci = std::env::var("CI").unwrap_or_default();
    assert!(matches!(ci.trim(), "" | "0" | "false"), "{test} was skipped under CI={ci} ({why})");
}

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    out.status
        .success()
        .then_some(text)
        .ok_or_else(|| format!("{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// A small ext4 on a loop device. What reaches the device is in the image
/// file, which does not share the mounted file system's page cache: a
/// record written but not yet fsynced is not there.
struct Disk {
    img: PathBuf,
    dev: String,
    mnt: PathBuf,
}

impl Disk {
    fn new(name: &str) -> Result<Self, String> {
        let base = tempdir(name);
        std::fs::create_dir_all(base.join("mnt")).map_err(|e| e.to_string())?;
        let img = base.join("disk.img");
        std::fs::File::create(&img).and_then(|f| f.set_len(8 << 20)).map_err(|e| e.to_string())?;
        let dev = run("losetup", &["--find", "--show", img.to_str().unwrap()])?;
        let disk = Self { img, dev, mnt: base.join("mnt") };
        // 4 KiB blocks: a segment (4 KiB here) is one block, so each record
        // is contiguous in the image.
        run("mkfs.ext4", &["-q", "-F", "-b", "4096", &disk.dev])?;
        run("mount", &[&disk.dev, disk.mnt.to_str().unwrap()])?;
        Ok(disk)
    }

    /// The sequences of the records marked by [`marked`] on the device.
    fn on_device(&self) -> std::collections::HashSet<u64> {
        let b = std::fs::read(&self.img).unwrap();
        let (mark, mut found) = (MARK.as_bytes(), std::collections::HashSet::new());
        let mut at = 0;
        while let Some(i) = b[at..].windows(mark.len()).position(|w| w == mark) {
            let digits = &b[at + i + mark.len()..(at + i + mark.len() + 8).min(b.len())];
            if let Some(seq) = std::str::from_utf8(digits).ok().and_then(|d| d.parse().ok()) {
                found.insert(seq);
            }
            at += i + 1;
        }
        found
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = run("umount", &[self.mnt.to_str().unwrap()]);
        let _ = run("losetup", &["-d", &self.dev]);
        let _ = std::fs::remove_dir_all(self.img.parent().unwrap());
    }
}

const MARK: &str = "tw-durable-";

/// Record `seq`'s payload: [`MARK`] and the sequence in 8 digits.
fn marked(seq: u64) -> Vec<u8> {
    format!("{MARK}{seq:08}").into_bytes()
}

/// Under group commit and fsync, a record is reported durable (what the
/// router acknowledges and delivers) only once a completed fdatasync put
/// it on the device: each time `durable()` moves, every record up to it
/// is read back from the disk image, past the page cache. (Reopening in
/// the same process would read the page cache, which holds them anyway.)
#[test]
fn group_and_fsync_policies_report_durable_only_what_a_completed_fsync_put_on_disk() {
    if !is_root() {
        skip("a loop device and a mount need root");
        return;
    }
    for policy in [SyncPolicy::group(), SyncPolicy::Fsync] {
        let disk = match Disk::new(policy.name()) {
            Ok(d) => d,
            Err(e) => panic!("a loop device with ext4 (losetup, mkfs.ext4, mount): {e}"),
        };
        // The method sees the difference: written is not on the device
        // until an fdatasync.
        let probe = std::fs::File::create(disk.mnt.join("probe")).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&probe, &marked(99_999_999), 0).unwrap();
        assert!(!disk.on_device().contains(&99_999_999), "a write reached the device without an fsync");
        probe.sync_data().unwrap();
        assert!(disk.on_device().contains(&99_999_999), "an fdatasync did not reach the image");

        let dir = disk.mnt.join("journal");
        let (mut j, _) = Journal::open(JournalConfig { sync: policy, ..cfg(&dir) }).unwrap();
        let mut checked = 0;
        for round in 0..20u64 {
            for seq in round * 10 + 1..=round * 10 + 10 {
                assert_eq!(j.append(1, seq, "md/x", &marked(seq)).unwrap(), seq);
            }
            j.write().unwrap();
            let until = Instant::now() + Duration::from_secs(5);
            while checked < j.written() {
                assert!(Instant::now() < until, "{}: durable stuck at {}", policy.name(), j.durable());
                let durable = j.durable();
                if durable > checked {
                    let there = disk.on_device();
                    let missing: Vec<u64> = (checked + 1..=durable).filter(|s| !there.contains(s)).collect();
                    assert!(
                        missing.is_empty(),
                        "{}: durable() is {durable}, but records {missing:?} are not on the device",
                        policy.name()
                    );
                    checked = durable;
                }
                std::thread::yield_now();
            }
        }
        assert!(j.fsync_latencies().is_some_and(|l| l.count() > 0));
        drop(j);
        let (_, rec) = Journal::open(cfg(&dir)).unwrap();
        assert_eq!(rec.records, 200);
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}
