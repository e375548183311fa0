//! Issue 44: a journal holds guaranteed orders. Whatever the umask, its
//! directory, segments and lock are the router's user's alone, and a link
//! planted in its place is not followed.

use std::os::unix::fs::PermissionsExt;
use tickwire_journal::{Journal, JournalConfig, SyncPolicy};

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tw-journal-modes-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn segments_lock_and_directory_are_the_owners_alone_whatever_the_umask() {
    let d = dir("umask");
    // SAFETY: umask(2) cannot fail; this test binary's only test.
    let old = unsafe { libc::umask(0) };
    let opened = Journal::open(JournalConfig { sync: SyncPolicy::Os, ..JournalConfig::new(&d) });
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let (mut j, _) = opened.unwrap();
    j.append(7, 1, "orders/desk/1", b"buy 100").unwrap();
    j.write().unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&d), 0o700, "the directory");
    let mut files = 0;
    for e in std::fs::read_dir(&d).unwrap() {
        let p = e.unwrap().path();
        assert_eq!(mode(&p), 0o600, "{} under umask 000", p.display());
        files += 1;
    }
    assert!(files >= 2, "a segment and the lock");
    drop(j);
    // A link planted where the lock goes is not followed: the open fails
    // and its target is untouched.
    let target = dir("target");
    std::fs::write(&target, b"root's file").unwrap();
    std::fs::remove_file(d.join("journal.lock")).unwrap();
    std::os::unix::fs::symlink(&target, d.join("journal.lock")).unwrap();
    let e = Journal::open(JournalConfig { sync: SyncPolicy::Os, ..JournalConfig::new(&d) }).unwrap_err();
    assert!(e.to_string().contains("journal.lock"), "{e}");
    assert_eq!(std::fs::read(&target).unwrap(), b"root's file");
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_file(&target);
}
