//! `tickwire lab cluster` end to end: three routers in network namespaces
//! linked as a cluster, one-way latency from a publisher on one to a
//! subscriber on another beside two TCP forwarders, and the spread
//! scenario beside one router alone; nothing left behind. Runs as root
//! (network namespaces), in `make test`.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

/// The lab's namespaces (`tw<pid>a<n>`, `tw<pid>b<n>`) of process `pid`.
fn namespaces_of(pid: u32) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let prefix = format!("tw{pid}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.strip_prefix(&prefix).is_some_and(|t| t.starts_with(['a', 'b'])))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_cluster_run_measures_both_parts_beside_their_floors_and_leaves_nothing() {
    let d = std::env::temp_dir().join(format!("tw-labcluster-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let args = "--rate 2k --duration 300ms --rounds 1 --spread-rate 3k --publishers 3 --subscribers 3";
    let child = Command::new(BIN)
        .arg("--dir")
        .arg(&d)
        .args(["lab", "cluster"])
        .args(args.split_whitespace())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut child = child;
    // The pipes read as the run goes (a full pipe would stall it), and a
    // deadline: a run that hangs fails the test, not CI.
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out_reader = drain(child.stdout.take().map(|r| Box::new(r) as Box<dyn std::io::Read + Send>));
    let err_reader = drain(child.stderr.take().map(|r| Box::new(r) as Box<dyn std::io::Read + Send>));
    let until = std::time::Instant::now() + std::time::Duration::from_secs(180);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > until {
            let _ = child.kill();
            panic!("lab cluster {args}: still running after 180 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let (stdout, stderr) = (out_reader.join().unwrap(), err_reader.join().unwrap());
    assert!(status.success(), "lab cluster {args}: {stderr}\n{stdout}");
    // The latency part: the cluster's rows beside the forwarders', every message delivered.
    assert!(stdout.contains("1 publisher on lab-a -> 1 subscriber on lab-b"), "{stdout}");
    assert!(stdout.contains("offered 2000 msg/s"), "{stdout}");
    assert!(stdout.contains("forward_tcp x2"), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("floor: achieved ")), "{stdout}");
    // At 2k msg/s the floor keeps the rate, and the ratio is printed.
    assert!(stdout.lines().any(|l| l.starts_with("all: p50 ")), "{stdout}");
    // The spread part, beside one router.
    assert!(stdout.contains("offered 3000 msg/s"), "{stdout}");
    assert!(stdout.contains("one router: achieved"), "{stdout}");
    for l in stdout.lines().filter(|l| l.starts_with("offered ") || l.starts_with("one router")) {
        assert!(l.contains(" 0 deliveries lost, 0 discarded"), "{l}\n{stdout}");
    }
    assert!(namespaces_of(pid).is_empty(), "namespaces left: {:?}", namespaces_of(pid));
    let left: Vec<_> = std::fs::read_dir(&d).map(|r| r.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(left.iter().all(|n| n == "counters"), "left in {}: {left:?}", d.display());
    let _ = std::fs::remove_dir_all(&d);
}
