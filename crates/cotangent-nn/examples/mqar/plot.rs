//! The PNG written after training: training loss (left) and held-out accuracy (right).
//!
//! plotters draws the lines; all text (title, ticks, axis labels) goes through the built-in
//! pixel font of `font.rs`, so no font file or font crate is needed.
use crate::font::{text, width, HEIGHT};
use plotters::coord::Shift;
use plotters::prelude::*;

type Error = Box<dyn std::error::Error>;

const GRID: RGBColor = RGBColor(225, 225, 225);
const GREY: RGBColor = RGBColor(120, 120, 120);

/// One panel: a curve against the training step, with the y axis from 0 to `y_max`.
struct Panel<'a> {
    name: &'a str,
    y_label: &'a str,
    y_max: f64,
    color: RGBColor,
    /// A sparse curve (evaluations): a thicker line, and dots at the data points.
    dots: bool,
    /// Horizontal reference lines with a label, such as the 99 % target.
    marks: &'a [(f64, &'a str)],
    data: Vec<(usize, f64)>,
}

/// Writes the plot to `path` (960×440 pixels): `losses` per step, `accs` as fractions.
pub fn write_png(path: &str, title: &str, losses: &[(usize, f64)], accs: &[(usize, f64)]) -> Result<(), Error> {
    let root = BitMapBackend::new(path, (960, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    text(&root, title, (480, 12), 2, (0.5, 0.0), false, &BLACK)?;
    let (left, right) = root.margin(36, 0, 0, 0).split_horizontally(480);
    let steps = losses.last().map_or(1, |l| l.0).max(1);
    let max_loss = losses.iter().map(|l| l.1).fold(0.0, f64::max);
    let loss = Panel {
        name: "training loss",
        y_label: "loss",
        y_max: nice_max(max_loss),
        color: RED,
        dots: false,
        marks: &[],
        data: losses.to_vec(),
    };
    let acc = Panel {
        name: "held-out query accuracy",
        y_label: "query accuracy %",
        y_max: 100.0,
        color: BLUE,
        dots: true,
        marks: &[(99.0, "99%")],
        data: accs.iter().map(|&(s, a)| (s, 100.0 * a)).collect(),
    };
    draw_panel(&left, &loss, steps)?;
    draw_panel(&right, &acc, steps)?;
    root.present()?;
    Ok(())
}

/// Writes one curve against the training step to `path` (640×440 pixels): the loss curve of
/// `qwen3_next_finetune`, say.
#[allow(dead_code)] // the mqar example draws two panels with `write_png`
pub fn write_curve_png(path: &str, title: &str, name: &str, data: &[(usize, f64)]) -> Result<(), Error> {
    let root = BitMapBackend::new(path, (640, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    text(&root, title, (320, 12), 2, (0.5, 0.0), false, &BLACK)?;
    let area = root.margin(36, 0, 0, 0);
    let steps = data.last().map_or(1, |l| l.0).max(1);
    let max = data.iter().map(|l| l.1).fold(0.0, f64::max);
    let panel =
        Panel { name, y_label: name, y_max: nice_max(max), color: RED, dots: false, marks: &[], data: data.to_vec() };
    draw_panel(&area, &panel, steps)?;
    root.present()?;
    Ok(())
}

fn draw_panel(area: &DrawingArea<BitMapBackend, Shift>, p: &Panel, steps: usize) -> Result<(), Error> {
    let (x_ticks, y_ticks) = (ticks(steps as f64), ticks(p.y_max));
    let mut chart = ChartBuilder::on(area)
        .margin_left(78)
        .margin_right(24)
        .margin_top(34)
        .margin_bottom(52)
        .build_cartesian_2d(0..steps, 0.0..p.y_max)?;
    // grid, reference lines, data
    for &y in &y_ticks {
        chart.draw_series([PathElement::new([(0, y), (steps, y)], GRID)])?;
    }
    for &x in &x_ticks {
        chart.draw_series([PathElement::new([(x as usize, 0.0), (x as usize, p.y_max)], GRID)])?;
    }
    for &(y, _) in p.marks {
        chart.draw_series([PathElement::new([(0, y), (steps, y)], GREY)])?;
    }
    let stroke = if p.dots { 2 } else { 1 };
    chart.draw_series(LineSeries::new(p.data.iter().copied(), p.color.stroke_width(stroke)))?;
    if p.dots {
        chart.draw_series(p.data.iter().map(|&xy| Circle::new(xy, 3, p.color.filled())))?;
    }
    // text and ticks, in pixels of this panel
    let base = area.get_base_pixel();
    let at = |x: f64, y: f64| {
        let (px, py) = chart.backend_coord(&(x.round() as usize, y));
        (px - base.0, py - base.1)
    };
    let ((x0, y0), (x1, y1)) = (at(0.0, p.y_max), at(steps as f64, 0.0));
    area.draw(&Rectangle::new([(x0, y0), (x1, y1)], BLACK))?;
    let y_labels: Vec<String> = y_ticks.iter().map(|&y| label(y, &y_ticks)).collect();
    for (&y, name) in y_ticks.iter().zip(&y_labels) {
        let (_, py) = at(0.0, y);
        area.draw(&PathElement::new([(x0 - 5, py), (x0, py)], BLACK))?;
        text(area, name, (x0 - 9, py), 2, (1.0, 0.5), false, &BLACK)?;
    }
    for &x in &x_ticks {
        let (px, _) = at(x, 0.0);
        area.draw(&PathElement::new([(px, y1), (px, y1 + 5)], BLACK))?;
        text(area, &label(x, &x_ticks), (px, y1 + 9), 2, (0.5, 0.0), false, &BLACK)?;
    }
    for &(y, name) in p.marks {
        text(area, name, (x0 + 6, at(0.0, y).1 + 5), 2, (0.0, 0.0), false, &GREY)?;
    }
    text(area, "step", ((x0 + x1) / 2, y1 + 30), 2, (0.5, 0.0), false, &BLACK)?;
    let widest = y_labels.iter().map(|l| width(l, 2)).max().unwrap_or(0);
    text(area, p.y_label, (x0 - 21 - widest - 2 * HEIGHT, (y0 + y1) / 2), 2, (0.5, 0.0), true, &BLACK)?;
    // the panel's name, after a swatch of its colour, as the legend
    area.draw(&Rectangle::new([(x0, y0 - 20), (x0 + 20, y0 - 16)], p.color.filled()))?;
    text(area, p.name, (x0 + 28, y0 - 18), 2, (0.0, 0.5), false, &BLACK)?;
    Ok(())
}

/// Round tick values from 0 to `max`: steps of 1, 2 or 5 × 10^k, at most 6 of them.
fn ticks(max: f64) -> Vec<f64> {
    let magnitude = 10f64.powf((max / 5.0).log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|s| max / s <= 6.0).unwrap_or(max);
    (0..).map(|i| i as f64 * step).take_while(|v| *v <= max * (1.0 + 1e-9)).collect()
}

/// A little above `max`, on a round number so the top tick sits on the frame.
fn nice_max(max: f64) -> f64 {
    let max = max.max(1e-3) * 1.02;
    let step = ticks(max).get(1).copied().unwrap_or(max);
    (max / step).ceil() * step
}

/// `v` with as many decimals as the tick spacing needs.
fn label(v: f64, ticks: &[f64]) -> String {
    let step = ticks.get(1).map_or(1.0, |t| t - ticks[0]);
    let decimals = if step >= 1.0 { 0 } else { (-step.log10()).ceil() as usize };
    format!("{v:.decimals$}")
}
