//! Users and topic ACLs: who may connect, and what each may publish and
//! read.
//!
//! In the router's config file, beside `[router]`:
//!
//! ```toml
//! [[users]]
//! name = "desk"
//! password_hash = "$argon2id$v=19$m=19456,t=2,p=1$..."   # from `tickwire router hash-password`
//! publish = ["orders/desk/>"]
//! subscribe = ["md/eu/>"]
//! ```
//!
//! With no user configured every client is anonymous and may do anything.
//! Once one is, every client must name a user and its password in HELLO
//! ([`tickwire_wire::client::credentials`]), and may publish only on topics
//! its `publish` patterns match and read only topics its `subscribe`
//! patterns match: deny by default. A subscription is checked against the
//! ACL when it is made ([`Acl::reach`]): refused if no topic it matches may
//! be read, taken whole if every one may, and otherwise taken with each
//! matched topic checked before delivery, so `md/>` from a user allowed
//! `md/eu/>` receives `md/eu/...` and nothing else.
//!
//! Passwords are verified with argon2 off the routing agents' threads (an
//! argon2 check takes tens of milliseconds by design): see
//! [`AuthWorker`].

use rustc_hash::FxHashMap;
use serde::Deserialize;
use std::sync::Arc;
use tickwire_topic::Pattern;
use tickwire_wire::client::SlowConsumer;

/// One `[[users]]` entry of the config file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// The name a client gives in HELLO.
    pub name: String,
    /// The password's argon2 hash in PHC form (`tickwire router hash-password`);
    /// may be left out for a user with `unix_user`, who then logs in by
    /// being that Unix user alone.
    #[serde(default)]
    pub password_hash: String,
    /// The Unix user (a name or a numeric uid) whose shared-memory clients
    /// log in as this user with no password: the router learns a client's
    /// uid from its login socket (`SO_PEERCRED`).
    #[serde(default)]
    pub unix_user: Option<String>,
    /// Patterns of the topics it may publish on.
    #[serde(default)]
    pub publish: Vec<String>,
    /// Patterns of the topics it may read.
    #[serde(default)]
    pub subscribe: Vec<String>,
    /// What happens to its sessions when their queue is full (the
    /// router's `limits.slow_consumer` if not given).
    #[serde(default)]
    pub slow_consumer: Option<SlowConsumer>,
}

/// Why a `[[users]]` entry was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[[users]] {user:?}: {key}: {why}")]
pub struct UsersError {
    /// The user's name.
    pub user: String,
    /// The key.
    pub key: &'static str,
    /// What is wrong with it.
    pub why: String,
}

/// Topics a user may publish on or read: a list of patterns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Acl {
    patterns: Vec<Pattern>,
}

/// How much of a subscription an ACL lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Every topic the subscription matches.
    All,
    /// Some: each matched topic is checked.
    Some,
    /// None: the subscription is refused.
    None,
}

impl Acl {
    /// An ACL of these patterns.
    pub fn new(patterns: Vec<Pattern>) -> Self {
        Self { patterns }
    }

    /// Whether `topic` (a checked topic) is allowed.
    pub fn allows(&self, topic: &str) -> bool {
        self.patterns.iter().any(|p| p.matches(topic))
    }

    /// How many of the topics `pattern` matches are allowed.
    pub fn reach(&self, pattern: &Pattern) -> Reach {
        if self.patterns.iter().any(|a| a.covers(pattern)) {
            Reach::All
        } else if self.patterns.iter().any(|a| a.meets(pattern)) {
            Reach::Some
        } else {
            Reach::None
        }
    }
}

/// A configured user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Its name.
    pub name: String,
    /// Its password's hash (PHC).
    hash: String,
    /// What it may publish on.
    pub publish: Acl,
    /// What it may read.
    pub subscribe: Acl,
    /// Its sessions' slow-consumer policy, if it has its own.
    pub slow_consumer: Option<SlowConsumer>,
}

