//! TLS between peers of one deployment (the routers of a cluster): each
//! end shows a certificate its peer checks against a shared CA, whichever
//! end dialed. What a certificate must *name* is left to the protocol
//! above, which knows whom it talks to only after the handshake: the
//! dialer of a seed address does not know the peer's name, so the
//! dialer's check is the chain, the validity dates and the signature
//! (rustls's `WebPkiServerVerifier`), without the name it dialed; the
//! caller then compares [`Wire::peer_user`](super::Wire::peer_user) with
//! the name the peer gives.

use super::setup::{chain_and_key, provider, roots, server_config_of, TlsError};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, Error, ServerConfig, SignatureScheme};
use std::path::Path;
use std::sync::Arc;

/// Both ends of a peer link: the configuration of the end that is dialed
/// (client certificates required, from the CA) and of the end that dials
/// (its own certificate shown; the other's checked against the CA, not
/// against a name).
#[derive(Clone)]
pub struct PeerTls {
    /// The dialed end's.
    pub server: Arc<ServerConfig>,
    /// The dialing end's.
    pub client: Arc<ClientConfig>,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerTls").finish_non_exhaustive()
    }
}

/// Accepts a server certificate the CA vouches for, whatever names it
/// holds (every other check is `WebPkiServerVerifier`'s).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            // The name is the protocol's to check: webpki checks the name
            // last, after the chain, dates and usage passed.
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Both ends' configurations from one certificate chain and its key (PEM
/// files, the key its owner's alone) and the CA every peer's certificate
/// must chain to (PEM). The certificate is shown by both ends, so it
/// needs both extended key usages (serverAuth and clientAuth) or none.
///
/// # Errors
/// [`TlsError`] naming the file, or what rustls refused.
pub fn peer_configs(cert: &Path, key: &Path, ca: &Path) -> Result<PeerTls, TlsError> {
    // Each file read (and its expiry warned about) once, for both ends.
    let (chain, key) = chain_and_key(cert, key)?;
    let trusted = roots(ca)?;
    let server = server_config_of(chain.clone(), key.clone_key(), Some((trusted.clone(), ca)))?;
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(trusted), provider())
        .build()
        .map_err(|e| TlsError::Config(format!("ca {}: {e}", ca.display())))?;
    let client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ChainOnly(verifier)))
        .with_client_auth_cert(chain, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    Ok(PeerTls { server, client: Arc::new(client) })
}
