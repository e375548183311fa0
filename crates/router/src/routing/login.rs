//! Logging in: the routing core's side of users ([`crate::access`]):
//! HELLO's password sent for checking, the answer acted on, a new set of
//! users applied to the sessions open; and the deadline for being
//! welcomed ([`Limits::hello_timeout`](crate::Limits::hello_timeout),
//! [`Router::take_expired`]). No I/O: the agent carries the checks to the
//! [`AuthWorker`](crate::access::AuthWorker) and back.
//!
//! Its state is [`Login`].

use super::{control, Disconnect, Router};
use crate::access::{AuthRequest, AuthResult, Reach, Users};
use crate::session::Session;
use std::collections::VecDeque;
use std::sync::Arc;
use tickwire_shm::counters::Kind;
use tickwire_wire::client::{credentials, welcome, ClientKind, ClientRepr, RejectCode, HEADER_LEN};
use tickwire_wire::MAX_TOPIC_LENGTH;

/// Frames other than SUBSCRIBE a client may send while its password is
/// being checked.
const UNCHECKED_FRAMES: usize = 256;
/// Their bytes.
const UNCHECKED_BYTES: usize = 1 << 20;
/// The most bytes one SUBSCRIBE takes (header, pattern, durable name).
const SUBSCRIBE_BYTES: usize = HEADER_LEN + 2 * MAX_TOPIC_LENGTH;

/// Keeps a frame read while the session's password is being checked. A
/// client sends its subscriptions right after HELLO (as NATS clients send
/// every SUB after CONNECT): up to `max_subscriptions` of them are kept
/// beside 256 other frames, each kind within its byte bound.
pub(super) fn keep_unchecked(s: &mut Session, bytes: &[u8], max_subscriptions: usize) -> Result<(), Disconnect> {
    let subscribe = bytes.first() == Some(&(ClientKind::Subscribe as u8));
    let (most, max_bytes) = if subscribe {
        (max_subscriptions, max_subscriptions.saturating_mul(SUBSCRIBE_BYTES))
    } else {
        (UNCHECKED_FRAMES, UNCHECKED_BYTES)
    };
    let (frames, held) = &mut s.unchecked_kept[usize::from(subscribe)];
    if *frames >= most || *held + bytes.len() > max_bytes {
        return Err(Disconnect {
            code: RejectCode::Limit,
            reason: format!(
                "over {most} {} or {max_bytes} bytes sent before its password was checked",
                if subscribe { "subscriptions" } else { "frames" }
            ),
        });
    }
    *frames += 1;
    *held += bytes.len();
    s.unchecked.push(bytes.to_vec());
    Ok(())
}

/// Users, the password checks asked for, the sessions awaiting WELCOME.
#[derive(Debug, Default)]
pub(super) struct Login {
    /// The configured users (`None`: every client is anonymous).
    users: Option<Arc<Users>>,
    /// Password checks to make ([`Router::take_auth_requests`]).
    auth_out: Vec<AuthRequest>,
    next_ticket: u64,
    /// Some session's subscription reaches topics its user may not read:
    /// a topic's targets are checked against their users' ACLs.
    filtered: bool,
    /// Sessions not yet welcomed when attached, oldest first: (session,
    /// serial, attached at, monotonic ns; 0: not yet known). Welcomed and
    /// ended ones are dropped when they reach the front
    /// ([`Router::take_expired`]).
    unwelcomed: VecDeque<(u32, u64, u64)>,
    /// Some of `unwelcomed` were attached without a time.
    unstamped: bool,
}

impl Login {
    /// Whether users are configured (every client logs in as one).
    #[inline]
    pub(super) fn enabled(&self) -> bool {
        self.users.is_some()
    }

    /// Whether some subscription reaches topics its user may not read.
    #[inline]
    pub(super) fn filtered(&self) -> bool {
        self.filtered
    }

    /// A subscription was taken that reaches topics its user may not read.
    pub(super) fn note_filtered(&mut self) {
        self.filtered = true;
    }

    /// Session `id` of `serial`, attached at `now` (monotonic ns; 0: not
    /// known), must be welcomed within the hello timeout.
    pub(super) fn expect_welcome(&mut self, id: u32, serial: u64, now: u64) {
        self.unwelcomed.push_back((id, serial, now));
        self.unstamped |= now == 0;
    }
}

