//! TLS configurations from PEM files: a server's (its certificate chain
//! and key; with a client CA, mutual TLS), a client's (the CA it trusts;
//! its own certificate and key for a router that asks), and the user a
//! client certificate names ([`certificate_user`]).
//!
//! The user of a client certificate: see [`certificate_user`].

use super::secret::{expiry_lines, now, read_secret};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, ServerConfig};
use std::path::Path;
use std::sync::Arc;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read or holds no PEM item.
    #[error("{path}: {why}")]
    File {
        /// The file.
        path: String,
        /// What was wrong.
        why: String,
    },
    /// rustls refused the configuration or the server name.
    #[error("tls: {0}")]
    Config(String),
}

pub(super) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates (PEM) in `path`; at least one.
pub(super) fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file = |why: String| TlsError::File { path: path.display().to_string(), why };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file(e.to_string()))?;
    if certs.is_empty() {
        return Err(file("no certificate (PEM) in it".into()));
    }
    Ok(certs)
}

/// The chain in `cert`, warned about if expired or expiring soon, and the
/// private key in `key`, a secret ([`read_secret`]).
pub(super) fn chain_and_key(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let chain = certs(cert)?;
    for w in expiry_lines(cert, &chain, now()) {
        tracing::warn!("{w}");
    }
    let file = |why: String| TlsError::File { path: key.display().to_string(), why };
    let pem = read_secret(key).map_err(|e| file(e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| file(e.to_string()))?;
    Ok((chain, key))
}

/// The certificates in `ca` as trust anchors (warned about if expired or
/// expiring soon: every certificate they signed stops being accepted).
pub(super) fn roots(ca: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    let chain = certs(ca)?;
    for w in expiry_lines(ca, &chain, now()) {
        tracing::warn!("{w}");
    }
    for c in chain {
        roots.add(c).map_err(|e| TlsError::Config(format!("{}: {e}", ca.display())))?;
    }
    Ok(roots)
}

/// A server configuration from a certificate chain and its private key
/// (PEM files), TLS 1.2 and 1.3. With `client_ca`, mutual TLS: every
/// client must show a certificate that chains to one in `client_ca` (PEM),
/// or the handshake fails (rustls's `WebPkiClientVerifier`: the client
/// gets a `CertificateRequired` or `UnknownCA` alert); without, clients
/// show none. The key must be its owner's alone ([`read_secret`]); a
/// certificate expired or expiring soon, the server's or a client CA's,
/// is warned about (`tracing`, [`expiry_warnings`]).
///
/// # Errors
/// [`TlsError`] naming the file, or what rustls refused.
pub fn server_config(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<Arc<ServerConfig>, TlsError> {
    let (chain, key) = chain_and_key(cert, key)?;
    let clients = match client_ca {
        None => None,
        Some(ca) => Some((roots(ca)?, ca)),
    };
    server_config_of(chain, key, clients)
}

/// [`server_config`] from what its files held: the chain, its key, and
/// the client CA's roots (with the file they came from, for errors).
pub(super) fn server_config_of(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    clients: Option<(rustls::RootCertStore, &Path)>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match clients {
        None => builder.with_no_client_auth(),
        Some((roots, ca)) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| TlsError::Config(format!("client_ca {}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let cfg = builder.with_single_cert(chain, key).map_err(|e| TlsError::Config(e.to_string()))?;
    Ok(Arc::new(cfg))
}

/// A client configuration trusting the certificates in `ca` (PEM); with
/// `identity`, a certificate chain and its private key (PEM files; the key
/// its owner's alone) shown to a router that asks for one (mutual TLS).
///
/// # Errors
/// [`TlsError`] naming the file, or what rustls refused.
pub fn client_config(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<Arc<ClientConfig>, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots(ca)?);
    let cfg = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let (chain, key) = chain_and_key(cert, key)?;
            builder.with_client_auth_cert(chain, key).map_err(|e| TlsError::Config(e.to_string()))?
        }
    };
    Ok(Arc::new(cfg))
}

/// The user a client certificate (DER) names: its subject's common name
/// (CN) if it has one, else its first subject alternative name that is a
/// DNS name or an e-mail address (rfc822Name). The CN wins, as Solace's
/// default and NATS' `verify` mapping of a subject have it. `None` for a
/// certificate that cannot be parsed or names nobody (no such field, or
/// only empty names or names holding control characters).
pub fn certificate_user(der: &[u8]) -> Option<String> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let usable = |s: &str| !s.is_empty() && !s.chars().any(char::is_control);
    if let Some(cn) = cert.subject().iter_common_name().filter_map(|cn| cn.as_str().ok()).find(|s| usable(s)) {
        return Some(cn.to_owned());
    }
    let san = cert.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|g| match g {
        GeneralName::DNSName(s) | GeneralName::RFC822Name(s) if usable(s) => Some((*s).to_owned()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_testkit::ca::{TestCa, Usage};

    /// The subject's CN names the user; without one, the first DNS or
    /// e-mail SAN; a certificate naming nobody names no user.
    #[test]
    fn the_cn_wins_then_the_first_dns_or_email_san() {
        let dir = std::env::temp_dir().join(format!("tw-tls-user-{}", std::process::id()));
        let ca = TestCa::new(&dir, "ca");
        let user = |cn, dns: &[&str], emails: &[&str]| {
            let (cert, _) = ca.issue("c", Usage::Client, cn, dns, emails);
            certificate_user(&certs(&cert).unwrap()[0])
        };
        assert_eq!(user(Some("desk"), &["feed.example"], &["ops@example.com"]).as_deref(), Some("desk"));
        assert_eq!(user(None, &["feed.example"], &["ops@example.com"]).as_deref(), Some("feed.example"));
        assert_eq!(user(None, &[], &["ops@example.com"]).as_deref(), Some("ops@example.com"));
        assert_eq!(user(Some(""), &["feed.example"], &[]).as_deref(), Some("feed.example"), "an empty CN is no name");
        assert_eq!(user(None, &["127.0.0.1"], &[]), None, "an IP address SAN is not a user");
        assert_eq!(user(None, &[], &[]), None);
        assert_eq!(certificate_user(b"not a certificate"), None);
        let _ = std::fs::remove_dir_all(dir);
    }
}
