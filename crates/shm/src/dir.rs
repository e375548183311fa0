//! A tickwire directory that is its user's own, and every file in it opened
//! relative to the directory's handle.
//!
//! A directory is used only if it belongs to this process's user and no
//! other user can write to it, unless the sticky bit keeps them to their own
//! files (as in `/dev/shm` itself): otherwise another user could replace a
//! log, a counters file or the router's lock, or plant a link there. It is
//! created `0700`; a router with a configured group creates it `02750` (the
//! setgid bit: files made in it take its group), and then files are made
//! `0640` instead of `0600`, whatever the umask.
//!
//! Names are looked up relative to the directory's open handle with
//! `O_NOFOLLOW` (a symbolic link is never followed), new files are created
//! with `O_EXCL`, temporary files get unpredictable names, and a file owned
//! by anyone but the directory's owner is refused, naming its owner.

use crate::error::ShmError;
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Mode of a directory this process creates without a group.
pub const DIR_MODE: u32 = 0o700;
/// Mode of a directory made for a group (setgid: files take its group).
pub const GROUP_DIR_MODE: u32 = 0o2750;

/// An open, checked tickwire directory.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
    owner: u32,
    mode: u32,
}

/// `uid 1000 (alice)`, or `uid 1000` for a user without a name.
pub fn describe_user(uid: u32) -> String {
    match crate::sys::user_name(uid) {
        Some(n) => format!("uid {uid} ({n})"),
        None => format!("uid {uid}"),
    }
}

/// `/dev/shm/tickwire-USER`: this user's own default directory (as Aeron
/// keeps one per user), named by the user's name, or uid if it has none.
pub fn default_dir() -> PathBuf {
    let uid = rustix::process::geteuid().as_raw();
    let user = crate::sys::user_name(uid).unwrap_or_else(|| uid.to_string());
    PathBuf::from(format!("/dev/shm/tickwire-{user}"))
}

/// The id of the group `name` (a name or a number).
///
/// # Errors
/// [`ShmError::Config`] naming the group if there is no such group.
pub fn group_id(name: &str) -> Result<u32, ShmError> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(gid);
    }
    crate::sys::group_id(name).ok_or_else(|| ShmError::Config(format!("group {name:?}: no such group")))
}

impl Dir {
    /// Opens `path`, creating it `0700` (its parents as usual) if it is
    /// missing, and checks that it is this user's own.
    ///
    /// # Errors
    /// [`ShmError::DirNotOwn`] for a directory of another user,
    /// [`ShmError::DirOpen`] for one others may write to without the sticky
    /// bit, [`ShmError::Io`] if it cannot be made or opened (a symbolic
    /// link is not followed).
    pub fn open(path: &Path) -> Result<Self, ShmError> {
        Self::create(path, None)
    }

