//! SVG plots for reports: latency against message size (Exhibit 3), against
//! offered rate (Exhibit 4), and the percentile distribution on a 1/(1-p)
//! axis. SVG only: it needs no system fonts.

use hdrhistogram::Histogram;
use plotters::prelude::*;
use std::path::Path;

/// One line on a chart: a name and (x, y) points.
pub type Series = (String, Vec<(f64, f64)>);

const COLORS: [RGBColor; 6] = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn bounds(series: &[Series]) -> ((f64, f64), (f64, f64)) {
    let pts = series.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        return ((0.0, 1.0), (0.1, 1.0));
    }
    ((x0, x1.max(x0 + 1e-9)), (y0.max(1e-3), y1.max(y0 * 1.01 + 1e-3)))
}

/// Draws lines of latency (microseconds, log scale) against x.
///
/// # Errors
/// Drawing or I/O errors, as text.
pub fn lines(path: &Path, title: &str, x_desc: &str, series: &[Series], log_x: bool) -> Result<(), String> {
    lines_with(path, title, x_desc, "latency (us)", series, log_x)
}

/// [`lines`] with another y-axis label. The y axis is logarithmic when the
/// values span more than 20x, linear from zero otherwise (a narrow log axis
/// shows almost no tick labels).
///
/// # Errors
/// Drawing or I/O errors, as text.
pub fn lines_with(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    log_x: bool,
) -> Result<(), String> {
    let root = SVGBackend::new(path, (960, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let ((x0, x1), (y0, y1)) = bounds(series);
    let log_y = y1 / y0 > 20.0;
    let mut builder = ChartBuilder::on(&root);
    builder.caption(title, ("sans-serif", 22)).margin(12).x_label_area_size(48).y_label_area_size(70);
    // One body for the four axis combinations (their coordinate types differ).
    macro_rules! draw {
        ($x:expr, $y:expr) => {{
            let mut chart = builder.build_cartesian_2d($x, $y).map_err(err)?;
            chart.configure_mesh().x_desc(x_desc).y_desc(y_desc).draw().map_err(err)?;
            for (i, (name, pts)) in series.iter().enumerate() {
                let c = COLORS[i % COLORS.len()];
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)).point_size(3))
                    .map_err(err)?
                    .label(name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(err)?;
        }};
    }
    let (lx, ly) = ((x0 * 0.8..x1 * 1.25).log_scale(), (y0 * 0.8..y1 * 1.25).log_scale());
    let (x, y) = (x0..x1, 0.0..y1 * 1.15);
    match (log_x, log_y) {
        (true, true) => draw!(lx, ly),
        (true, false) => draw!(lx, y),
        (false, true) => draw!(x, ly),
        (false, false) => draw!(x, y),
    }
    root.present().map_err(err)
}

/// The percentile distribution of each histogram: x is 1/(1-p) on a log axis
/// (so 90%, 99%, 99.9% ... are evenly spaced), y is latency in microseconds.
///
/// # Errors
/// Drawing or I/O errors, as text.
pub fn percentiles(path: &Path, title: &str, hists: &[(String, &Histogram<u64>)]) -> Result<(), String> {
    let series: Vec<Series> = hists
        .iter()
        .map(|(name, h)| {
            let pts = (0..=200)
                .map(|k| {
                    let tail = 10f64.powf(-(k as f64) / 40.0); // 1 - p from 1 down to 1e-5
                    let p = (1.0 - tail).clamp(0.0, 0.99999);
                    (1.0 / (1.0 - p), h.value_at_quantile(p) as f64 / 1000.0)
                })
                .collect();
            (name.clone(), pts)
        })
        .collect();
    lines(path, title, "percentile, as 1/(1-p): 10 = 90%, 100 = 99%, 1000 = 99.9%, 10^4 = 99.99%", &series, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_svg_with_titles_labels_and_legends() {
        let dir = std::env::temp_dir().join(format!("tw-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("size.svg");
        let s = vec![("udp p50".to_owned(), vec![(64.0, 4.8), (1472.0, 6.1)])];
        lines(&p, "latency vs size", "message size (bytes)", &s, false).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("latency vs size") && svg.contains("udp p50"));
        let mut h = crate::base::output::report::histogram();
        for v in 1..10_000u64 {
            h.record(v).unwrap();
        }
        let q = dir.join("pct.svg");
        percentiles(&q, "distribution", &[("x".into(), &h)]).unwrap();
        assert!(std::fs::read_to_string(&q).unwrap().contains("distribution"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
