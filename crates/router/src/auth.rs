//! Password checks off the routing threads, that a flood cannot starve
//! (issue 42, item 2).
//!
//! One thread, [`AuthWorker`], runs argon2 (tens of milliseconds a check).
//! What it does with the checks asked of it:
//! * **Fair.** Checks wait per user named, and users are served in turn
//!   (round robin): a flood of guesses against one user delays another
//!   user's login by one check, not by the flood.
//! * **Abandoned checks are dropped.** A check whose session has ended
//!   (its client left, its hello timeout passed) is not made.
//! * **Failures back off.** Each failed check for a (user, address) pair
//!   makes the next one for that pair wait longer (50 ms, doubling, at most
//!   5 s), without holding the thread: other pairs are served meanwhile.
//! * **A success is remembered.** A keyed digest (HMAC-SHA256 under a key
//!   made at start, never written anywhere) of the user and password that
//!   verified: a client reconnecting with the right password is answered
//!   at once, not behind argon2. A change of users forgets them all.
//! * **Counted**: [`AuthStats`], and one line a second at most while
//!   checks fail.

use crate::access::{User, Users};
use ring::hmac;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The wait after a pair's first failure; it doubles with each one more.
const BACKOFF_FIRST: Duration = Duration::from_millis(50);
/// The longest wait.
const BACKOFF_MOST: Duration = Duration::from_secs(5);
/// Digests of good passwords kept per user.
const REMEMBERED_PER_USER: usize = 4;

/// A password check asked of the [`AuthWorker`].
#[derive(Debug)]
pub struct AuthRequest {
    /// The routing agent that asked.
    pub agent: usize,
    /// The session (on that agent).
    pub session: u32,
    /// The session's ticket: a result for an older session in the same
    /// slot is ignored.
    pub ticket: u64,
    /// The user named.
    pub user: String,
    /// The password given.
    pub password: Vec<u8>,
    /// The client's address (failures back off per user and address).
    pub address: String,
    /// Cleared when the session ends: the check is then not made.
    pub wanted: Arc<AtomicBool>,
}

/// What the [`AuthWorker`] found.
#[derive(Debug)]
pub struct AuthResult {
    /// See [`AuthRequest::session`].
    pub session: u32,
    /// See [`AuthRequest::ticket`].
    pub ticket: u64,
    /// The user, or why not.
    pub outcome: Result<Arc<User>, String>,
}

/// What the worker did with the checks asked of it, since it started.
#[derive(Debug, Default)]
pub struct AuthStats {
    /// Checked with argon2.
    pub checked: AtomicU64,
    /// Answered from a remembered success, without argon2.
    pub remembered: AtomicU64,
    /// Failed (no such user, a wrong password).
    pub failed: AtomicU64,
    /// Dropped unmade: the session had ended.
    pub abandoned: AtomicU64,
    /// Made to wait for an earlier failure of the same user and address.
    pub throttled: AtomicU64,
}

enum Job {
    Check(AuthRequest),
    Users(Arc<Users>),
}

/// A thread that checks passwords, so that no routing agent stops for the
/// tens of milliseconds an argon2 check takes; each result goes back
/// through `reply(agent, result)`. See the module's doc for the order.
#[derive(Debug)]
pub struct AuthWorker {
    tx: Sender<Job>,
    stats: Arc<AuthStats>,
}

impl AuthWorker {
    /// Starts the thread with `users`; it ends when the worker is dropped.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start(users: Arc<Users>, reply: impl Fn(usize, AuthResult) + Send + 'static) -> std::io::Result<Self> {
        let (tx, rx): (Sender<Job>, Receiver<Job>) = channel();
        let stats = Arc::new(AuthStats::default());
        let mut state = State::new(users, Arc::clone(&stats))?;
        std::thread::Builder::new().name("router-auth".into()).spawn(move || state.run(&rx, &reply))?;
        Ok(Self { tx, stats })
    }

    /// Asks for a check.
    pub fn check(&self, r: AuthRequest) {
        let _ = self.tx.send(Job::Check(r));
    }

    /// Checks from now on use `users` (and forget every remembered success).
    pub fn set_users(&self, users: Arc<Users>) {
        let _ = self.tx.send(Job::Users(users));
    }

    /// What it did so far.
    pub fn stats(&self) -> &AuthStats {
        &self.stats
    }
}

/// A (user, address) pair's failures.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    not_before: Instant,
}

struct State {
    users: Arc<Users>,
    /// Checks waiting, per user named.
    waiting: FxHashMap<String, VecDeque<AuthRequest>>,
    /// Users with checks waiting, in the order they are served.
    turn: VecDeque<String>,
    failures: FxHashMap<(String, String), Failures>,
    key: hmac::Key,
    remembered: FxHashMap<String, VecDeque<hmac::Tag>>,
    stats: Arc<AuthStats>,
    /// Failures since the last line about them, and when that was.
    unlogged: u64,
    logged: Instant,
}

impl State {
    fn new(users: Arc<Users>, stats: Arc<AuthStats>) -> std::io::Result<Self> {
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .map_err(|_| std::io::Error::other("no randomness for the password-digest key"))?;
        Ok(Self {
            users,
            waiting: FxHashMap::default(),
            turn: VecDeque::new(),
            failures: FxHashMap::default(),
            key,
            remembered: FxHashMap::default(),
            stats,
            unlogged: 0,
            logged: Instant::now(),
        })
    }

