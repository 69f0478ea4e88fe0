//! The comparison as an SVG chart: queues moved per event against the minimum, and the spread
//! after each event, one colour per strategy. Plain SVG text through [`crate::svg`].

use std::fmt::Write as _;

use super::{Row, Summary};
use crate::svg::{PALETTE as COLORS, escape, nice_max};

const WIDTH: f64 = 960.0;
const PANEL_HEIGHT: f64 = 230.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 270.0;
const TOP: f64 = 50.0;
const GAP: f64 = 80.0;
struct Panel<'a> {
    title: &'a str,
    top: f64,
    events: &'a [String],
    strategies: &'a [String],
    /// `values[s][e]`: the bar height of strategy `s` at event `e`.
    values: Vec<Vec<f64>>,
    /// A mark drawn across each bar (the minimum), when present.
    marks: Option<Vec<Vec<f64>>>,
}

fn draw_panel(svg: &mut String, p: &Panel<'_>) {
    let plot_w = WIDTH - LEFT - RIGHT;
    let (x0, y0) = (LEFT, p.top + PANEL_HEIGHT);
    let max = p
        .values
        .iter()
        .flatten()
        .chain(p.marks.iter().flatten().flatten())
        .copied()
        .fold(0.0, f64::max);
    let top_value = nice_max(max);
    let y = |v: f64| y0 - v / top_value * PANEL_HEIGHT;
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="{:.1}" font-size="14" font-weight="bold">{}</text>"#,
        p.top - 12.0,
        escape(p.title)
    );
    for k in 0..=4 {
        let v = top_value * f64::from(k) / 4.0;
        let _ = writeln!(
            svg,
            r##"<line x1="{x0}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            x0 + plot_w,
            y(v),
            y(v),
            x0 - 6.0,
            y(v) + 4.0,
            if v.fract() == 0.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        );
    }
    let groups = p.events.len().max(1) as f64;
    let group_w = plot_w / groups;
    let bar_w = (group_w * 0.8) / p.strategies.len().max(1) as f64;
    for (e, event) in p.events.iter().enumerate() {
        let gx = x0 + group_w * e as f64 + group_w * 0.1;
        for (s, strategy) in p.strategies.iter().enumerate() {
            let v = p.values[s][e];
            let bx = gx + bar_w * s as f64;
            let _ = writeln!(
                svg,
                r#"<rect x="{bx:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {} = {}</title></rect>"#,
                y(v),
                (bar_w - 1.0).max(1.0),
                (y0 - y(v)).max(0.0),
                COLORS[s % COLORS.len()],
                escape(strategy),
                escape(event),
                v
            );
            let _ = writeln!(
                svg,
                r##"<text x="{:.1}" y="{:.1}" font-size="9" text-anchor="middle" fill="#333">{}</text>"##,
                bx + bar_w / 2.0,
                y(v) - 3.0,
                v
            );
            if let Some(marks) = &p.marks {
                let m = marks[s][e];
                let _ = writeln!(
                    svg,
                    r#"<line x1="{bx:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="black" stroke-width="2"><title>minimum {m}</title></line>"#,
                    bx + bar_w - 1.0,
                    y(m),
                    y(m)
                );
            }
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"#,
            gx + group_w * 0.4,
            y0 + 16.0,
            escape(event)
        );
    }
    let _ = writeln!(
        svg,
        r#"<line x1="{x0}" x2="{:.1}" y1="{y0}" y2="{y0}" stroke="black"/>"#,
        x0 + plot_w
    );
}

/// The chart for the rows of a comparison (in strategy, then event order) and the per-strategy
/// summaries.
pub fn chart(title: &str, rows: &[Row], summaries: &[Summary]) -> String {
    let strategies: Vec<String> = summaries.iter().map(|s| s.strategy.clone()).collect();
    // One column per step (events may repeat), labelled by the event.
    let mut steps: Vec<(usize, String)> = Vec::new();
    for r in rows.iter().filter(|r| r.step > 0) {
        if !steps.iter().any(|(step, _)| *step == r.step) {
            steps.push((r.step, r.event.clone()));
        }
    }
    let events: Vec<String> = steps.iter().map(|(_, e)| e.clone()).collect();
    let grid = |f: &dyn Fn(&Row) -> f64| -> Vec<Vec<f64>> {
        strategies
            .iter()
            .map(|s| {
                steps
                    .iter()
                    .map(|(step, _)| {
                        rows.iter()
                            .find(|r| &r.strategy == s && r.step == *step)
                            .map_or(0.0, f)
                    })
                    .collect()
            })
            .collect()
    };
    let height = TOP + 2.0 * PANEL_HEIGHT + GAP + 60.0;
    let mut svg = String::new();
    crate::svg::begin(&mut svg, WIDTH, height, LEFT, title);
    draw_panel(
        &mut svg,
        &Panel {
            title: "Queues moved per event (black line: the fewest a balanced plan could move)",
            top: TOP + 10.0,
            events: &events,
            strategies: &strategies,
            values: grid(&|r| r.moved as f64),
            marks: Some(grid(&|r| r.min_moves as f64)),
        },
    );
    draw_panel(
        &mut svg,
        &Panel {
            title: "Spread after each event (largest share - smallest share)",
            top: TOP + PANEL_HEIGHT + GAP,
            events: &events,
            strategies: &strategies,
            values: grid(&|r| r.spread as f64),
            marks: None,
        },
    );
    let lx = WIDTH - RIGHT + 20.0;
    for (s, summary) in summaries.iter().enumerate() {
        let ly = TOP + 20.0 + 58.0 * s as f64;
        let _ = writeln!(
            svg,
            r##"<rect x="{lx}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}" font-size="13">{}</text><text x="{:.1}" y="{:.1}" font-size="11" fill="#444">moved {} / minimum {} ({})</text><text x="{:.1}" y="{:.1}" font-size="11" fill="#444">worst spread {}</text>"##,
            ly - 10.0,
            COLORS[s % COLORS.len()],
            lx + 18.0,
            ly,
            escape(&summary.strategy),
            lx + 18.0,
            ly + 16.0,
            summary.moved,
            summary.min_moves,
            summary.ratio_text(),
            lx + 18.0,
            ly + 30.0,
            summary.worst_spread
        );
    }
    let note_y = TOP + 20.0 + 58.0 * summaries.len() as f64 + 10.0;
    for (k, line) in [
        "The minimum is what any plan with",
        "shares within one of each other",
        "must move; a strategy that keeps",
        "shares uneven can move less.",
    ]
    .iter()
    .enumerate()
    {
        let _ = writeln!(
            svg,
            r##"<text x="{lx}" y="{:.1}" font-size="11" fill="#666">{line}</text>"##,
            note_y + 14.0 * k as f64
        );
    }
    crate::svg::end(&mut svg);
    svg
}
