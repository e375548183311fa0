//! `tickwire stat` and `tickwire clean`.

use crate::config::Settings;
use crate::units::parse_duration;
use clap::Args;
use std::time::Duration;
use tickwire_shm::{counters::Kind, status, CountersReader};

/// Options of `tickwire stat`.
#[derive(Debug, Args)]
pub struct StatArgs {
    /// Refresh every interval until interrupted (e.g. 1s).
    #[arg(long, value_parser = parse_duration)]
    watch: Option<Duration>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(s: &Settings, a: &StatArgs) -> Result<(), String> {
    loop {
        let text = snapshot(s, a.json)?;
        if a.watch.is_some() && !a.json {
            print!("\x1b[2J\x1b[H");
        }
        print!("{text}");
        match a.watch {
            Some(iv) => std::thread::sleep(iv),
            None => return Ok(()),
        }
    }
}

fn snapshot(s: &Settings, json: bool) -> Result<String, String> {
    if !s.dir.exists() {
        // Nothing has run here yet: an answer, not an error.
        return Ok(if json {
            "[]\n".into()
        } else {
            format!("no tickwire processes ({} does not exist)\n", s.dir.display())
        });
    }
    let mut entries: Vec<_> = std::fs::read_dir(&s.dir)
        .map_err(|e| format!("{}: {e}", s.dir.display()))?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    let mut out = String::new();
    let mut rows = Vec::new();
    for path in &entries {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.ends_with(".log") {
            match status(path) {
                Ok(st) => {
                    out.push_str(&format!(
                        "stream {}-{} session {:#x}: publisher pid {} ({}), tail {}, limit {}, heartbeat {} ms ago\n",
                        st.desc.channel,
                        st.desc.stream_id,
                        st.desc.session_id,
                        st.desc.publisher.pid,
                        if st.publisher_alive { "alive" } else { "DEAD" },
                        st.tail,
                        st.limit,
                        st.heartbeat_age_ms
                    ));
                    for (pid, pos, lossy, alive) in &st.subscribers {
                        out.push_str(&format!(
                            "  subscriber pid {pid} ({}{}) position {pos} lag {} bytes\n",
                            if *alive { "alive" } else { "DEAD" },
                            if *lossy { ", lossy" } else { "" },
                            st.tail.saturating_sub(*pos)
                        ));
                    }
                    rows.push(serde_json::json!({"file": name, "stream": st.desc.stream_id, "channel": st.desc.channel,
                        "publisher_pid": st.desc.publisher.pid, "publisher_alive": st.publisher_alive, "tail": st.tail,
                        "subscribers": st.subscribers.iter().map(|(p, pos, l, a)| serde_json::json!({"pid": p, "position": pos, "lossy": l, "alive": a})).collect::<Vec<_>>()}));
                }
                Err(e) => out.push_str(&format!("{name}: {e}\n")),
            }
        } else if name.starts_with("counters-") && name.ends_with(".twc") {
            match CountersReader::open(path) {
                Ok(r) => {
                    let alive = r.owner.is_alive();
                    out.push_str(&format!("process {} ({})\n", r.owner.pid, if alive { "alive" } else { "DEAD" }));
                    for set in r.sets() {
                        let side = match set.kind {
                            Kind::Publisher => "pub",
                            Kind::Subscriber => "sub",
                            Kind::UdpSender => "udp-send",
                            Kind::UdpReceiver => "udp-recv",
                            Kind::Router => "router",
                            Kind::RouterClient => "router-client",
                            Kind::RouterTopic => "router-topic",
                            Kind::Xdp => "xdp",
                            Kind::RouterAgent => "router-agent",
                            Kind::RouterAccept => "router-accept",
                            Kind::RouterRequests => "router-requests",
                            Kind::RouterClusterLink => "cluster-link",
                            Kind::Accel => "accel",
                        };
                        let vals: Vec<String> =
                            set.kind.names().iter().zip(set.values).map(|(n, v)| format!("{n}={v}")).collect();
                        out.push_str(&match set.kind {
                            Kind::Router
                            | Kind::RouterTopic
                            | Kind::Xdp
                            | Kind::RouterAgent
                            | Kind::RouterAccept
                            | Kind::RouterRequests
                            | Kind::RouterClusterLink
                            | Kind::Accel => {
                                format!("  {side} {}: {}\n", set.label, vals.join(" "))
                            }
                            Kind::RouterClient => {
                                format!("  {side} {} (id {}): {}\n", set.label, set.stream_id, vals.join(" "))
                            }
                            _ => format!(
                                "  {side} {}-{} session {:#x}: {}\n",
                                set.label,
                                set.stream_id,
                                set.session_id,
                                vals.join(" ")
                            ),
                        });
                        let map: serde_json::Map<String, serde_json::Value> =
                            set.kind.names().iter().zip(set.values).map(|(n, v)| ((*n).to_owned(), v.into())).collect();
                        rows.push(
                            serde_json::json!({"pid": r.owner.pid, "alive": alive, "side": side, "channel": set.label,
                            "stream": set.stream_id, "session": set.session_id, "counters": map}),
                        );
                    }
                }
                Err(e) => out.push_str(&format!("{name}: {e}\n")),
            }
        }
    }
    if json {
        return Ok(format!("{}\n", serde_json::Value::Array(rows)));
    }
    if out.is_empty() {
        out.push_str(&format!("no tickwire processes in {}\n", s.dir.display()));
    }
    Ok(out)
}

pub fn clean(s: &Settings) -> Result<(), String> {
    for ns in tickwire_lab::host::netns::clean_stale() {
        println!("removed network namespace {ns} (its lab process is gone)");
    }
    if !s.dir.exists() {
        println!("nothing to clean: {} does not exist", s.dir.display());
        return Ok(());
    }
    let reports = tickwire_shm::clean(&s.dir).map_err(|e| e.to_string())?;
    for r in &reports {
        println!("{} {}: {}", if r.removed { "removed" } else { "kept" }, r.path.display(), r.reason);
    }
    if reports.is_empty() {
        println!("nothing to clean in {}", s.dir.display());
    }
    Ok(())
}