    fn run(&mut self, rx: &Receiver<Job>, reply: &impl Fn(usize, AuthResult)) {
        loop {
            // Everything asked so far joins its user's line.
            loop {
                let job = match self.next_due() {
                    // A check can be made now: take only what is queued.
                    Some(Duration::ZERO) => match rx.try_recv() {
                        Ok(j) => j,
                        Err(_) => break,
                    },
                    // Every waiting check is throttled: sleep until the
                    // first may go, or a new job.
                    Some(wait) => match rx.recv_timeout(wait) {
                        Ok(j) => j,
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => return,
                    },
                    None => match rx.recv() {
                        Ok(j) => j,
                        Err(_) => return,
                    },
                };
                match job {
                    Job::Users(u) => {
                        self.users = u;
                        self.remembered.clear();
                    }
                    // A password that verified before costs a digest, not
                    // argon2: answered at once, ahead of any line or wait.
                    Job::Check(r) if self.is_remembered(&r) => self.answer(r, reply),
                    Job::Check(r) => {
                        if !self.waiting.contains_key(&r.user) {
                            self.turn.push_back(r.user.clone());
                        }
                        self.waiting.entry(r.user.clone()).or_default().push_back(r);
                    }
                }
            }
            if let Some(r) = self.take_next() {
                self.answer(r, reply);
            }
        }
    }

    /// How long until a waiting check may be made (zero: now); `None`:
    /// nothing waits.
    fn next_due(&self) -> Option<Duration> {
        let now = Instant::now();
        self.waiting
            .values()
            .filter_map(VecDeque::front)
            .map(|r| self.not_before(r).map_or(Duration::ZERO, |t| t.saturating_duration_since(now)))
            .min()
    }

    fn not_before(&self, r: &AuthRequest) -> Option<Instant> {
        self.failures.get(&(r.user.clone(), r.address.clone())).map(|f| f.not_before)
    }

    /// The next check to make: the first user in turn whose first check
    /// is not throttled (abandoned checks are dropped on the way).
    fn take_next(&mut self) -> Option<AuthRequest> {
        let now = Instant::now();
        for _ in 0..self.turn.len() {
            let user = self.turn.pop_front()?;
            let Some(line) = self.waiting.get_mut(&user) else { continue };
            while line.front().is_some_and(|r| !r.wanted.load(Ordering::Acquire)) {
                if let Some(mut r) = line.pop_front() {
                    r.password.fill(0);
                }
                self.stats.abandoned.fetch_add(1, Ordering::Relaxed);
            }
            let Some(front) = line.front() else {
                self.waiting.remove(&user);
                continue;
            };
            if self.failures.get(&(user.clone(), front.address.clone())).is_some_and(|f| f.not_before > now) {
                self.turn.push_back(user);
                continue;
            }
            let r = line.pop_front();
            if line.is_empty() {
                self.waiting.remove(&user);
            } else {
                self.turn.push_back(user);
            }
            return r;
        }
        None
    }

    fn digest(&self, r: &AuthRequest) -> hmac::Tag {
        hmac::sign(&self.key, &[r.user.as_bytes(), &[0], &r.password].concat())
    }

    fn is_remembered(&self, r: &AuthRequest) -> bool {
        let digest = self.digest(r);
        self.remembered.get(&r.user).is_some_and(|d| d.iter().any(|t| t.as_ref() == digest.as_ref()))
    }

    fn answer(&mut self, mut r: AuthRequest, reply: &impl Fn(usize, AuthResult)) {
        let digest = self.digest(&r);
        let known = self.remembered.get(&r.user).is_some_and(|d| d.iter().any(|t| t.as_ref() == digest.as_ref()));
        let outcome = match (known, self.users.get(&r.user)) {
            (true, Some(u)) => {
                self.stats.remembered.fetch_add(1, Ordering::Relaxed);
                Ok(Arc::clone(u))
            }
            _ => {
                self.stats.checked.fetch_add(1, Ordering::Relaxed);
                self.users.verify(&r.user, &r.password)
            }
        };
        r.password.fill(0);
        let pair = (r.user.clone(), r.address.clone());
        match &outcome {
            Ok(_) => {
                self.failures.remove(&pair);
                let d = self.remembered.entry(r.user.clone()).or_default();
                if !d.iter().any(|t| t.as_ref() == digest.as_ref()) {
                    d.push_back(digest);
                    if d.len() > REMEMBERED_PER_USER {
                        d.pop_front();
                    }
                }
            }
            Err(_) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                let f = self.failures.entry(pair).or_insert(Failures { count: 0, not_before: Instant::now() });
                f.count = f.count.saturating_add(1);
                let wait = BACKOFF_FIRST.saturating_mul(1 << (f.count - 1).min(7)).min(BACKOFF_MOST);
                f.not_before = Instant::now() + wait;
                if self.waiting.get(&r.user).is_some_and(|l| l.iter().any(|x| x.address == r.address)) {
                    self.stats.throttled.fetch_add(1, Ordering::Relaxed);
                }
                self.note_failure();
            }
        }
        // Forget pairs whose wait is long over (a bounded table).
        if self.failures.len() > 4096 {
            let now = Instant::now();
            self.failures.retain(|_, f| f.not_before + BACKOFF_MOST > now);
        }
        reply(r.agent, AuthResult { session: r.session, ticket: r.ticket, outcome });
    }

    /// One line a second at most while checks fail.
    fn note_failure(&mut self) {
        self.unlogged += 1;
        if self.logged.elapsed() >= Duration::from_secs(1) {
            let s = &self.stats;
            tracing::warn!(
                failed = self.unlogged,
                total_failed = s.failed.load(Ordering::Relaxed),
                abandoned = s.abandoned.load(Ordering::Relaxed),
                throttled = s.throttled.load(Ordering::Relaxed),
                "password checks failing"
            );
            self.unlogged = 0;
            self.logged = Instant::now();
        }
    }
}