impl User {
    /// Whether it is the same user with the same password (its ACLs may
    /// differ): a session authenticated as `self` may carry on as `other`.
    pub fn same_login(&self, other: &User) -> bool {
        self.name == other.name && self.hash == other.hash
    }
}

/// The configured users, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Users {
    by_name: FxHashMap<String, Arc<User>>,
    /// Users by the Unix uid (`unix_user`) their shared-memory clients log
    /// in as.
    by_uid: FxHashMap<u32, String>,
}

/// The uid of Unix user `name` (a name, or a number taken as the uid).
fn unix_uid(name: &str) -> Result<u32, String> {
    if let Ok(uid) = name.parse::<u32>() {
        return Ok(uid);
    }
    match nix::unistd::User::from_name(name) {
        Ok(Some(u)) => Ok(u.uid.as_raw()),
        Ok(None) => Err(format!("no Unix user {name:?} on this host")),
        Err(e) => Err(format!("looking up Unix user {name:?}: {e}")),
    }
}

/// A well-formed argon2id hash of a password nobody has: verified against
/// when the user named does not exist, so that taking as long as a real
/// check does not tell a prober which names exist.
const DUMMY_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$dGlja3dpcmVkdW1teQ$Hqq8Qm4qV7ZbH9qpiBXdnlDhsZ3FZ7bFZaBKbN8Mxp0";

impl Users {
    /// Checks and compiles `[[users]]`.
    ///
    /// # Errors
    /// [`UsersError`] naming the user and key: an empty or repeated name,
    /// a hash that is not an argon2id PHC string at least as costly as
    /// argon2's defaults (m=19456, t=2, p=1: what [`hash_password`] makes),
    /// a bad pattern.
    pub fn new(cfgs: &[UserConfig]) -> Result<Self, UsersError> {
        let mut by_name = FxHashMap::default();
        let mut by_uid = FxHashMap::default();
        for c in cfgs {
            let bad = |key, why: String| UsersError { user: c.name.clone(), key, why };
            if c.name.is_empty() || c.name.len() > 100 || c.name.chars().any(char::is_control) {
                return Err(bad("name", "1 to 100 bytes, no control characters".into()));
            }
            if let Some(unix) = &c.unix_user {
                let uid = unix_uid(unix).map_err(|why| bad("unix_user", why))?;
                if let Some(other) = by_uid.insert(uid, c.name.clone()) {
                    return Err(bad("unix_user", format!("{unix:?} (uid {uid}) is user {other:?}'s too")));
                }
            }
            match argon2::PasswordHash::new(&c.password_hash) {
                // A Unix-mapped user without a password: no password logs in as it.
                _ if c.password_hash.is_empty() && c.unix_user.is_some() => {}
                Ok(h) => strong_enough(&h).map_err(|why| {
                    bad("password_hash", format!("{why}: `tickwire router hash-password` makes a good one"))
                })?,
                Err(e) => {
                    return Err(bad(
                        "password_hash",
                        format!("not a PHC hash ({e}): use `tickwire router hash-password`"),
                    ))
                }
            }
            let acl = |key, list: &[String]| -> Result<Acl, UsersError> {
                let ps = list.iter().map(|p| Pattern::parse(p).map_err(|e| bad(key, format!("{p:?}: {e}"))));
                Ok(Acl::new(ps.collect::<Result<_, _>>()?))
            };
            let user = User {
                name: c.name.clone(),
                hash: c.password_hash.clone(),
                publish: acl("publish", &c.publish)?,
                subscribe: acl("subscribe", &c.subscribe)?,
                slow_consumer: c.slow_consumer,
            };
            if by_name.insert(c.name.clone(), Arc::new(user)).is_some() {
                return Err(bad("name", "given twice".into()));
            }
        }
        Ok(Self { by_name, by_uid })
    }

