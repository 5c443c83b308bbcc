//! One line chart drawn as SVG with plotters: labelled series of (x, y) points, a linear or
//! logarithmic x axis, a legend.

use crate::plot::log_axis::LogAxis;
use anyhow::{anyhow, bail, Result};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use std::ops::Range;

/// Drawing size, pixels.
const SIZE: (u32, u32) = (900, 560);

/// Line colours, told apart also with colour blindness (Okabe-Ito), then repeated.
const COLORS: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
];

/// One labelled line.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// What to draw.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    /// Logarithmic x axis (points with x <= 0 are left out).
    pub x_log: bool,
    /// The y axis runs from 0 to this (at least the largest y).
    pub y_max: Option<f64>,
    /// A marker on every point (few points per line).
    pub markers: bool,
    /// Where the legend goes.
    pub legend: SeriesLabelPosition,
    pub series: Vec<Series>,
}

impl Chart {
    /// The chart as an SVG document.
    pub fn svg(&self) -> Result<String> {
        let pts = || {
            self.series
                .iter()
                .flat_map(|s| s.points.iter())
                .filter(|p| p.0.is_finite() && p.1.is_finite() && (!self.x_log || p.0 > 0.0))
        };
        if pts().next().is_none() {
            bail!("nothing to plot: the reports have no data points");
        }
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        let mut y_hi: f64 = self.y_max.unwrap_or(0.0);
        for &(x, y) in pts() {
            lo = lo.min(x);
            hi = hi.max(x);
            y_hi = y_hi.max(y);
        }
        let y = 0.0..if y_hi > 0.0 { y_hi * 1.05 } else { 1.0 };
        let mut svg = String::new();
        if self.x_log {
            // 1-2-5 ticks; two decimals below 1.
            self.draw(&mut svg, LogAxis::new(lo / 1.25, hi * 1.25), 2, y)?;
        } else {
            let pad = if hi > lo { (hi - lo) * 0.05 } else { 1.0 };
            let x = (lo - pad).max(0.0)..(hi + pad);
            self.draw(&mut svg, x.clone(), decimals(x.end - x.start), y)?;
        }
        Ok(svg)
    }

    fn draw<X>(&self, svg: &mut String, x: X, x_decimals: usize, y: Range<f64>) -> Result<()>
    where
        X: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64>,
    {
        let e = |e: DrawingAreaErrorKind<std::io::Error>| anyhow!("drawing the plot: {e}");
        let y_decimals = decimals(y.end - y.start);
        let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&self.title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(x, y)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc(&self.x_desc)
            .y_desc(&self.y_desc)
            .x_label_formatter(&|v| number(*v, x_decimals))
            .y_label_formatter(&|v| number(*v, y_decimals))
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 16))
            .light_line_style(BLACK.mix(0.06))
            .draw()
            .map_err(e)?;
        for (i, s) in self.series.iter().enumerate() {
            let style = COLORS[i % COLORS.len()].stroke_width(2);
            let points: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|p| !self.x_log || p.0 > 0.0)
                .collect();
            let line = LineSeries::new(points, style).point_size(if self.markers { 4 } else { 0 });
            chart
                .draw_series(line)
                .map_err(e)?
                .label(s.label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
        }
        chart
            .configure_series_labels()
            .position(self.legend.clone())
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(e)?;
        root.present().map_err(e)?;
        Ok(())
    }
}

/// Decimals that tell apart ticks about a tenth of `span` apart.
fn decimals(span: f64) -> usize {
    if span > 0.0 && span.is_finite() {
        (-(span / 10.0).log10()).ceil().clamp(0.0, 4.0) as usize
    } else {
        0
    }
}

/// An axis number with `decimals` decimals at most (trailing zeros dropped).
fn number(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_numbers_fit_the_span() {
        assert_eq!(number(52.2, decimals(1.5)), "52.2");
        assert_eq!(number(52.0, decimals(1.5)), "52");
        assert_eq!(number(0.5, decimals(1.05)), "0.5");
        assert_eq!(number(4.0, decimals(7.7)), "4");
        assert_eq!(number(350.0, decimals(370.0)), "350");
        assert_eq!(number(0.0, decimals(0.0)), "0");
    }
}
