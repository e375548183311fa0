//! Secrets on disk and certificates' dates: [`read_secret`] reads a file
//! only its owner may read (a TLS private key, a client's password file,
//! a reliable-UDP auth key), the one check of its mode for all of them;
//! [`expiry_warnings`] says which certificates of a chain have expired or
//! expire within [`EXPIRY_WARNING_DAYS`].

use super::setup::certs;
use super::TlsError;
use rustls::pki_types::CertificateDer;
use std::io::Read;
use std::path::Path;
use zeroize::Zeroizing;

/// Why a secret file (a private key, a password, an auth key) was not read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Its group or others have some access to it.
    #[error("{} by others (mode {mode:03o}): chmod 600 {path}", if mode & 0o044 != 0 { "readable" } else { "open" })]
    Exposed {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// It could not be opened or read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Reads a secret: a file its owner alone may access (mode 600 or 400; any
/// bit for the group or others is refused, naming the file, its mode and
/// `chmod 600 FILE`). The mode is that of the file opened, so it cannot be
/// swapped between the check and the read. The bytes are zeroed when the
/// buffer is dropped (read at their final size, so no copy is left behind
/// by a growing buffer).
///
/// # Errors
/// [`SecretError::Exposed`], or the file could not be read.
pub fn read_secret(path: &Path) -> Result<Zeroizing<Vec<u8>>, SecretError> {
    use std::os::unix::fs::PermissionsExt;
    let mut f = std::fs::File::open(path)?;
    let meta = f.metadata()?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(SecretError::Exposed { path: path.display().to_string(), mode });
    }
    let size = usize::try_from(meta.len()).unwrap_or(0).min(1 << 20);
    let mut buf = Zeroizing::new(Vec::with_capacity(size + 1));
    f.read_to_end(&mut buf)?;
    Ok(buf)
}

/// A certificate expiring within this many days is warned about.
pub const EXPIRY_WARNING_DAYS: i64 = 30;

/// What is wrong with the expiry dates of `chain` (from `path`) at `now`
/// (seconds since the epoch): one line per certificate expired or expiring
/// within [`EXPIRY_WARNING_DAYS`], naming the file and the date. A
/// certificate whose date cannot be read is left to rustls.
pub(super) fn expiry_lines(path: &Path, chain: &[CertificateDer<'_>], now: i64) -> Vec<String> {
    let mut out = Vec::new();
    for (i, der) in chain.iter().enumerate() {
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else { continue };
        let not_after = cert.validity().not_after;
        let left = not_after.timestamp() - now;
        if left > EXPIRY_WARNING_DAYS * 86_400 {
            continue;
        }
        let t = not_after.to_datetime();
        let date = format!("{} {:02}:{:02}:{:02} UTC", t.date(), t.hour(), t.minute(), t.second());
        let which = match i {
            0 => format!("certificate {}", path.display()),
            _ => format!("certificate {} of the chain in {}", i + 1, path.display()),
        };
        out.push(if left <= 0 {
            format!("{which} expired on {date}: peers refuse it; renew it")
        } else {
            let days = left / 86_400;
            format!("{which} expires on {date} (in {days} day{}): renew it", if days == 1 { "" } else { "s" })
        });
    }
    out
}

pub(super) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Warnings for the certificates in `cert` (PEM) that have expired or
/// expire within [`EXPIRY_WARNING_DAYS`]: what [`server_config`] logs, for
/// `tickwire router --check-config` to print.
///
/// # Errors
/// [`TlsError::File`]: the file cannot be read or holds no certificate.
pub fn expiry_warnings(cert: &Path) -> Result<Vec<String>, TlsError> {
    Ok(expiry_lines(cert, &certs(cert)?, now()))
}

#[cfg(test)]
mod tests {
    use super::super::server_config;
    use super::*;
    use std::time::Duration;

    fn set_mode(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// Issue 44 item 5: a private key its group or others may read is
    /// refused, naming the file, its mode and the fix; the certificate,
    /// which is public, is not.
    #[test]
    fn a_key_readable_by_others_is_refused_by_name_and_a_certificate_is_not() {
        let dir = std::env::temp_dir().join(format!("tw-tls-mode-{}", std::process::id()));
        let (cert, key) = tickwire_testkit::self_signed(&dir, "router");
        set_mode(&key, 0o600);
        set_mode(&cert, 0o644);
        assert!(server_config(&cert, &key, None).is_ok(), "a 0600 key and a 0644 certificate");
        set_mode(&key, 0o400);
        assert!(server_config(&cert, &key, None).is_ok(), "a 0400 key");
        for (mode, what) in
            [(0o644, "readable by others (mode 644)"), (0o640, "mode 640"), (0o620, "open by others (mode 620)")]
        {
            set_mode(&key, mode);
            let e = server_config(&cert, &key, None).unwrap_err().to_string();
            let fix = format!("chmod 600 {}", key.display());
            assert!(e.starts_with(&key.display().to_string()) && e.contains(what) && e.ends_with(&fix), "{e}");
        }
        set_mode(&key, 0o600);
        let e = read_secret(&dir.join("absent.key")).unwrap_err().to_string();
        assert!(e.contains("No such file"), "{e}");
        assert_eq!(&read_secret(&key).unwrap()[..10], b"-----BEGIN");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A certificate for localhost valid until `not_after` (seconds since
    /// the epoch), made by rcgen and written to `dir/name.pem`, with its key
    /// (0600) in `dir/name.key`.
    fn certificate_until(dir: &Path, name: &str, not_after: u64) -> (std::path::PathBuf, std::path::PathBuf) {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(not_after);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        std::fs::create_dir_all(dir).unwrap();
        let (c, k) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        set_mode(&k, 0o600);
        (c, k)
    }

    /// Issue 44 item 5: a certificate expired, or expiring within 30 days,
    /// is warned about, naming the file and the date; the router still
    /// starts with it (its peers are the ones to refuse it).
    #[test]
    fn an_expired_or_expiring_certificate_is_warned_about_with_its_date() {
        let dir = std::env::temp_dir().join(format!("tw-tls-expiry-{}", std::process::id()));
        let now = u64::try_from(now()).unwrap();
        // 2021-01-01 00:00:00 UTC.
        let (old, old_key) = certificate_until(&dir, "old", 1_609_459_200);
        let w = expiry_warnings(&old).unwrap();
        assert_eq!(
            w,
            [format!("certificate {} expired on 2021-01-01 00:00:00 UTC: peers refuse it; renew it", old.display())]
        );
        assert!(server_config(&old, &old_key, None).is_ok(), "a warning, not a refusal");
        let (soon, _) = certificate_until(&dir, "soon", now + 10 * 86_400 + 3600);
        let w = expiry_warnings(&soon).unwrap();
        assert!(w.len() == 1 && w[0].contains(&soon.display().to_string()) && w[0].contains("(in 10 days)"), "{w:?}");
        let (later, _) = certificate_until(&dir, "later", now + 31 * 86_400);
        assert!(expiry_warnings(&later).unwrap().is_empty());
        // A chain: the second one's expiry is named as such.
        let chain = dir.join("chain.pem");
        let pem = |p: &Path| std::fs::read_to_string(p).unwrap();
        std::fs::write(&chain, pem(&later) + &pem(&old)).unwrap();
        let w = expiry_warnings(&chain).unwrap();
        assert!(w.len() == 1 && w[0].starts_with("certificate 2 of the chain in "), "{w:?}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