    /// Whether no user is configured (every client is anonymous).
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Users configured.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// The user called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<User>> {
        self.by_name.get(name)
    }

    /// The user whose `unix_user` is uid `uid`, if any.
    pub fn by_uid(&self, uid: u32) -> Option<&str> {
        self.by_uid.get(&uid).map(String::as_str)
    }

    /// Checks `password` for user `name` (slow: argon2).
    ///
    /// # Errors
    /// A reason that does not say which of the two was wrong.
    pub fn verify(&self, name: &str, password: &[u8]) -> Result<Arc<User>, String> {
        use argon2::PasswordVerifier;
        let user = self.by_name.get(name);
        // A user with no password (`unix_user` alone) takes as long to refuse.
        let hash = user.map(|u| u.hash.as_str()).filter(|h| !h.is_empty()).unwrap_or(DUMMY_HASH);
        let ok = argon2::PasswordHash::new(hash)
            .is_ok_and(|h| argon2::Argon2::default().verify_password(password, &h).is_ok());
        match user {
            Some(u) if ok && !u.hash.is_empty() => Ok(Arc::clone(u)),
            _ => Err(format!("user {name:?}: unknown user or wrong password")),
        }
    }
}

/// Whether `h` costs a guesser at least what [`hash_password`] makes:
/// argon2id with argon2's default memory (m, KiB), passes (t) and lanes
/// (p); else what is weaker.
fn strong_enough(h: &argon2::PasswordHash<'_>) -> Result<(), String> {
    if h.algorithm.as_str() != "argon2id" {
        return Err(format!("{} is weaker than argon2id", h.algorithm));
    }
    let p = argon2::Params::try_from(h).map_err(|e| format!("its argon2 parameters: {e}"))?;
    let d = argon2::Params::DEFAULT;
    let weak: Vec<String> = [
        ("m", p.m_cost(), d.m_cost(), "KiB of memory"),
        ("t", p.t_cost(), d.t_cost(), "passes"),
        ("p", p.p_cost(), d.p_cost(), "lanes"),
    ]
    .iter()
    .filter(|(_, got, least, _)| got < least)
    .map(|(k, got, least, what)| format!("{k}={got} {what} (at least {least})"))
    .collect();
    if weak.is_empty() {
        Ok(())
    } else {
        Err(format!("weaker than argon2id's defaults: {}", weak.join(", ")))
    }
}

/// Hashes `password` for a `[[users]]` entry: argon2id with the crate's
/// default cost (19 MiB, 2 passes: OWASP's recommendation) and a random
/// 16-byte salt from the kernel (`/dev/urandom`).
///
/// # Errors
/// The salt could not be read, or the hasher refused (a password over its
/// length limit).
pub fn hash_password(password: &[u8]) -> Result<String, String> {
    use argon2::password_hash::{PasswordHasher, SaltString};
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("/dev/urandom: {e}"))?;
    let salt = SaltString::encode_b64(&bytes).map_err(|e| e.to_string())?;
    argon2::Argon2::default().hash_password(password, &salt).map(|h| h.to_string()).map_err(|e| e.to_string())
}