impl Router {
    /// Sends WELCOME to session `id` (its HELLO accepted) and gives it its
    /// counters.
    pub(super) fn welcome(&mut self, id: u32) -> Result<(), Disconnect> {
        let client = self.client_id(id);
        let Some(Some(s)) = self.sessions.get_mut(id as usize) else { return Ok(()) };
        let label = match s.user() {
            Some(u) => format!("{}@{} ({u})", s.name, s.peer),
            None => format!("{}@{}", s.name, s.peer),
        };
        s.counters = self.counters.as_ref().and_then(|c| c.allocate(Kind::RouterClient, client, 0, &label).ok());
        // The largest frame it takes (low 32 bits): a client refuses a
        // bigger publish rather than have the session closed on it (and,
        // guaranteed, resend it after every reconnection). The heartbeat
        // interval in ms (high 32 bits): a client keeps its link alive
        // from the start, polled or not.
        let beat_ms =
            u64::try_from(self.limits.heartbeat_interval.as_millis()).unwrap_or(u64::MAX).min(u32::MAX.into());
        // A client of protocol 3 on: the cluster's other routers, for it
        // to fail over to (as NATS's `connect_urls`).
        let routers = match &self.other_routers {
            // (Their NATS listeners are for NATS clients.)
            Some(r) if s.protocol >= 3 => {
                r.get().split(',').filter(|u| !u.starts_with("nats://")).collect::<Vec<_>>().join(",")
            }
            _ => String::new(),
        };
        let body = welcome::body(&self.name, &routers);
        let welcome = ClientRepr {
            value: client,
            sequence: (self.limits.max_frame as u64).min(u32::MAX.into()) | beat_ms << 32,
            body: &body,
            ..ClientRepr::new(ClientKind::Welcome)
        };
        control(s, &welcome)
    }

    /// HELLO from session `id` with `body` (its credentials) on a router
    /// with users: the password goes for checking, and the session's
    /// frames wait until the answer.
    pub(super) fn ask_password(&mut self, id: u32, body: &[u8]) -> Result<(), Disconnect> {
        let forbidden = |reason: &str| Disconnect { code: RejectCode::Forbidden, reason: reason.into() };
        let (user, password) = match credentials::parse(body) {
            Ok(Some(c)) => c,
            Ok(None) => {
                self.totals.forbidden += 1;
                return Err(forbidden("this router requires a user and password"));
            }
            Err(e) => return Err(Disconnect::protocol(format!("HELLO: {e}"))),
        };
        let ticket = self.login.next_ticket;
        self.login.next_ticket += 1;
        let wanted = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let mut address = String::new();
        if let Some(Some(s)) = self.sessions.get_mut(id as usize) {
            s.ticket = Some(ticket);
            s.auth_wanted = Some(Arc::clone(&wanted));
            // "tcp 10.0.0.7:51234": the host, not the port.
            let peer = s.peer.rsplit_once(' ').map_or(s.peer.as_str(), |p| p.1);
            address = peer.rsplit_once(':').map_or(peer, |p| p.0).to_owned();
        }
        self.login.auth_out.push(AuthRequest {
            agent: self.me as usize,
            session: id,
            ticket,
            user: user.to_owned(),
            password: password.to_vec(),
            address,
            wanted,
        });
        Ok(())
    }

    /// The user whose `unix_user` is uid `uid` (a shared-memory client's,
    /// from its login socket), if users are configured and one is.
    pub fn user_of_uid(&self, uid: u32) -> Option<String> {
        self.login.users.as_ref()?.by_uid(uid).map(str::to_owned)
    }

    /// Session `id` showed a TLS client certificate that the router's
    /// client CA signed, naming `user` (mutual TLS; the agent learns it
    /// from the handshake, before the session's HELLO is handled).
    pub fn set_certified(&mut self, id: u32, user: String) {
        if let Some(Some(s)) = self.sessions.get_mut(id as usize) {
            s.certified = Some(user);
        }
    }

    /// HELLO from session `id`, whose certificate names `user`: it logs in
    /// as that user without a password check. With users configured the
    /// user must be one of them; a user named in HELLO too must be the
    /// same (its password is not checked). Without users it stays
    /// anonymous, as every client then is.
    pub(super) fn login_certified(&mut self, id: u32, user: String, body: &[u8]) -> Result<(), Disconnect> {
        let forbidden = |reason: String| Disconnect { code: RejectCode::Forbidden, reason };
        let named = match credentials::parse(body) {
            Ok(c) => c.map(|(u, _)| u.to_owned()),
            Err(e) => return Err(Disconnect::protocol(format!("HELLO: {e}"))),
        };
        if let Some(named) = named.filter(|n| *n != user) {
            self.totals.forbidden += 1;
            return Err(forbidden(format!(
                "HELLO names user {named:?}, its client certificate or Unix user (unix_user) user {user:?}"
            )));
        }
        let found = match &self.login.users {
            None => None,
            Some(users) => match users.get(&user) {
                Some(u) => Some(Arc::clone(u)),
                None => {
                    self.totals.forbidden += 1;
                    return Err(forbidden(format!("client certificate names user {user:?}, not one of [[users]]")));
                }
            },
        };
        let default_policy = self.limits().slow_consumer;
        if let Some(Some(s)) = self.sessions.get_mut(id as usize) {
            s.user = found;
            s.choose_policy(default_policy);
        }
        self.welcome(id)
    }

