//! docs/benchmarks.png: three panels of grouped bars (plotters, bitmap
//! backend). Text needs a TrueType font; the first found of a few usual
//! paths is used, and without one the bars are drawn without labels.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

use crate::results::Results;

const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

fn register_font() -> bool {
    for path in FONTS {
        if let Ok(bytes) = std::fs::read(path) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
    }
    false
}

struct Panel {
    title: String,
    y_label: String,
    categories: Vec<String>,
    series: Vec<(String, RGBColor, Vec<f64>)>,
    target: Option<f64>,
    log: bool,
}

/// Draws the chart of `res` to `path`.
pub fn draw(res: &Results, path: &Path) -> anyhow::Result<()> {
    let text = register_font();
    let blue = RGBColor(31, 119, 180);
    let orange = RGBColor(255, 127, 14);
    let green = RGBColor(44, 160, 44);

    let overhead = Panel {
        title: "1. Uncontended acquire+release, cycles/s".into(),
        y_label: "cycles per second".into(),
        categories: res.overhead.iter().map(|o| o.store.clone()).collect(),
        series: vec![
            (
                "leasehold".into(),
                blue,
                res.overhead.iter().map(|o| o.leasehold_cps).collect(),
            ),
            (
                "raw SDK loop".into(),
                orange,
                res.overhead.iter().map(|o| o.raw_cps).collect(),
            ),
        ],
        target: None,
        log: false,
    };
    let with_other: Vec<_> = res
        .handoff
        .iter()
        .filter(|h| h.same_process.is_some())
        .collect();
    let handoff = Panel {
        title: "2. Handoff latency p50, ms (log)".into(),
        y_label: "ms".into(),
        categories: with_other.iter().map(|h| h.store.clone()).collect(),
        series: vec![
            (
                "same process".into(),
                blue,
                with_other
                    .iter()
                    .map(|h| h.same_process.map(|l| l.p50_ms).unwrap_or(0.0))
                    .collect(),
            ),
            (
                "other process".into(),
                green,
                with_other
                    .iter()
                    .map(|h| h.other_process.map(|l| l.p50_ms).unwrap_or(0.0))
                    .collect(),
            ),
        ],
        target: Some(50.0),
        log: true,
    };
    let mut peer_series = vec![
        ("leasehold".to_string(), blue, Vec::new()),
        ("peer".to_string(), orange, Vec::new()),
    ];
    let mut peer_cats = Vec::new();
    for p in &res.peers {
        peer_cats.push(format!("{} cycles/s", p.store));
        peer_series[0].2.push(p.leasehold_cps.unwrap_or(0.0));
        peer_series[1].2.push(p.peer_cps);
    }
    let peers = Panel {
        title: "6. Peers: cycles/s".into(),
        y_label: "cycles per second".into(),
        categories: peer_cats,
        series: peer_series,
        target: None,
        log: false,
    };

    let root = BitMapBackend::new(path, (1500, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, 3));
    for (area, panel) in panels.iter().zip([overhead, handoff, peers]) {
        draw_panel(area, &panel, text)?;
    }
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}

fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    p: &Panel,
    text: bool,
) -> anyhow::Result<()> {
    if p.categories.is_empty() {
        if text {
            let (w, h) = area.dim_in_pixel();
            area.draw(&Text::new(
                format!("{}: not run", p.title),
                (20, h as i32 / 2),
                ("sans-serif", 16),
            ))?;
            let _ = w;
        }
        return Ok(());
    }
    let n = p.categories.len().max(1);
    let max = p
        .series
        .iter()
        .flat_map(|s| s.2.iter().copied())
        .chain(p.target)
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.25;
    let transform = |v: f64| if p.log { (v.max(0.01)).log10() } else { v };
    let (lo, hi) = if p.log {
        (-2.0, max.log10().ceil())
    } else {
        (0.0, max)
    };
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(12)
        .x_label_area_size(if text { 40 } else { 0 })
        .y_label_area_size(if text { 60 } else { 0 });
    if text {
        builder.caption(&p.title, ("sans-serif", 18));
    }
    let mut chart = builder.build_cartesian_2d(0f64..n as f64, lo..hi)?;
    if text {
        let cats = p.categories.clone();
        let log = p.log;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&move |x| {
                let i = x.floor() as usize;
                if (x - x.floor() - 0.5).abs() < 0.01 {
                    cats.get(i).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&move |y| {
                if log {
                    let v = 10f64.powf(*y);
                    if v >= 10.0 {
                        format!("{v:.0}")
                    } else if v >= 1.0 {
                        format!("{v:.1}")
                    } else {
                        format!("{v:.2}")
                    }
                } else {
                    format!("{y:.0}")
                }
            })
            .y_labels(if p.log { 6 } else { 10 })
            .y_desc(&p.y_label)
            .label_style(("sans-serif", 13))
            .draw()?;
    }
    let k = p.series.len().max(1) as f64;
    let width = 0.8 / k;
    for (j, (name, color, values)) in p.series.iter().enumerate() {
        let c = *color;
        let bars = values.iter().enumerate().map(move |(i, v)| {
            let x0 = i as f64 + 0.1 + j as f64 * width;
            Rectangle::new([(x0, lo), (x0 + width * 0.95, transform(*v))], c.filled())
        });
        let series = chart.draw_series(bars)?;
        if text {
            series
                .label(name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
    }
    if let Some(t) = p.target {
        let t = transform(t);
        let s = chart.draw_series(LineSeries::new(
            [(0.0, t), (n as f64, t)],
            RED.stroke_width(2),
        ))?;
        if text {
            s.label("target")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], RED.stroke_width(2)));
        }
    }
    if text {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    Ok(())
}
