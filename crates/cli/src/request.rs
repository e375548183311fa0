//! `tickwire request` and `tickwire reply`: request/reply through a
//! router. A request goes to every subscriber of its topic (one member of
//! each queue group); its replies come back on the requester's inbox.

use crate::config::Settings;
use crate::login::{connect, wait, Login};
use crate::units::parse_duration;
use clap::Args;
use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tickwire_agent::stop::{requested as stopped, StopSignals};
use tickwire_client::{Client, ClientEvent, ClientOptions, Gather, PublishError, RequestError};

/// The exit status of `tickwire request` when nothing subscribes to the
/// topic.
const NO_RESPONDERS: u8 = 3;

/// The router a request or reply command talks to, and as whom.
#[derive(Debug, Args)]
pub struct Target {
    /// The router: ipc (the router in --dir), tcp://HOST:PORT or tls://HOST:PORT.
    #[arg(long)]
    pub(crate) router: String,
    /// With --router tls://: the certificate authority (PEM) the router's certificate must chain to.
    #[arg(long)]
    pub(crate) tls_ca: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) login: Login,
    /// Give up if the router is not there within this long [default: wait until Ctrl-C].
    #[arg(long, value_parser = parse_duration)]
    pub(crate) wait: Option<Duration>,
}

impl Target {
    /// Connects as `role` and waits for the router (`None`: Ctrl-C came
    /// first).
    pub(crate) fn connect(&self, s: &Settings, role: &str) -> Result<Option<Client>, String> {
        let credentials = self.login.credentials(self.router == "ipc")?;
        // First Ctrl-C: stop; second: exit at once.
        let _ = StopSignals::command().install();
        let opts = self.login.identity(ClientOptions::default());
        let mut client = connect(s, &self.router, role, self.tls_ca.as_deref(), credentials, opts)?;
        Ok(wait(&mut client, self.wait, |_| {})?.then_some(client))
    }

    /// Asks the router itself (a request on one of its `_sys/` topics) as
    /// `role`, waiting `timeout` for the answer (`how`: what sets it, for
    /// the error); `None`: Ctrl-C came before the router.
    pub(crate) fn ask_router(
        &self,
        s: &Settings,
        role: &str,
        topic: &str,
        body: &[u8],
        (timeout, how): (Duration, &str),
    ) -> Result<Option<Vec<u8>>, String> {
        let Some(mut client) = self.connect(s, role)? else { return Ok(None) };
        let answer = client.request(topic, body, timeout, |_| {});
        client.close();
        answer.map(Some).map_err(|e| match e {
            RequestError::TimedOut => format!("no answer from the router to {topic} within {timeout:?}{how}"),
            RequestError::NoResponders => format!("the router at {} does not serve {topic}", self.router),
            RequestError::Refused(tickwire_wire::client::RejectCode::Forbidden) => {
                format!("{topic}: refused: this user may not publish on {topic} (the router's ACLs)")
            }
            e => format!("{topic}: {e}"),
        })
    }
}

/// Options of `tickwire request`.
#[derive(Debug, Args)]
pub struct RequestArgs {
    #[command(flatten)]
    pub(crate) to: Target,
    /// The topic to send the request on.
    #[arg(long)]
    pub(crate) topic: String,
    /// The request's payload [default: empty].
    #[arg(long, conflicts_with = "stdin")]
    pub(crate) data: Option<String>,
    /// Send each line of standard input as a request instead.
    #[arg(long)]
    pub(crate) stdin: bool,
    /// How long to wait for the reply (with --replies: for all of them).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
    /// Requests to send, one after another (each waits for its reply).
    #[arg(long, default_value_t = 1)]
    pub(crate) count: u64,
    /// Gather replies from every responder (scatter-gather), up to this many a request (0: as many as
    /// come within --timeout).
    #[arg(long)]
    pub(crate) replies: Option<usize>,
}

/// Options of `tickwire reply`.
#[derive(Debug, Args)]
pub struct ReplyArgs {
    #[command(flatten)]
    pub(crate) to: Target,
    /// The topic pattern to answer requests on (levels split by /, * one level, > the rest).
    #[arg(long)]
    pub(crate) topic: String,
    /// Answer as a member of this queue group: each request goes to one member.
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// Answer each request with its own payload.
    #[arg(long, conflicts_with = "exec", required_unless_present = "exec")]
    pub(crate) echo: bool,
    /// Answer each request with what `sh -c CMD` prints, given the request's payload on its standard input
    /// (TICKWIRE_TOPIC holds the request's topic).
    #[arg(long)]
    pub(crate) exec: Option<String>,
    /// Stop after answering this many requests.
    #[arg(long)]
    pub(crate) count: Option<u64>,
    /// Stop after this long.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) duration: Option<Duration>,
}

/// Runs `tickwire request`: prints each reply on standard output (text as
/// it is, else its size); exit status 3 when nothing listens.
pub fn request(s: &Settings, a: &RequestArgs) -> ExitCode {
    match run_request(s, a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failed::NoResponders(topic)) => {
            eprintln!("tickwire: no responders: nothing subscribes to {topic}");
            ExitCode::from(NO_RESPONDERS)
        }
        Err(Failed::Other(e)) => {
            eprintln!("tickwire: {e}");
            ExitCode::FAILURE
        }
    }
}

enum Failed {
    NoResponders(String),
    Other(String),
}

impl From<String> for Failed {
    fn from(e: String) -> Self {
        Failed::Other(e)
    }
}