    /// As [`Dir::open`], but a missing directory is made `02750` with the
    /// group `group` when one is given (a router serving a group's users).
    /// An existing directory keeps its mode.
    ///
    /// # Errors
    /// As [`Dir::open`].
    pub fn create(path: &Path, group: Option<u32>) -> Result<Self, ShmError> {
        let io = |e: io::Error| ShmError::io(path, e);
        let (parent, name) = split(path).map_err(io)?;
        if !parent.as_os_str().is_empty() {
            std::fs::create_dir_all(&parent).map_err(|e| ShmError::io(&parent, e))?;
        }
        let parent_fd = rfs::open(
            if parent.as_os_str().is_empty() { Path::new(".") } else { &parent },
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ShmError::io(&parent, e.into()))?;
        let made = match rfs::mkdirat(&parent_fd, &name, Mode::from_raw_mode(0o700)) {
            Ok(()) => true,
            Err(rustix::io::Errno::EXIST) => false,
            Err(e) => return Err(io(e.into())),
        };
        let fd = rfs::openat(
            &parent_fd,
            &name,
            OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io(dir_error(path, e.into())))?;
        if made {
            // Exactly this mode whatever the umask, and the group's.
            if let Some(gid) = group {
                rfs::fchown(&fd, None, Some(rustix::process::Gid::from_raw(gid))).map_err(|e| io(e.into()))?;
            }
            let mode = if group.is_some() { GROUP_DIR_MODE } else { DIR_MODE };
            rfs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| io(e.into()))?;
        }
        Self::check(fd, path)
    }

    /// Opens an existing directory and checks it, creating nothing.
    ///
    /// # Errors
    /// As [`Dir::open`]; `NotFound` when it does not exist.
    pub fn existing(path: &Path) -> Result<Self, ShmError> {
        let fd =
            rfs::open(path, OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| ShmError::io(path, dir_error(path, e.into())))?;
        Self::check(fd, path)
    }

    fn check(fd: OwnedFd, path: &Path) -> Result<Self, ShmError> {
        let st = rfs::fstat(&fd).map_err(|e| ShmError::io(path, e.into()))?;
        let (owner, mode) = (st.st_uid, st.st_mode & 0o7777);
        let me = rustix::process::geteuid().as_raw();
        if owner != me {
            return Err(ShmError::DirNotOwn {
                path: path.into(),
                owner: describe_user(owner),
                mode,
                user: describe_user(me),
            });
        }
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(ShmError::DirOpen { path: path.into(), owner: describe_user(owner), mode });
        }
        Ok(Self { fd, path: path.into(), owner, mode })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The directory's owner (uid).
    pub fn owner(&self) -> u32 {
        self.owner
    }
    /// Removes `name` if another user owns it: in this user's own directory
    /// such a file is a forgery (another user's log or counters file, made
    /// while the directory let them), never read. The directory's owner may
    /// remove it even under the sticky bit. Logged with the reason.
    /// Returns whether one was removed.
    pub fn remove_foreign(&self, name: &str) -> bool {
        let Ok(st) = rfs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) else { return false };
        if st.st_uid == self.owner {
            return false;
        }
        let removed = self.remove(name);
        let path = self.path.join(name);
        match &removed {
            Ok(()) => tracing::warn!(
                "{}: owned by {}, not by the directory's owner {}: removed unread (a file another user planted)",
                path.display(),
                describe_user(st.st_uid),
                describe_user(self.owner)
            ),
            Err(e) => {
                tracing::warn!("{}: owned by {}: cannot remove it: {e}", path.display(), describe_user(st.st_uid))
            }
        }
        removed.is_ok()
    }
    /// The directory's mode bits (`0o2750`, …).
    pub fn mode(&self) -> u32 {
        self.mode
    }
    /// The mode of the files made in it: `0640` in a directory made for a
    /// group (setgid, group-readable), else `0600`.
    pub fn file_mode(&self) -> u32 {
        if self.mode & 0o2040 == 0o2040 {
            0o640
        } else {
            0o600
        }
    }

    /// Creates the new file `name` (`O_EXCL`: an existing name or link
    /// fails), read-write, with [`Dir::file_mode`] whatever the umask.
    ///
    /// # Errors
    /// `AlreadyExists` if the name is taken; other I/O errors.
    pub fn create_file(&self, name: &str) -> io::Result<File> {
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rfs::openat(&self.fd, name, flags, Mode::from_raw_mode(self.file_mode()))?;
        rfs::fchmod(&fd, Mode::from_raw_mode(self.file_mode()))?;
        Ok(File::from(fd))
    }

    /// Creates a temporary file with an unpredictable name,
    /// `.STEM.PID.RANDOM.tmp`; returns it and its name.
    ///
    /// # Errors
    /// I/O errors, or eight names in a row taken.
    pub fn create_temp(&self, stem: &str) -> io::Result<(File, String)> {
        let mut last = io::Error::other("no attempt");
        for _ in 0..8 {
            let mut nonce = [0u8; 8];
            getrandom::fill(&mut nonce).map_err(io::Error::other)?;
            let name = format!(".{stem}.{}.{:016x}.tmp", std::process::id(), u64::from_le_bytes(nonce));
            match self.create_file(&name) {
                Ok(f) => return Ok((f, name)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// Opens `name` if it is a regular file of the directory's owner (a
    /// symbolic link is not followed, a FIFO or device never blocks the
    /// open); creates it with [`Dir::file_mode`] when `create` is set.
    ///
    /// # Errors
    /// `NotFound`; `InvalidInput` naming what it is instead of a regular
    /// file; `PermissionDenied` naming its owner when it is not the
    /// directory's owner's; other I/O errors.
    pub fn open_file(&self, name: &str, write: bool, create: bool) -> io::Result<File> {
        let mut flags = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        flags |= if write { OFlags::RDWR } else { OFlags::RDONLY };
        if create {
            flags |= OFlags::CREATE;
        }
        let fd = rfs::openat(&self.fd, name, flags, Mode::from_raw_mode(self.file_mode())).map_err(|e| {
            // The kernel may refuse before O_NOFOLLOW is seen (another
            // user's link in a sticky directory, protected_regular): say
            // what the name is.
            match rfs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::Symlink => {
                    nofollow(io::Error::from_raw_os_error(libc::ELOOP))
                }
                _ => nofollow(e.into()),
            }
        })?;
        let file = File::from(fd);
        let meta = file.metadata()?;
        crate::mapped::not_regular(&meta)?;
        owned_by(&meta, self.owner)?;
        if create {
            rfs::fchmod(&file, Mode::from_raw_mode(self.file_mode()))?;
        }
        Ok(file)
    }

    /// Gives the file `from` the name `to` too (`link`: fails with
    /// `AlreadyExists` if `to` exists).
    ///
    /// # Errors
    /// I/O errors.
    pub fn link(&self, from: &str, to: &str) -> io::Result<()> {
        Ok(rfs::linkat(&self.fd, from, &self.fd, to, AtFlags::empty())?)
    }

    /// Renames `from` to `to`, replacing `to`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        Ok(rfs::renameat(&self.fd, from, &self.fd, to)?)
    }

    /// Removes the name `name` (a link itself, never its target).
    ///
    /// # Errors
    /// I/O errors.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        Ok(rfs::unlinkat(&self.fd, name, AtFlags::empty())?)
    }

    /// The directory's handle.
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A file must belong to its directory's owner: one of another user's is
/// refused, naming both.
pub(crate) fn owned_by(meta: &std::fs::Metadata, owner: u32) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if meta.uid() == owner {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "owned by {}, not by the directory's owner {}: refused",
            describe_user(meta.uid()),
            describe_user(owner)
        ),
    ))
}

/// A directory that could not be opened: a link (`O_DIRECTORY |
/// O_NOFOLLOW` on one fails `ENOTDIR`) is named as one.
fn dir_error(path: &Path, e: io::Error) -> io::Error {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => nofollow(io::Error::from_raw_os_error(libc::ELOOP)),
        _ => nofollow(e),
    }
}

/// `ELOOP` from `O_NOFOLLOW` says what happened.
fn nofollow(e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        io::Error::new(io::ErrorKind::InvalidInput, "a symbolic link, not a tickwire file (not followed)")
    } else {
        e
    }
}

/// The parent and last component of `path`.
fn split(path: &Path) -> io::Result<(PathBuf, std::ffi::OsString)> {
    let name = path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no directory name"))?;
    Ok((path.parent().map(Path::to_owned).unwrap_or_default(), name.to_owned()))
}
