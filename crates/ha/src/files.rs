//! Files a member replaces whole: written beside, synced, renamed over
//! the old one, the directory synced, so a crash leaves the old file or
//! the new one, never a part.

use std::io::Write;
use std::path::Path;

/// Replaces `dir/name` with `bytes` (through `dir/name.tmp`).
///
/// # Errors
/// The first write, sync or rename that failed.
pub fn replace(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}
