//! The results as a PNG: pods/s per workload, one bar per scheduler.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::run::RunResult;
use crate::schedulers::Scheduler;
use crate::workloads::Kind;

const FONT: &str = "sans-serif";

fn color(s: Scheduler) -> RGBColor {
    match s {
        Scheduler::KubeScheduler => RGBColor(66, 133, 244),
        Scheduler::Mcsched => RGBColor(234, 67, 53),
        Scheduler::McschedJson => RGBColor(251, 188, 5),
        Scheduler::BindOnly => RGBColor(190, 190, 190),
        Scheduler::BindOnlyJson => RGBColor(150, 150, 150),
        Scheduler::BindEvents => RGBColor(100, 100, 100),
        Scheduler::BindEventsJson => RGBColor(60, 60, 60),
    }
}

/// Draws `results` into `path` (PNG). The font is embedded in the program, so the chart
/// needs no system fonts.
pub fn draw(path: &Path, results: &[RunResult], title: &str) -> anyhow::Result<()> {
    // A second registration fails harmlessly (the quick test may draw twice).
    let _ = register_font(FONT, FontStyle::Normal, epaint_default_fonts::UBUNTU_LIGHT);
    let workloads: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| results.iter().any(|r| r.workload == *k))
        .collect();
    let schedulers: Vec<Scheduler> = Scheduler::KNOWN
        .into_iter()
        .filter(|s| results.iter().any(|r| r.scheduler == *s))
        .collect();
    let max = results
        .iter()
        .filter_map(|r| r.throughput)
        .fold(1.0_f64, f64::max);

    let root = BitMapBackend::new(path, (1280, 640)).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
    let slots = workloads.len().max(1);
    let per = schedulers.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..slots as f64, 0f64..max * 1.15)
        .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(slots * 2 + 1)
        .x_label_formatter(&|x| {
            // Labels sit in the middle of each workload's slot.
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 1e-6 {
                workloads
                    .get(i)
                    .map(|k| k.name().to_string())
                    .unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("pods/s (first to last binding)")
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(|e| anyhow::anyhow!("chart: {e}"))?;

    let width = 0.8 / per as f64;
    for (si, s) in schedulers.iter().enumerate() {
        let bars: Vec<_> = workloads
            .iter()
            .enumerate()
            .filter_map(|(wi, k)| {
                let r = results
                    .iter()
                    .find(|r| r.workload == *k && r.scheduler == *s)?;
                let x0 = wi as f64 + 0.1 + si as f64 * width;
                Some((x0, r.throughput.unwrap_or(0.0)))
            })
            .collect();
        let c = color(*s);
        chart
            .draw_series(
                bars.iter().map(|(x0, v)| {
                    Rectangle::new([(*x0, 0.0), (*x0 + width * 0.92, *v)], c.filled())
                }),
            )
            .map_err(|e| anyhow::anyhow!("chart: {e}"))?
            .label(s.label())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
        chart
            .draw_series(bars.iter().map(|(x0, v)| {
                Text::new(
                    format!("{v:.0}"),
                    (*x0 + width * 0.1, *v + max * 0.01),
                    (FONT, 13).into_font().color(&BLACK),
                )
            }))
            .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .label_font((FONT, 15))
        .draw()
        .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
    root.present().map_err(|e| anyhow::anyhow!("chart: {e}"))?;
    Ok(())
}
