//! What `lab router` (and `lab request`) prints: per rate, the offered
//! and achieved rates, the rows and their ratios to the floor, the system
//! calls per message on each side, and the NATS rounds beside the native
//! ones; then the highest rate sustained.

use super::{nats, RateResult, RouterLab};
use crate::base::host::machine::Machine;
use crate::base::output::print::{self, Format, Output};
use crate::base::output::report::LatencyRow;
use crate::base::output::Measured;
use crate::paths::Transport;
use crate::LabError;

/// Prints a run: per rate, what was offered and achieved, the router's
/// memory, the four rows and the ratios; then the highest rate sustained.
///
/// # Errors
/// A file of `out` cannot be written.
pub fn print(o: &RouterLab, results: &[RateResult], out: &Output, machine: &Machine) -> Result<(), LabError> {
    let all: Vec<Measured> = results.iter().flat_map(|r| r.rows.iter().cloned()).collect();
    if out.format != Format::Table {
        return print::latency_and_files(&all, out, machine, "One-way latency through the router by percentile");
    }
    let (transport, _) = o.names();
    let scenario = if o.fanout {
        format!("fan-out: {} publishers, {} subscribers each on md/>", o.publishers, o.subscribers)
    } else {
        format!("{} publishers each on its own topic, {} subscribers on one topic each", o.publishers, o.subscribers)
    };
    println!("machine: {}", machine.summary());
    println!(
        "router {transport}, {scenario}, {} B messages; router spinning on CPU {}, every client session on one \
         thread on CPU {}",
        o.size, o.common.cpus.remote, o.common.cpus.local
    );
    if o.floor() && o.request {
        println!("request mode: each publisher sends requests, the subscriber of its topic answers each at once;");
        println!("samples are round trips, from the request's intended time to its reply's arrival");
        println!(
            "floor (interleaved in rounds): the same clients publishing one way through the same router, each percentile doubled (two one-way hops)"
        );
    } else if o.floor() {
        let floor = match o.transport() {
            Transport::Tcp => "kernel TCP to a process on the router's CPU that writes each message back",
            _ => "a raw ring to a thread on the router's CPU that copies each message into a second raw ring",
        };
        println!("floor (same schedule, interleaved in rounds): {floor}");
    }
    if o.nats().is_some() {
        println!(
            "NATS rows (transport nats, interleaved: floor, native, NATS each round): the same router's NATS \
             listener, the same scenario from {} (tools/nats-lab) on CPU {}; the pause-free NATS rows leave \
             out the router's pauses only",
            nats::NATS_GO_VERSION,
            o.common.cpus.local
        );
    }
    for r in results {
        let row = &r.rows[0].row;
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        let (first, last) = (r.host.first().copied().unwrap_or_default(), r.host.last().copied().unwrap_or_default());
        println!();
        println!(
            "offered {} msg/s, achieved {:.0}, {} deliveries lost, {} discarded; {}; router RSS {:.1} MiB after \
             the first round, {:.1} MiB after the last",
            r.rate,
            row.achieved_rate.unwrap_or(0.0),
            row.lost,
            r.discarded,
            if r.sustained() { "sustained" } else { "NOT sustained" },
            mib(first.rss_bytes),
            mib(last.rss_bytes),
        );
        let (cycles, awake) = r.host.iter().fold((0, 0), |(c, a), h| (c + h.cycles, a + h.awake_ns));
        if cycles > 0 {
            println!(
                "router duty cycle: {:.0} ns on average ({cycles} cycles in {:.2} s awake)",
                awake as f64 / cycles as f64,
                awake as f64 / 1e9
            );
        }
        println!("{}", syscalls_line(r, o.transport()));
        if o.nats().is_some() {
            println!("{}", nats_syscalls_line(r));
        }
        let rows: Vec<LatencyRow> = r.rows.iter().map(|m| m.row.clone()).collect();
        print!("{}", crate::base::output::report::table(&rows));
        println!("{}", print::pauses_line(row));
        for l in nats_lines(r) {
            println!("{l}");
        }
        if o.secure {
            let secure = &r.rows[r.rows.len() - 2..];
            for (label, plain, with) in
                [("all", &r.rows[0].row, &secure[0].row), ("pause-free", &r.rows[1].row, &secure[1].row)]
            {
                println!(
                    "users, ACLs and metrics on ({label}): median {} ns against {} ns off ({:.3}x), mean {:.0} against {:.0} ns, \
                     p99.9 {} against {} ns, same run",
                    with.p50_ns,
                    plain.p50_ns,
                    with.p50_ns as f64 / plain.p50_ns.max(1) as f64,
                    with.mean_ns,
                    plain.mean_ns,
                    with.p999_ns,
                    plain.p999_ns
                );
            }
        }
    }
    match results.iter().rfind(|r| r.sustained()) {
        Some(r) => println!("\nhighest rate sustained: {} msg/s (of those offered)", r.rate),
        None => println!("\nno offered rate was sustained (lost, discarded, or achieved under 99%)"),
    }
    print::hlog(out, &all)?;
    if let Some(path) = &out.plot {
        print::distribution(path, "One-way latency through the router by percentile", &all)?;
    }
    Ok(())
}