    /// Password checks to make, for the agent to hand to the worker.
    pub fn take_auth_requests(&mut self) -> Vec<AuthRequest> {
        std::mem::take(&mut self.login.auth_out)
    }

    /// The answer to a password check: the session is welcomed and the
    /// frames it sent meanwhile are acted on, or it must end.
    ///
    /// # Errors
    /// [`Disconnect`] (`Forbidden`) for a wrong password, or what a held
    /// frame caused.
    pub fn handle_auth(&mut self, r: AuthResult) -> Result<(), Disconnect> {
        let default_policy = self.limits().slow_consumer;
        let Some(Some(s)) = self.sessions.get_mut(r.session as usize) else { return Ok(()) };
        if s.ticket != Some(r.ticket) {
            return Ok(()); // an earlier session in this slot
        }
        s.ticket = None;
        // Checked against the users of its time; held to today's (none
        // now: everyone is anonymous).
        let user = r.outcome.and_then(|u| match &self.login.users {
            None => Ok(None),
            Some(us) => match us.get(&u.name) {
                Some(now) if now.same_login(&u) => Ok(Some(Arc::clone(now))),
                _ => Err(format!("user {:?} changed while its password was checked", u.name)),
            },
        });
        match user {
            Err(why) => {
                self.totals.forbidden += 1;
                Err(Disconnect { code: RejectCode::Forbidden, reason: why })
            }
            Ok(user) => {
                s.user = user;
                s.choose_policy(default_policy);
                let unchecked = std::mem::take(&mut s.unchecked);
                s.unchecked_kept = [(0, 0); 2];
                self.welcome(r.session)?;
                // WELCOME may wait for room: the next flush visits it even
                // if no kept frame follows to mark it.
                if let Some(Some(s)) = self.sessions.get_mut(r.session as usize) {
                    s.mark(r.session, &mut self.backlog);
                }
                for f in unchecked {
                    self.handle_frame(r.session, &f)?;
                }
                Ok(())
            }
        }
    }

    /// Whether clients must log in as a user (users are configured).
    pub fn requires_login(&self) -> bool {
        self.login.enabled()
    }

    /// Applies a new set of users (a reload) to every open session:
    /// sessions of a user removed, or whose password changed, must end (they
    /// are returned); the others carry on under their user's new ACLs, and
    /// lose (with a REJECT) any subscription that now reaches nothing they
    /// may read.
    pub fn set_users(&mut self, users: Option<Arc<Users>>) -> Vec<(u32, Disconnect)> {
        self.login.users = users.filter(|u| !u.is_empty());
        // Who may read what changed.
        self.topics.invalidate();
        self.login.filtered = false;
        let mut ending = Vec::new();
        let default_policy = self.limits().slow_consumer;
        for id in 0..self.sessions.len() as u32 {
            let Some(Some(s)) = self.sessions.get_mut(id as usize) else { continue };
            // Not yet welcomed: `handle_auth` holds it to the new users.
            if !s.hello || s.ticket.is_some() {
                continue;
            }
            s.access.clear();
            let forbidden = |reason: String| Disconnect { code: RejectCode::Forbidden, reason };
            let now = match (&self.login.users, &s.user, &s.certified) {
                (None, _, _) => None,
                // A certificate's user does not log in with a password: it
                // carries on while it is one of the users.
                (Some(users), _, Some(named)) => match users.get(named) {
                    Some(u) => Some(Arc::clone(u)),
                    None => {
                        let why = format!("user {named:?} of its client certificate is not one of [[users]] now");
                        ending.push((id, forbidden(why)));
                        continue;
                    }
                },
                (Some(_), None, None) => {
                    ending.push((id, forbidden("users are configured now: connect with a user and password".into())));
                    continue;
                }
                (Some(users), Some(was), None) => match users.get(&was.name) {
                    Some(u) if u.same_login(was) => Some(Arc::clone(u)),
                    Some(_) => {
                        ending.push((id, forbidden(format!("the password of user {:?} changed", was.name))));
                        continue;
                    }
                    None => {
                        ending.push((id, forbidden(format!("user {:?} was removed", was.name))));
                        continue;
                    }
                },
            };
            s.user = now;
            s.choose_policy(default_policy);
            self.recheck_subscriptions(id);
        }
        self.totals.forbidden += ending.len() as u64;
        ending
    }

