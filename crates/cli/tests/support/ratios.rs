//! The lab's floor ratios checked against the rows they come from (a
//! ratio recomputed with the product's own formula proves nothing).
#![allow(dead_code)] // each test file uses some of them

/// `ratio` is a 3-decimal rounding of `exact`.
pub fn rounds_to(ratio: f64, exact: f64) -> bool {
    (ratio - exact).abs() <= 0.000_501 + exact * 1e-12
}

/// A row's floor ratios are to the floor row printed beside it: the floor
/// figures it carries are that row's, and each ratio is the row's percentile
/// over that row's (p99 included, which the row does not carry).
pub fn ratios_to(r: &serde_json::Value, floor: &serde_json::Value) {
    let u = |x: &serde_json::Value, k: &str| x[k].as_u64().unwrap_or_else(|| panic!("no {k} in {x}"));
    assert_eq!(u(r, "floor_p50_ns"), u(floor, "p50_ns"), "{r}\n{floor}");
    assert_eq!(u(r, "floor_p999_ns"), u(floor, "p999_ns"), "{r}\n{floor}");
    assert_eq!(u(r, "floor_size"), u(floor, "size"), "{r}\n{floor}");
    for p in ["p50", "p99", "p999"] {
        let ratio = r[format!("ratio_{p}")].as_f64().unwrap_or_else(|| panic!("no ratio_{p} in {r}"));
        let exact = u(r, &format!("{p}_ns")) as f64 / u(floor, &format!("{p}_ns")) as f64;
        assert!(rounds_to(ratio, exact), "ratio_{p} {ratio}, not {exact}: {r}\n{floor}");
    }
}

/// `ratios_to` for a pause-free row and its floor's pause-free row. A host
/// pause as long as the run leaves no pause-free message on one side (CI
/// saw one of 304 ms in a 300 ms step): such a row has nothing to compare,
/// so it must carry no ratio rather than a made-up one.
pub fn pause_free_ratios_to(r: &serde_json::Value, floor: &serde_json::Value) {
    assert_eq!(r["distribution"], "pause_free", "{r}");
    assert_eq!(floor["distribution"], "pause_free", "{floor}");
    if r["count"] == 0 || floor["count"] == 0 {
        assert!(r.get("ratio_p50").map_or(true, serde_json::Value::is_null), "{r}");
    } else {
        ratios_to(r, floor);
    }
}

/// `carried_floor` for each row of a mode's output that is not a floor row,
/// except a pause-free row with nothing to compare: a host pause as long as
/// the step leaves either that row or its floor's pause-free row (printed in
/// the same output, at the same offered rate) empty, and then the row must
/// carry no ratio rather than a made-up one (CI saw the floor's side empty
/// in a 200 ms sweep step).
pub fn carried_floors(rows: &[serde_json::Value]) {
    for r in rows.iter().filter(|r| r["mode"] != "floor") {
        if r.get("floor_p50_ns").map_or(true, serde_json::Value::is_null) && r["distribution"] == "pause_free" {
            assert!(r.get("ratio_p50").map_or(true, serde_json::Value::is_null), "{r}");
            let empty = |x: &serde_json::Value| x["count"] == 0 || x["p50_ns"] == 0;
            let floor_empty = rows.iter().any(|f| {
                f["mode"] == "floor"
                    && f["distribution"] == "pause_free"
                    && f.get("offered_rate") == r.get("offered_rate")
                    && empty(f)
            });
            assert!(empty(r) || floor_empty, "a pause-free row without a floor, and neither side empty: {r}");
        } else {
            carried_floor(r);
        }
    }
}

/// A row whose floor is not printed beside it: the ratios agree with the
/// floor figures it carries, and the floor p99 that `ratio_p99` implies lies
/// between the floor's p50 and p99.9.
pub fn carried_floor(r: &serde_json::Value) {
    let u = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("no {k} in {r}")) as f64;
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("no {k} in {r}"));
    let (fp50, fp999) = (u("floor_p50_ns"), u("floor_p999_ns"));
    assert!(0.0 < fp50 && fp50 <= fp999, "{r}");
    assert!(rounds_to(f("ratio_p50"), u("p50_ns") / fp50), "{r}");
    assert!(rounds_to(f("ratio_p999"), u("p999_ns") / fp999), "{r}");
    let rp99 = f("ratio_p99");
    if rp99 >= 0.001 {
        // The ratio's rounding makes the implied p99 uncertain by 0.0005 / rp99.
        let (fp99, slack) = (u("p99_ns") / rp99, 0.000_501 / rp99);
        assert!(fp99 >= fp50 * (1.0 - slack) - 1.0 && fp99 <= fp999 * (1.0 + slack) + 1.0, "floor p99 {fp99}: {r}");
    } else {
        // Below 0.0005: the floor's p99 (at most its p99.9) is over 2000 times the row's.
        assert!(u("p99_ns") * 2000.0 <= fp999, "{r}");
    }
}

/// A throughput row beside its floor row: the floor rate it carries is that
/// row's, and the ratio of the median rounds lies within the per-round
/// ratios (if every round's rate is at least m times its floor round's, so
/// is the median's); one round: all three are the rates of the counts over
/// the durations, which both rows report.
pub fn throughput_ratio(r: &serde_json::Value, floor: &serde_json::Value) {
    let f = |x: &serde_json::Value, k: &str| x[k].as_f64().unwrap_or_else(|| panic!("no {k} in {x}"));
    assert_eq!(f(r, "floor_msgs_per_s"), f(floor, "msgs_per_s"), "{r}\n{floor}");
    assert_eq!(r["rounds"], floor["rounds"], "{r}\n{floor}");
    let (ratio, lo, hi) = (f(r, "ratio"), f(r, "ratio_min"), f(r, "ratio_max"));
    assert!(0.0 < lo && lo - 0.0011 <= ratio && ratio <= hi + 0.0011, "{r}");
    if r["rounds"] == 1 {
        let rate = |x: &serde_json::Value| f(x, "count") / f(x, "duration_s");
        let exact = rate(r) / rate(floor);
        assert!(
            (ratio - exact).abs() <= exact * 0.01 + 0.0006,
            "ratio {ratio}, counts over durations say {exact}: {r}\n{floor}"
        );
        assert!(lo == ratio && hi == ratio, "{r}");
    }
}
