//! The plot: tokens admitted per minute by each strategy, against the limit.

use std::path::Path;

use plotters::prelude::*;

use super::report::Report;
use crate::error::CliError;

fn plot_error(e: impl std::fmt::Display) -> CliError {
    CliError::Plot(e.to_string())
}

/// Writes the report's tokens-per-minute lines, one per strategy, and the
/// limit as a dashed line, to an SVG file at `path`.
pub fn write_svg(report: &Report, path: &Path) -> Result<(), CliError> {
    let minutes = report.strategies.iter().map(|s| s.tokens_per_minute.len()).max().unwrap_or(0).max(1);
    let limit = report.token_limit.as_ref().map(|l| l.per_minute);
    let peak = (report.strategies.iter())
        .flat_map(|s| s.tokens_per_minute.iter().map(|&t| t as f64))
        .chain(limit)
        .fold(1.0, f64::max);
    let unit = report.token_limit.as_ref().map_or("prompt + completion tokens".to_owned(), |l| l.limit.clone());
    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{}: tokens admitted per minute", report.scenario), ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..minutes as f64, 0f64..peak * 1.15)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("minute")
        .x_label_formatter(&|m| format!("{m:.0}"))
        .y_label_formatter(&|t| format!("{:.0}k", t / 1000.0))
        .y_desc(format!("tokens admitted ({unit})"))
        .draw()
        .map_err(plot_error)?;
    for (i, strategy) in report.strategies.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        // Each minute's total is drawn at the minute's midpoint.
        let points = strategy.tokens_per_minute.iter().enumerate().map(|(m, &t)| (m as f64 + 0.5, t as f64));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(plot_error)?
            .label(strategy.name.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    if let Some(limit) = limit {
        let dashes = (0..minutes * 4).step_by(2).map(|q| {
            let x = q as f64 / 4.0;
            PathElement::new([(x, limit), ((x + 0.25).min(minutes as f64), limit)], BLACK.stroke_width(1))
        });
        chart
            .draw_series(dashes)
            .map_err(plot_error)?
            .label("limit per minute")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(1)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerLeft)
        .draw()
        .map_err(plot_error)?;
    root.present().map_err(plot_error)
}
