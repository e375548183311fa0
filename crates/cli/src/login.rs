//! Who a command is to a router (`--user` and its password,
//! `--tls-cert`), and connecting to a router as that: what `tickwire pub`
//! and `sub --router` ([`crate::routed`]), `request`, `reply` and `queue`
//! share.

use crate::config::Settings;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tickwire_agent::stop::requested as stopped;
use tickwire_client::{Client, ClientEvent, ClientOptions};
use zeroize::Zeroizing;

/// Who to connect to a router with users as (`--user`); the password never
/// on the command line, where `ps` would show it.
#[derive(Debug, Clone, clap::Args)]
pub struct Login {
    /// With --router: connect as this user; the password from --password-file or TICKWIRE_PASSWORD.
    #[arg(long, requires = "router")]
    pub(crate) user: Option<String>,
    /// The file holding --user's password (its first line).
    #[arg(long, requires = "user")]
    pub(crate) password_file: Option<PathBuf>,
    /// With --router tls://: this client's certificate (PEM) for a router that asks for one (mutual TLS);
    /// it logs in as the user the certificate names, no password needed. Needs --tls-key.
    #[arg(long, visible_alias = "cert", requires = "tls_key", requires = "router")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert, readable by its owner alone (chmod 600).
    #[arg(long, visible_alias = "key", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
}

/// The environment variable a password may come in.
const PASSWORD_VAR: &str = "TICKWIRE_PASSWORD";

impl Login {
    /// `opts` with this login's client certificate and key, if any.
    pub(crate) fn identity(&self, opts: ClientOptions) -> ClientOptions {
        ClientOptions { tls_cert: self.tls_cert.clone(), tls_key: self.tls_key.clone(), ..opts }
    }

    /// (user, password), if a user is given. Called first thing, before
    /// any thread starts: [`take_password_var`] changes the environment.
    /// The password file must be its owner's alone (the check every secret
    /// file gets: [`tickwire_transport::tls::read_secret`]); its bytes are
    /// zeroed once the first line is taken.
    ///
    /// Over shared memory (`ipc`) no password is needed: a router whose
    /// `[[users]]` entry names this process's Unix user (`unix_user`) logs
    /// it in as that user from the socket's credentials; the password, when
    /// given, is sent all the same (and checked for any other user).
    pub(crate) fn credentials(&self, ipc: bool) -> Result<Option<(String, Zeroizing<String>)>, String> {
        let Some(user) = &self.user else { return Ok(None) };
        let password = match &self.password_file {
            Some(f) => {
                let bytes = tickwire_transport::tls::read_secret(f)
                    .map_err(|e| format!("--password-file {}: {e}", f.display()))?;
                let text = std::str::from_utf8(&bytes)
                    .map_err(|_| format!("--password-file {}: not UTF-8 text", f.display()))?;
                Zeroizing::new(text.lines().next().unwrap_or("").to_owned())
            }
            None => match take_password_var() {
                Some(p) => Zeroizing::new(p),
                None if ipc => Zeroizing::new(String::new()),
                None => {
                    return Err(format!(
                        "--user {user} needs its password in --password-file FILE or the {PASSWORD_VAR} environment variable (or, over --router ipc, a router that maps this Unix user to it)"
                    ))
                }
            },
        };
        Ok(Some((user.clone(), password)))
    }
}

/// Takes the password out of `TICKWIRE_PASSWORD` and removes it from the
/// environment, so that no child process inherits it and nothing reading
/// the environment later (a library, a crash handler) finds it.
///
/// `/proc/PID/environ` is not changed by this: it shows the environment
/// the process was started with (proc(5)), which only overwriting that
/// memory would clear (`unsafe`, forbidden in this crate). A password file
/// (`--password-file`) leaves nothing there.
///
/// Must run while this process has one thread: changing the environment
/// races with another thread reading it through libc (why `remove_var` is
/// `unsafe` in edition 2024; this workspace is edition 2021).
/// The commands that connect to a router call it first, before any thread
/// starts (the Ctrl-C handler they install after it starts none).
fn take_password_var() -> Option<String> {
    let password = std::env::var(PASSWORD_VAR).ok()?;
    std::env::remove_var(PASSWORD_VAR);
    Some(password)
}

/// Connects as `role` ("pub", "sub", "request", "reply"); `opts` carries
/// what only one of them sets.
pub(crate) fn connect(
    s: &Settings,
    uri: &str,
    role: &str,
    tls_ca: Option<&Path>,
    credentials: Option<(String, Zeroizing<String>)>,
    opts: ClientOptions,
) -> Result<Client, String> {
    if uri.starts_with("tls://") && tls_ca.is_none() {
        return Err(format!("{uri} needs --tls-ca FILE: the certificate (PEM) the router's must chain to"));
    }
    if opts.tls_cert.is_some() && !uri.starts_with("tls://") {
        return Err(format!("--tls-cert is for a tls:// router, not {uri}"));
    }
    let opts = ClientOptions {
        name: format!("tickwire-{role}-{}", std::process::id()),
        dir: s.dir.clone(),
        tls_ca: tls_ca.map(Path::to_path_buf),
        user: credentials.as_ref().map(|c| c.0.clone()),
        // Moved, not copied: the client keeps it to log in again after a
        // reconnection.
        password: credentials.map(|(_, mut p)| std::mem::take(&mut *p)),
        ..opts
    };
    Client::connect(uri, opts).map_err(|e| e.to_string())
}

/// Polls until connected, saying once (after 100 ms) that it waits.
pub(crate) fn wait(
    client: &mut Client,
    limit: Option<Duration>,
    mut on: impl FnMut(ClientEvent<'_>),
) -> Result<bool, String> {
    let start = Instant::now();
    let mut said = false;
    while !client.is_connected() {
        if stopped() {
            return Ok(false);
        }
        if let Some(why) = client.refused() {
            return Err(format!("the router at {} refused this client: {why}", client.uri()));
        }
        if let Some(w) = limit.filter(|&w| start.elapsed() > w) {
            return Err(format!("no router at {} within {w:?} (--wait): {}", client.uri(), client.last_error()));
        }
        if !said && start.elapsed() > Duration::from_millis(100) {
            eprintln!("waiting for the router at {} (Ctrl-C to stop)", client.uri());
            said = true;
        }
        if client.poll(&mut on, 1) == 0 {
            client.park(Duration::from_millis(5));
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 44 item 5: the password is taken out of the environment once
    /// read, so no child process inherits it. (The test harness has other
    /// threads; they do not read TICKWIRE_PASSWORD, and std's lock keeps
    /// its own readers and writers apart.)
    #[test]
    fn the_password_variable_is_removed_once_read() {
        std::env::set_var(PASSWORD_VAR, "env-s3cret");
        let login = Login { user: Some("desk".into()), password_file: None, tls_cert: None, tls_key: None };
        let (user, password) = login.credentials(false).unwrap().unwrap();
        assert_eq!((user.as_str(), password.as_str()), ("desk", "env-s3cret"));
        assert!(std::env::var_os(PASSWORD_VAR).is_none(), "still in the environment");
        let child = std::process::Command::new("env").output().unwrap();
        assert!(!String::from_utf8_lossy(&child.stdout).contains("env-s3cret"), "a child inherited it");
        let e = login.credentials(false).unwrap_err();
        assert!(e.contains("TICKWIRE_PASSWORD"), "read once: {e}");
    }
}