/// System calls per message on each side, from the links' own counts of
/// reads and writes (and, beside them, the readiness polls: the router's
/// `epoll_wait`s, the harness's over its subscribers), per message
/// delivered.
fn syscalls_line(r: &RateResult, transport: Transport) -> String {
    if transport != Transport::Tcp {
        return "system calls: none on the message path (shared memory)".into();
    }
    let (mut reads, mut writes, mut polls, mut delivered, mut published) = (0, 0, 0, 0, 0);
    for h in &r.host {
        (reads, writes, polls) = (reads + h.reads, writes + h.writes, polls + h.polls);
        (delivered, published) = (delivered + h.round_deliveries, published + h.round_messages);
    }
    let per = |n: u64| n as f64 / delivered.max(1) as f64;
    let c = r.clients;
    format!(
        "system calls per message delivered (links' own counts; {published} published, {delivered} delivered): \
         clients {:.3} ({:.3} reads + {:.3} writes; {:.3} epoll_wait beside), router {:.3} ({:.3} reads + {:.3} \
         writes; {:.3} epoll_wait beside)",
        per(c.reads + c.writes),
        per(c.reads),
        per(c.writes),
        per(c.polls),
        per(reads + writes),
        per(reads),
        per(writes),
        per(polls)
    )
}

/// `--nats`: the router's system calls per delivery in the NATS rounds
/// (the links' own counts), beside the generator's lateness.
fn nats_syscalls_line(r: &RateResult) -> String {
    let (mut reads, mut writes, mut polls, mut delivered, mut published) = (0, 0, 0, 0, 0);
    for h in &r.nats_host {
        (reads, writes, polls) = (reads + h.reads, writes + h.writes, polls + h.polls);
        (delivered, published) = (delivered + h.round_deliveries, published + h.round_messages);
    }
    let per = |n: u64| n as f64 / delivered.max(1) as f64;
    format!(
        "NATS rounds: router {:.3} system calls per message delivered ({:.3} reads + {:.3} writes; {:.3} \
         epoll_wait beside; {published} published, {delivered} delivered); the Go client sent at most {:.1} us \
         after a message's intended time",
        per(reads + writes),
        per(reads),
        per(writes),
        per(polls),
        r.nats_late_max_ns as f64 / 1e3
    )
}

/// `--nats`: NATS against native, each distribution: the ratios of the
/// percentiles, the absolute values beside them.
fn nats_lines(r: &RateResult) -> Vec<String> {
    let find = |t: &str, d: &str| {
        r.rows.iter().find(|m| m.row.transport == t && m.row.distribution.as_deref() == Some(d)).map(|m| &m.row)
    };
    let mut out = Vec::new();
    for d in ["all", "pause_free"] {
        let (Some(n), Some(t)) = (find("nats", d), find("tcp", d)) else { continue };
        if n.count == 0 || t.count == 0 {
            out.push(format!("NATS / native ({d}): no messages in one of them"));
            continue;
        }
        let x = |a: u64, b: u64| crate::base::output::report::ratio(a, b);
        out.push(format!(
            "NATS / native ({d}): p50 {:.2}x ({} / {} ns), p99 {:.2}x ({} / {} ns), p99.9 {:.2}x ({} / {} ns), \
             max {} / {} ns; NATS achieved {:.0} msg/s, {} lost",
            x(n.p50_ns, t.p50_ns),
            n.p50_ns,
            t.p50_ns,
            x(n.p99_ns, t.p99_ns),
            n.p99_ns,
            t.p99_ns,
            x(n.p999_ns, t.p999_ns),
            n.p999_ns,
            t.p999_ns,
            n.max_ns,
            t.max_ns,
            n.achieved_rate.unwrap_or(0.0),
            n.lost
        ));
    }
    out
}