fn run_request(s: &Settings, a: &RequestArgs) -> Result<(), Failed> {
    tickwire_topic::check_topic(&a.topic).map_err(|e| e.to_string())?;
    let Some(mut client) = a.to.connect(s, "request")? else { return Ok(()) };
    let payloads: Box<dyn Iterator<Item = Vec<u8>>> = if a.stdin {
        Box::new(std::io::stdin().lock().lines().map_while(Result::ok).map(String::into_bytes))
    } else {
        let one = a.data.clone().unwrap_or_default().into_bytes();
        Box::new(std::iter::repeat(one).take(a.count as usize))
    };
    let mut out = std::io::stdout().lock();
    for payload in payloads {
        if stopped() {
            break;
        }
        let replies = match a.replies {
            None => vec![client.request(&a.topic, &payload, a.timeout, |_| {}).map_err(|e| failed(e, a))?],
            Some(n) => {
                let until = Gather { within: a.timeout, count: (n > 0).then_some(n), quiet: None };
                client.request_many(&a.topic, &payload, until, |_| {}).map_err(|e| failed(e, a))?
            }
        };
        for r in &replies {
            print_payload(&mut out, r);
        }
        if a.replies.is_some() {
            eprintln!("{} replies", replies.len());
        }
    }
    client.close();
    Ok(())
}

fn failed(e: RequestError, a: &RequestArgs) -> Failed {
    match e {
        RequestError::NoResponders => Failed::NoResponders(a.topic.clone()),
        RequestError::TimedOut => Failed::Other(format!("no reply on {} within {:?} (--timeout)", a.topic, a.timeout)),
        e => Failed::Other(format!("request on {}: {e}", a.topic)),
    }
}

fn print_payload(out: &mut impl Write, p: &[u8]) {
    let _ = match std::str::from_utf8(p) {
        Ok(text) if !text.chars().any(|c| c.is_control() && c != '\t') => writeln!(out, "{text}"),
        _ => writeln!(out, "({} bytes)", p.len()),
    };
    let _ = out.flush();
}

/// Runs `tickwire reply`: answers requests on `--topic` until `--count`,
/// `--duration` or Ctrl-C; says how many it answered.
pub fn reply(s: &Settings, a: &ReplyArgs) -> Result<(), String> {
    let Some(mut client) = a.to.connect(s, "reply")? else { return Ok(()) };
    match &a.queue {
        Some(g) => client.subscribe_queue(&a.topic, g),
        None => client.subscribe(&a.topic),
    }
    .map_err(|e| e.to_string())?;
    let group = a.queue.as_deref().map(|g| format!(" in queue group {g}")).unwrap_or_default();
    eprintln!("answering requests on {}{group} at {}", a.topic, a.to.router);
    let started = Instant::now();
    let mut answered = 0u64;
    let mut todo: Vec<(String, String, Vec<u8>)> = Vec::new();
    let mut refused = None;
    loop {
        let done = a.count.is_some_and(|c| answered >= c) || a.duration.is_some_and(|d| started.elapsed() >= d);
        if done || stopped() {
            break;
        }
        let n = client.poll(
            |e| match e {
                ClientEvent::Request(r) => todo.push((r.inbox.to_owned(), r.topic.to_owned(), r.payload.to_vec())),
                ClientEvent::Rejected { reason, .. } => refused = Some(format!("the router refused: {reason}")),
                ClientEvent::Disconnected { reason } => eprintln!("{reason}; waiting for the router to come back"),
                _ => {}
            },
            64,
        );
        if let Some(why) = refused.take() {
            return Err(why);
        }
        for (inbox, topic, payload) in todo.drain(..) {
            let answer = match &a.exec {
                Some(cmd) => run(cmd, &topic, &payload)?,
                None => payload,
            };
            send_reply(&mut client, &inbox, &answer)?;
            answered += 1;
        }
        if n == 0 {
            client.park(Duration::from_millis(1));
        }
    }
    let _ = client.flush();
    eprintln!("answered {answered} requests in {:.3} s", started.elapsed().as_secs_f64());
    client.close();
    Ok(())
}

/// Sends a reply, polling while the router has no room (up to 5 s).
fn send_reply(client: &mut Client, inbox: &str, answer: &[u8]) -> Result<(), String> {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match client.reply(inbox, answer) {
            Ok(()) => return Ok(()),
            // The requester's session went with the connection.
            Err(PublishError::NotConnected) => return Ok(()),
            Err(PublishError::BackPressured) if Instant::now() < until => {
                client.poll(|_| {}, 0);
            }
            Err(e) => return Err(format!("reply: {e}")),
        }
    }
}

/// Runs `sh -c cmd` with `payload` on its standard input; its standard
/// output is the answer.
fn run(cmd: &str, topic: &str, payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut child = std::process::Command::new("sh")
        .args(["-c", cmd])
        .env("TICKWIRE_TOPIC", topic)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("--exec {cmd:?}: {e}"))?;
    if let Some(mut i) = child.stdin.take() {
        // A command that reads nothing closes its end: not an error.
        let _ = i.write_all(payload);
    }
    let mut out = Vec::new();
    if let Some(mut o) = child.stdout.take() {
        o.read_to_end(&mut out).map_err(|e| format!("--exec {cmd:?}: {e}"))?;
    }
    let status = child.wait().map_err(|e| format!("--exec {cmd:?}: {e}"))?;
    if !status.success() {
        eprintln!("--exec {cmd:?} exited with {status}; its output is the reply all the same");
    }
    Ok(out)
}