    /// Holds session `id`'s subscriptions to its user's ACL.
    fn recheck_subscriptions(&mut self, id: u32) {
        let Some(Some(s)) = self.sessions.get_mut(id as usize) else { return };
        let Some(user) = s.user.clone() else {
            s.filtered = false;
            return;
        };
        let mut gone = Vec::new();
        s.filtered = false;
        for (&sid, text) in &s.subscriptions {
            let Some(p) = super::parsed(text) else { continue };
            match user.subscribe.reach(&p) {
                Reach::All => {}
                Reach::Some => {
                    s.filtered = true;
                    self.login.filtered = true;
                }
                Reach::None => gone.push(sid),
            }
        }
        for sid in gone {
            let Some(Some(s)) = self.sessions.get_mut(id as usize) else { return };
            let Some(p) = s.subscriptions.remove(&sid).and_then(|t| super::parsed(&t)) else { continue };
            self.drop_subscription(&p, id, sid);
            let Some(Some(s)) = self.sessions.get_mut(id as usize) else { return };
            s.stats.rejects += 1;
            let why = format!("user {:?} may no longer read {}", user.name, p.as_str());
            let r = ClientRepr {
                value: RejectCode::Forbidden as u32,
                sequence: sid.into(),
                body: why.as_bytes(),
                ..ClientRepr::new(ClientKind::Reject)
            };
            let _ = control(s, &r);
        }
        if let Some(Some(s)) = self.sessions.get_mut(id as usize) {
            s.mark(id, &mut self.backlog);
        }
    }

    /// Sessions not welcomed within
    /// [`Limits::hello_timeout`](crate::Limits::hello_timeout) of their
    /// attachment at `now` (monotonic ns), each once, with why (code
    /// `Limit`), counted in [`Totals::hello_timeouts`](crate::counters::Totals::hello_timeouts):
    /// no HELLO came (a silent connection, a frame stopped halfway, a TLS
    /// handshake that stalled), or its password is still being checked
    /// (the check's answer is then dropped: its ticket is gone). The
    /// agent closes them. Each call looks at the sessions attached
    /// longest ago only: a call where nothing expires costs one look.
    pub fn take_expired(&mut self, now: u64) -> Vec<(u32, Disconnect)> {
        let timeout = self.limits.hello_timeout;
        let limit = timeout.as_nanos() as u64;
        let mut expired = Vec::new();
        if self.login.unstamped {
            // Attached without a time ([`Router::attach`]): their deadline
            // runs from now. Kept in order of time (the agent never does
            // this: it says when).
            self.login.unstamped = false;
            for e in self.login.unwelcomed.iter_mut().filter(|e| e.2 == 0) {
                e.2 = now.max(1);
            }
            self.login.unwelcomed.make_contiguous().sort_by_key(|e| e.2);
        }
        while let Some(&(id, serial, at)) = self.login.unwelcomed.front() {
            let Some(ticket) = self.awaiting_welcome(id, serial) else {
                // Welcomed, closing or gone.
                self.login.unwelcomed.pop_front();
                continue;
            };
            if now.saturating_sub(at) < limit {
                break;
            }
            self.login.unwelcomed.pop_front();
            let d = humantime::format_duration(timeout);
            let reason = match ticket {
                None => format!("no HELLO within {d}"),
                Some(t) => {
                    // Not yet handed to the worker: it never is.
                    self.login.auth_out.retain(|r| r.session != id || r.ticket != t);
                    format!("not logged in within {d}")
                }
            };
            self.totals.hello_timeouts += 1;
            expired.push((id, Disconnect { code: RejectCode::Limit, reason }));
        }
        expired
    }

    /// Whether session `id` of `serial` still waits to be welcomed (and
    /// is not closing); if so, its password check's ticket, if any.
    fn awaiting_welcome(&self, id: u32, serial: u64) -> Option<Option<u64>> {
        match self.sessions.get(id as usize) {
            Some(Some(s)) if s.serial == serial && !s.is_welcomed() && !s.closing => Some(s.ticket),
            _ => None,
        }
    }

    /// Drops the sessions at the front of the deadline queue that no longer
    /// wait (welcomed, closing, gone), so that it stays short even where
    /// [`Router::take_expired`] is not called.
    pub(super) fn trim_unwelcomed(&mut self) {
        while let Some(&(id, serial, _)) = self.login.unwelcomed.front() {
            if self.awaiting_welcome(id, serial).is_some() {
                break;
            }
            self.login.unwelcomed.pop_front();
        }
    }
}
