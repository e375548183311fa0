//! The directory is its user's own (`tickwire_shm::Dir`): its mode and its
//! files' modes whatever the umask, and the directories it refuses. One
//! test, as the umask is the process's.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use tickwire_shm::{Context, Dir, LogConfig, ShmError};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tw-dir-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn mode(p: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn directories_and_files_get_their_modes_whatever_the_umask_and_foreign_ones_are_refused() {
    // The umask is the process's: this binary runs this one test.
    let old = rustix::process::umask(rustix::fs::Mode::empty());

    // A new directory: 0700, its logs and counters 0600.
    let d = scratch("private");
    let ctx = Context::new(&d).unwrap();
    let app = ctx.appender("ipc:md", 1, &LogConfig::with_capacity(64 << 10)).unwrap();
    assert_eq!(mode(&d), 0o700);
    let mut files = Vec::new();
    for e in std::fs::read_dir(&d).unwrap().flatten() {
        assert_eq!(mode(&e.path()), 0o600, "{}", e.path().display());
        files.push(e.file_name().to_string_lossy().into_owned());
    }
    println!("umask 000, {}: mode {:04o}, files {files:?} 0600", d.display(), mode(&d));
    assert!(files.iter().any(|f| f == "md-1.log") && files.iter().any(|f| f.starts_with("counters-")), "{files:?}");
    drop((app, ctx));

    // Made for a group: 02750, files 0640.
    let g = scratch("group");
    let gid = std::fs::metadata("/proc/self").unwrap().gid();
    let dir = Dir::create(&g, Some(gid)).unwrap();
    assert_eq!((mode(&g), dir.file_mode()), (0o2750, 0o640));
    let f = dir.create_file("x").unwrap();
    assert_eq!(f.metadata().unwrap().mode() & 0o7777, 0o640);
    assert_eq!(dir.create_file("x").unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
    let (_, tmp) = dir.create_temp("y").unwrap();
    let (_, tmp2) = dir.create_temp("y").unwrap();
    assert_ne!(tmp, tmp2, "temporary names are not predictable");
    rustix::process::umask(old);

    // Writable by others without the sticky bit: refused, naming the mode;
    // with the sticky bit (as /dev/shm): used.
    let open = scratch("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = Context::new(&open).unwrap_err();
    println!("{e}");
    assert!(matches!(e, ShmError::DirOpen { mode: 0o777, .. }), "{e}");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    Dir::open(&open).unwrap();

    // Another user's (chown needs root, as the project's tests run).
    let theirs = scratch("theirs");
    std::fs::create_dir(&theirs).unwrap();
    if std::os::unix::fs::chown(&theirs, Some(65534), None).is_ok() {
        let e = Context::new(&theirs).unwrap_err();
        println!("{e}");
        assert!(matches!(e, ShmError::DirNotOwn { .. }) && e.to_string().contains("uid 65534"), "{e}");
    }

    // A link to a directory of ours is not followed.
    let link = scratch("link");
    std::os::unix::fs::symlink(&d, &link).unwrap();
    let e = Dir::open(&link).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");

    for p in [&d, &g, &open, &theirs] {
        let _ = std::fs::remove_dir_all(p);
    }
    let _ = std::fs::remove_file(&link);
}