pub use crate::auth::{AuthRequest, AuthResult, AuthStats, AuthWorker};

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(ps: &[&str]) -> Acl {
        Acl::new(ps.iter().map(|p| Pattern::parse(p).unwrap()).collect())
    }
    fn pat(p: &str) -> Pattern {
        Pattern::parse(p).unwrap()
    }

    #[test]
    fn reach_of_subscriptions_against_an_acl() {
        let a = acl(&["md/eu/>", "fx/*/spot"]);
        for (p, want) in [
            ("md/eu/>", Reach::All),
            ("md/eu/VOD", Reach::All),
            ("md/eu/*/x", Reach::All),
            ("md/>", Reach::Some),
            ("md/*/VOD", Reach::Some),
            (">", Reach::Some),
            ("md/us/>", Reach::None),
            ("md/eu", Reach::None),
            ("fx/EURUSD/spot", Reach::All),
            ("fx/*/spot", Reach::All),
            ("fx/>", Reach::Some),
            ("fx/*/fwd", Reach::None),
            ("fx/EURUSD/spot/x", Reach::None),
        ] {
            assert_eq!(a.reach(&pat(p)), want, "{p}");
        }
        assert_eq!(Acl::default().reach(&pat(">")), Reach::None, "an empty ACL allows nothing");
        assert!(a.allows("md/eu/VOD") && !a.allows("md/us/IBM") && !a.allows("md/eu"));
    }

    #[test]
    fn passwords_verify_against_their_hash_only() {
        assert!(argon2::PasswordHash::new(DUMMY_HASH).is_ok(), "the stand-in hash parses, so it costs a real check");
        let hash = hash_password(b"s3cret").unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        let cfg = UserConfig {
            name: "desk".into(),
            password_hash: hash,
            unix_user: None,
            publish: vec![],
            subscribe: vec!["md/>".into()],
            slow_consumer: None,
        };
        let users = Users::new(std::slice::from_ref(&cfg)).unwrap();
        assert_eq!(users.verify("desk", b"s3cret").unwrap().name, "desk");
        let e = users.verify("desk", b"wrong").unwrap_err();
        assert_eq!(
            e,
            users.verify("nobody", b"s3cret").unwrap_err().replace("nobody", "desk"),
            "same reason either way"
        );
        let twice = Users::new(&[cfg.clone(), cfg.clone()]).unwrap_err();
        assert_eq!((twice.key, twice.user.as_str()), ("name", "desk"));
        let plain = UserConfig { password_hash: "s3cret".into(), ..cfg.clone() };
        assert!(Users::new(&[plain]).unwrap_err().to_string().contains("hash-password"));
        let bad = UserConfig { subscribe: vec!["md//x".into()], ..cfg };
        assert_eq!(Users::new(&[bad]).unwrap_err().key, "subscribe");
    }

    /// Issue 44 item 5: a hash cheaper to guess than what
    /// `tickwire router hash-password` makes is refused at load, naming the
    /// user and what is weak.
    #[test]
    fn a_hash_weaker_than_the_argon2id_defaults_is_refused() {
        use argon2::password_hash::{PasswordHasher, SaltString};
        let hash = |alg, m, t, p| {
            let params = argon2::Params::new(m, t, p, None).unwrap();
            let a = argon2::Argon2::new(alg, argon2::Version::V0x13, params);
            a.hash_password(b"s3cret", &SaltString::encode_b64(b"0123456789abcdef").unwrap()).unwrap().to_string()
        };
        let user = |h: String| UserConfig {
            name: "desk".into(),
            password_hash: h,
            unix_user: None,
            publish: vec![],
            subscribe: vec![],
            slow_consumer: None,
        };
        let id = argon2::Algorithm::Argon2id;
        let e = Users::new(&[user(hash(id, 4096, 1, 1))]).unwrap_err();
        assert_eq!((e.user.as_str(), e.key), ("desk", "password_hash"));
        let e = e.to_string();
        assert!(
            e.contains("\"desk\"")
                && e.contains("m=4096 KiB of memory (at least 19456)")
                && e.contains("t=1 passes (at least 2)")
                && !e.contains("p=1")
                && e.contains("`tickwire router hash-password` makes a good one"),
            "{e}"
        );
        let e = Users::new(&[user(hash(id, 19456, 1, 1))]).unwrap_err().to_string();
        assert!(e.contains("t=1") && !e.contains("m="), "{e}");
        let e = Users::new(&[user(hash(argon2::Algorithm::Argon2i, 19456, 2, 1))]).unwrap_err().to_string();
        assert!(e.contains("argon2i is weaker than argon2id"), "{e}");
        // The defaults, and more, are taken.
        assert!(Users::new(&[user(hash(id, 19456, 2, 1))]).is_ok());
        assert!(Users::new(&[user(hash(id, 65536, 3, 4))]).is_ok());
        assert!(Users::new(&[user(DUMMY_HASH.into())]).is_ok(), "the stand-in hash is as costly as a real one");
    }
}
