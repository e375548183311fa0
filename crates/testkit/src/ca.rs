//! A certificate authority for TLS tests (rcgen): a CA certificate, and
//! server and client certificates it signs, written as PEM files with
//! their keys (0600, as the router demands of a key).

use std::path::{Path, PathBuf};

/// A test CA: its certificate file and what signs with it.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
    /// Its certificate (PEM), the file a peer trusts.
    pub pem: PathBuf,
    dir: PathBuf,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").field("pem", &self.pem).finish_non_exhaustive()
    }
}

/// What a certificate [`TestCa::issue`] makes is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// A server's (extended key usage serverAuth).
    Server,
    /// A client's (extended key usage clientAuth).
    Client,
    /// Both ends' of a link between peers (serverAuth and clientAuth).
    Peer,
}

fn key_file(path: &Path, pem: &str) {
    std::fs::write(path, pem).expect("the key file");
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("the key's mode");
}

impl TestCa {
    /// A CA named `name` (its subject CN), written as `DIR/NAME.pem`.
    ///
    /// # Panics
    /// If rcgen fails or the file cannot be written (a test fails).
    pub fn new(dir: &Path, name: &str) -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().expect("a CA key");
        let cert = params.self_signed(&key).expect("a CA certificate");
        std::fs::create_dir_all(dir).expect("the certificates' directory");
        let pem = dir.join(format!("{name}.pem"));
        std::fs::write(&pem, cert.pem()).expect("the CA file");
        Self { cert, key, pem, dir: dir.to_owned() }
    }

    /// A certificate signed by this CA, as `DIR/FILE.pem` and its key
    /// `DIR/FILE.key` (0600): subject CN `cn` (none: an empty subject),
    /// subject alternative names `dns` (DNS names) and `emails` (rfc822
    /// names). Returns (certificate, key).
    ///
    /// # Panics
    /// If rcgen fails or the files cannot be written (a test fails).
    pub fn issue(
        &self,
        file: &str,
        usage: Usage,
        cn: Option<&str>,
        dns: &[&str],
        emails: &[&str],
    ) -> (PathBuf, PathBuf) {
        let names: Vec<String> = dns.iter().map(|&d| d.to_owned()).collect();
        let mut params = rcgen::CertificateParams::new(names).expect("certificate parameters");
        for e in emails {
            let e = rcgen::Ia5String::try_from(*e).expect("an ASCII e-mail address");
            params.subject_alt_names.push(rcgen::SanType::Rfc822Name(e));
        }
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        }
        params.extended_key_usages = match usage {
            Usage::Server => vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth],
            Usage::Client => vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth],
            Usage::Peer => {
                vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth, rcgen::ExtendedKeyUsagePurpose::ClientAuth]
            }
        };
        let key = rcgen::KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.cert, &self.key).expect("a signed certificate");
        let (c, k) = (self.dir.join(format!("{file}.pem")), self.dir.join(format!("{file}.key")));
        std::fs::write(&c, cert.pem()).expect("the certificate file");
        key_file(&k, &key.serialize_pem());
        (c, k)
    }

    /// A server certificate for `localhost` signed by this CA (no CN).
    pub fn server(&self, file: &str) -> (PathBuf, PathBuf) {
        self.issue(file, Usage::Server, None, &["localhost"], &[])
    }

    /// A client certificate whose subject CN is `user`, signed by this CA.
    pub fn client(&self, file: &str, user: &str) -> (PathBuf, PathBuf) {
        self.issue(file, Usage::Client, Some(user), &[], &[])
    }
}
