//! SVG plots of JSON reports, drawn with plotters' SVG backend:
//!
//! - [`ttft_cdf_svg`]: one line per report, the fraction of its measured requests
//!   ([`crate::sample`]) whose TTFT is at most x ms (a log x axis when the TTFTs span more
//!   than 10x);
//! - [`throughput_svg`]: one line per label (engine, with the inferd extensions used), its
//!   reports' combined generated tok/s against their agent counts.

mod chart;
mod log_axis;
pub mod series;

pub use chart::{Chart, Series};

use crate::report::BenchReport;
use anyhow::{Context, Result};
use plotters::chart::SeriesLabelPosition;
use std::path::Path;

fn default_title(what: &str, reports: &[BenchReport]) -> String {
    format!(
        "{what}: {} ({})",
        series::distinct(reports.iter().map(|r| r.workload_name().to_string())),
        series::distinct(reports.iter().map(|r| r.model_name()))
    )
}

/// The TTFT CDF of `reports`, labelled by `labels` (one per report; empty: from the reports,
/// see [`series::labels`]).
pub fn ttft_cdf_svg(
    reports: &[BenchReport],
    labels: &[String],
    title: Option<&str>,
) -> Result<String> {
    let labels = series::labels(reports, labels, true)?;
    let lines = series::ttft_cdf_series(reports, &labels);
    let xs = || lines.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (lo, hi) = (xs().fold(f64::INFINITY, f64::min), xs().fold(0.0, f64::max));
    let x_log = lo > 0.0 && hi / lo > 10.0;
    Chart {
        title: title.map_or_else(|| default_title("TTFT CDF", reports), str::to_string),
        x_desc: format!(
            "time to first token, ms{}",
            if x_log { " (log scale)" } else { "" }
        ),
        y_desc: "fraction of requests".into(),
        x_log,
        y_max: Some(1.0),
        markers: false,
        legend: SeriesLabelPosition::LowerRight,
        series: lines,
    }
    .svg()
}

/// Generated tok/s (all agents together) against agents, one line per label.
pub fn throughput_svg(
    reports: &[BenchReport],
    labels: &[String],
    title: Option<&str>,
) -> Result<String> {
    let labels = series::labels(reports, labels, false)?;
    Chart {
        title: title.map_or_else(
            || default_title("Throughput vs agents", reports),
            str::to_string,
        ),
        x_desc: "agents".into(),
        y_desc: "generated tok/s, all agents".into(),
        x_log: false,
        y_max: None,
        markers: true,
        legend: SeriesLabelPosition::UpperLeft,
        series: series::throughput_series(reports, &labels),
    }
    .svg()
}

/// Writes an SVG document, creating the directory.
pub fn write_svg(path: &Path, svg: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClientConfig;
    use crate::fleet::{FleetConfig, FleetSummary};
    use crate::record::RequestRecord;
    use crate::report::Workload;

    /// A fleet report of `agents` agents whose TTFTs are `ttft_ms` apart, `tok_s` tok/s.
    fn fleet(engine: &str, agents: usize, ttft_ms: u64, sessions: bool) -> BenchReport {
        let recs: Vec<RequestRecord> = (0..agents)
            .map(|a| {
                let first = ttft_ms * 1000 * (a as u64 + 1);
                let mut r = RequestRecord {
                    agent: a,
                    turn: 0,
                    role: "agent".into(),
                    start_us: 0,
                    first_token_us: Some(first),
                    end_us: first + 640_000,
                    chunk_us: (0..64).map(|i| first + i * 10_000).collect(),
                    max_tokens: 64,
                    completion_tokens: 64,
                    prompt_tokens: Some(512),
                    cached_tokens: Some(256),
                    usage_reported: true,
                    finish_reason: Some("length".into()),
                    error: None,
                    ttft_us: None,
                    max_gap_us: None,
                };
                r.derive();
                r
            })
            .collect();
        let wall = recs.iter().map(|r| r.end_us).max().unwrap();
        let config = FleetConfig {
            agents,
            sessions,
            ..Default::default()
        };
        let summary = FleetSummary::from_records(&recs, agents, wall);
        let mut r = BenchReport::new(
            ClientConfig::new("http://x"),
            None,
            Workload::Fleet { config, summary },
            recs,
        );
        r.meta.insert("engine".into(), engine.into());
        r.meta.insert("model".into(), "SmolLM2-135M".into());
        r
    }

    /// A well-formed SVG document: one root, every tag closed.
    fn assert_svg(svg: &str) {
        assert!(
            svg.trim_start().starts_with("<svg"),
            "{}",
            &svg[..80.min(svg.len())]
        );
        assert!(svg.trim_end().ends_with("</svg>"));
        let mut depth = 0i64;
        for tag in svg.split('<').skip(1) {
            let body = &tag[..tag.find('>').expect("unclosed tag")];
            if body.starts_with('/') {
                depth -= 1;
            } else if !body.ends_with('/') && !body.starts_with('?') && !body.starts_with('!') {
                depth += 1;
            }
            assert!(depth >= 0);
        }
        assert_eq!(depth, 0, "unbalanced tags");
    }

    #[test]
    fn ttft_cdf_svg_has_a_labelled_line_per_report() {
        let reports = [
            fleet("llama.cpp", 8, 400, false),
            fleet("inferd", 8, 150, false),
            fleet("inferd", 8, 20, true),
        ];
        let svg = ttft_cdf_svg(&reports, &[], None).unwrap();
        assert_svg(&svg);
        for label in ["llama.cpp", "inferd", "inferd +sessions"] {
            assert!(
                svg.contains(&format!("\n{label}\n</text>")),
                "no {label} in the legend"
            );
        }
        assert!(svg.contains("TTFT CDF: fleet (SmolLM2-135M)"));
        // 20 ms .. 3200 ms spans more than 10x: a log axis.
        assert!(svg.contains("(log scale)"));
        assert!(svg.matches("<polyline").count() >= 3);

        let path =
            std::env::temp_dir().join(format!("inferd-bench-cdf-{}.svg", std::process::id()));
        write_svg(&path, &svg).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), svg);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn throughput_svg_draws_one_line_per_engine() {
        let reports: Vec<BenchReport> = [1, 2, 4, 8]
            .into_iter()
            .flat_map(|n| {
                [
                    fleet("llama.cpp", n, 300, false),
                    fleet("inferd", n, 100, false),
                ]
            })
            .collect();
        let s = series::throughput_series(&reports, &series::labels(&reports, &[], false).unwrap());
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].label, "llama.cpp");
        let xs: Vec<f64> = s[1].points.iter().map(|p| p.0).collect();
        assert_eq!(xs, [1.0, 2.0, 4.0, 8.0]);

        let labels: Vec<String> = (0..8).map(|i| ["A", "B"][i % 2].to_string()).collect();
        let svg = throughput_svg(&reports, &labels, Some("tok/s vs agents")).unwrap();
        assert_svg(&svg);
        assert!(svg.contains("\nA\n</text>") && svg.contains("\nB\n</text>"));
        assert!(svg.contains("tok/s vs agents"));
        assert!(throughput_svg(&reports, &["only one".into()], None).is_err());
    }
}
