//! `simulate --svg`: a picture of the run. A row per queue, time across; each stretch in the
//! colour of the client that held the queue, unowned stretches hatched in red, double
//! ownership under a black bar; the scripted events on the time axis (the name server's
//! outages as grey bands); with `--produce`, the lag in a panel under the rows.
//!
//! Drawn from the [`timeline`] model, which a test checks against the
//! summary line. Bounded for any run: at most [`MAX_ROWS`] rows (spread over the queues, with a
//! note), at most [`SHAPE_BUDGET`] stretches and marks in all (a row with more is drawn by
//! columns: see `rows.rs`), at most [`MAX_LEGEND_CLIENTS`] clients in the legend; the file stays
//! under about 2 MB.

mod lag;
mod rows;

use std::collections::HashMap;
use std::fmt::Write as _;

use rebalance_core::MessageQueue;

pub use self::rows::queue_name;
use super::engine::{ClientEnd, Config, Outcome};
use super::scenario::Action;
use super::timeline::{self, Span};
use super::{MessageSummary, Summary};
use crate::svg::{self, escape, series_color};

/// The most queue rows drawn; a run with more queues shows this many, spread evenly over them.
pub const MAX_ROWS: usize = 40;
/// The most stretches and marks drawn over all rows.
pub const SHAPE_BUDGET: usize = 4000;
/// The most clients named in the legend.
pub const MAX_LEGEND_CLIENTS: usize = 24;

const WIDTH: f64 = 1000.0;
const LEFT: f64 = 210.0;
const RIGHT: f64 = 24.0;
const LANE_H: f64 = 13.0;
const LANES: usize = 3;

/// The time axis: simulated ms to x.
pub struct Frame {
    /// The run's length (ms).
    pub duration_ms: u64,
    /// The x of time 0.
    pub left: f64,
    /// The plot's width (px).
    pub width: f64,
}

impl Frame {
    /// The x of an instant.
    pub fn x(&self, ms: u64) -> f64 {
        self.left + ms.min(self.duration_ms) as f64 / self.duration_ms.max(1) as f64 * self.width
    }

    /// Where a span is drawn: its x and width, at least `min_px` wide (kept inside the plot).
    pub fn stretch(&self, span: Span, min_px: f64) -> (f64, f64) {
        let (x0, x1) = (self.x(span.start_ms), self.x(span.end_ms));
        let w = (x1 - x0).max(min_px);
        let x = x0.min(self.left + self.width - w).max(self.left);
        (x, w)
    }
}

/// The clients of the run by index, as the picture names them.
pub struct Names<'a> {
    clients: HashMap<usize, &'a ClientEnd>,
}

impl Names<'_> {
    /// `client 3 (room0@10.0.0.4@20003, crashed)`.
    pub fn describe(&self, index: usize) -> String {
        match self.clients.get(&index) {
            Some(c) => format!("client {index} ({}, {})", c.client, c.status.as_str()),
            None => format!("client {index}"),
        }
    }
}

/// A time as the picture writes it: `12.5s`, `1m30s`, `2h`.
pub fn fmt_ms(ms: u64) -> String {
    let (h, m, s) = (ms / 3_600_000, ms / 60_000 % 60, ms % 60_000);
    let secs = if s % 1000 == 0 {
        format!("{}s", s / 1000)
    } else {
        let text = format!("{:.3}", s as f64 / 1000.0);
        format!("{}s", text.trim_end_matches('0').trim_end_matches('.'))
    };
    match (h, m, s) {
        (0, 0, _) => secs,
        (0, _, 0) => format!("{m}m"),
        (0, _, _) => format!("{m}m{secs}"),
        (_, 0, 0) => format!("{h}h"),
        (_, _, 0) => format!("{h}h{m}m"),
        _ => format!("{h}h{m}m{secs}"),
    }
}

/// A tick step of at least an eighth of the run, in round units of time.
fn tick_step(duration_ms: u64) -> u64 {
    const STEPS: [u64; 27] = [
        1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000,
        120_000, 300_000, 600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 10_800_000,
        21_600_000, 43_200_000, 86_400_000,
    ];
    let want = duration_ms.div_ceil(8).max(1);
    STEPS
        .iter()
        .copied()
        .find(|s| *s >= want)
        .unwrap_or(want.div_ceil(86_400_000) * 86_400_000)
}

/// One scripted event as the picture labels it: as written in `--events`, a join with the
/// index it takes (`join:4`).
fn event_labels(config: &Config) -> Vec<(u64, String, Action)> {
    let mut joins = 0;
    config
        .events
        .iter()
        .map(|e| {
            let label = match e.action {
                Action::Join => {
                    joins += 1;
                    format!("join:{}", config.consumers + joins - 1)
                }
                other => other.to_string(),
            };
            (e.at.as_millis() as u64, label, e.action)
        })
        .collect()
}

/// The picture of a run.
pub fn draw(config: &Config, outcome: &Outcome, summary: &Summary) -> String {
    let all: Vec<MessageQueue> = outcome.queues.iter().cloned().collect();
    let picked = timeline::pick_rows(&all, MAX_ROWS);
    let timeline = timeline::timeline(outcome, &picked);
    let frame = Frame {
        duration_ms: outcome.duration_ms,
        left: LEFT,
        width: WIDTH - LEFT - RIGHT,
    };
    let names = Names {
        clients: outcome.clients.iter().map(|c| (c.index, c)).collect(),
    };
    let mut body = String::new();
    let mut facts = vec![format!(
        "converged: {} · unowned: {} queue-ms · double-owned: {} queue-ms · moves: {} · rounds: {}",
        summary.converged,
        summary.unowned_queue_ms,
        summary.double_owned_queue_ms,
        summary.moves,
        summary.rounds
    )];
    if let Some(messages) = &outcome.messages {
        let m = MessageSummary::of(messages);
        facts.push(format!(
            "messages: {} sent · {} consumed · {} lost · {} duplicates · {} retried · longest wait {}",
            m.produced,
            m.consumed,
            m.lost,
            m.duplicates,
            m.retried,
            fmt_ms(m.max_delay_ms)
        ));
    }
    for (k, line) in facts.iter().enumerate() {
        let _ = writeln!(
            body,
            r##"<text x="20" y="{}" font-size="12" fill="#333">{}</text>"##,
            40 + 15 * k,
            escape(line)
        );
    }

    let labels_top = 44.0 + 15.0 * facts.len() as f64;
    let rows_top = labels_top + LANES as f64 * LANE_H + 6.0;
    let count = timeline.queues.len();
    let row_h = if count <= 16 {
        18.0
    } else {
        (560.0 / count as f64).clamp(8.0, 18.0)
    };
    let budget = SHAPE_BUDGET / count.max(1);
    let mut coarse = 0;
    for (k, row) in timeline.queues.iter().enumerate() {
        let at = rows::RowBox {
            top: rows_top + row_h * k as f64,
            height: row_h,
            budget,
        };
        coarse += usize::from(rows::draw(&mut body, &frame, &names, row, &at));
    }
    let rows_bottom = rows_top + row_h * count as f64;
    let mut bottom = axis(&mut body, &frame, rows_bottom);

    let lag = timeline::lag(outcome, (frame.width / 2.0) as usize);
    if let Some(lag) = &lag {
        let top = bottom + 28.0;
        lag::draw(&mut body, &frame, lag, top);
        bottom = axis(&mut body, &frame, top + lag::HEIGHT);
    }
    events(
        &mut body,
        &frame,
        config,
        labels_top,
        rows_top,
        bottom - 20.0,
    );

    let mut notes: Vec<String> = Vec::new();
    if count < all.len() {
        notes.push(format!(
            "{count} of {} queues shown, spread evenly over them; the line above counts them all.",
            all.len()
        ));
    }
    if coarse > 0 {
        notes.push(format!(
            "{coarse} row(s) with more changes than fit are drawn by columns: each column in the \
             colour of the client that held the queue longest in it, marked wherever nobody or \
             two clients held it."
        ));
    }
    let mut y = bottom + 16.0;
    for note in &notes {
        let _ = writeln!(
            body,
            r##"<text class="note" x="{LEFT}" y="{y:.1}" font-size="11" fill="#555">{}</text>"##,
            escape(note)
        );
        y += 15.0;
    }
    y = legend(&mut body, &timeline, &names, y + 6.0);

    // The events are on the axis; the title says what ran.
    let title = format!(
        "{}: {} topic(s) x {} queues on {} broker(s), {} consumer(s) at the start",
        config.allocation.name(),
        config.topics,
        config.queues,
        config.brokers,
        config.consumers,
    );
    let mut svg = String::with_capacity(body.len() + 1024);
    svg::begin(&mut svg, WIDTH, (y + 10.0).ceil(), 20.0, &title);
    svg.push_str(concat!(
        r#"<defs><pattern id="unowned" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">"#,
        r##"<rect width="6" height="6" fill="#fff"/><line x1="0" y1="0" x2="0" y2="6" stroke="#c62828" stroke-width="2.5"/></pattern></defs>"##,
        "\n"
    ));
    svg.push_str(&body);
    svg::end(&mut svg);
    svg
}

/// The time axis under a panel whose bottom is `y`; returns the y under its labels.
fn axis(svg: &mut String, frame: &Frame, y: f64) -> f64 {
    let _ = writeln!(
        svg,
        r#"<line x1="{:.1}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="black"/>"#,
        frame.left,
        frame.left + frame.width
    );
    let step = tick_step(frame.duration_ms);
    let mut t = 0;
    while t <= frame.duration_ms {
        let x = frame.x(t);
        let _ = writeln!(
            svg,
            r#"<line x1="{x:.1}" x2="{x:.1}" y1="{y:.1}" y2="{:.1}" stroke="black"/><text x="{x:.1}" y="{:.1}" font-size="10" text-anchor="middle">{}</text>"#,
            y + 4.0,
            y + 15.0,
            fmt_ms(t)
        );
        t += step;
    }
    y + 20.0
}

/// The scripted events: a dashed line from the labels down to `bottom`, labels in lanes so
/// that close events stay readable; the name server's outages as grey bands over the rows.
fn events(
    svg: &mut String,
    frame: &Frame,
    config: &Config,
    labels_top: f64,
    top: f64,
    bottom: f64,
) {
    let labels = event_labels(config);
    let mut down_since: Option<u64> = None;
    let mut bands: Vec<Span> = Vec::new();
    for (at, _, action) in &labels {
        match action {
            Action::NameServerDown => {
                down_since.get_or_insert(*at);
            }
            Action::NameServerUp => {
                if let Some(since) = down_since.take() {
                    bands.push(Span {
                        start_ms: since,
                        end_ms: *at,
                    });
                }
            }
            _ => {}
        }
    }
    if let Some(since) = down_since {
        bands.push(Span {
            start_ms: since,
            end_ms: frame.duration_ms,
        });
    }
    for band in bands {
        let (x, w) = frame.stretch(band, 1.0);
        let _ = writeln!(
            svg,
            r##"<rect class="ns-down" data-from-ms="{}" data-to-ms="{}" x="{x:.1}" y="{top:.1}" width="{w:.1}" height="{:.1}" fill="#000" fill-opacity="0.12"><title>name server down from {} to {}</title></rect>"##,
            band.start_ms,
            band.end_ms,
            bottom - top,
            fmt_ms(band.start_ms),
            fmt_ms(band.end_ms),
        );
    }
    if let Some(traffic) = config.traffic {
        let stop = config.duration.as_millis() as u64;
        if stop < frame.duration_ms {
            let x = frame.x(stop);
            let _ = writeln!(
                svg,
                r##"<line class="production-stops" x1="{x:.1}" x2="{x:.1}" y1="{top:.1}" y2="{bottom:.1}" stroke="#4e79a7" stroke-width="1.5" stroke-dasharray="6,3"><title>production stops at {}; consumers drain for {}</title></line>"##,
                fmt_ms(stop),
                fmt_ms(traffic.drain.as_millis() as u64)
            );
            let _ = writeln!(
                svg,
                r##"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end" fill="#4e79a7">production stops</text>"##,
                x - 4.0,
                bottom - 6.0
            );
        }
    }
    // Each lane's rightmost label end.
    let mut lanes = [f64::NEG_INFINITY; LANES];
    for (at, label, _) in &labels {
        let x = frame.x(*at);
        let half = label.chars().count() as f64 * 3.1 + 3.0;
        let lane = lanes
            .iter()
            .position(|end| *end < x - half)
            .unwrap_or_else(|| {
                let mut best = 0;
                for (k, end) in lanes.iter().enumerate() {
                    if *end < lanes[best] {
                        best = k;
                    }
                }
                best
            });
        lanes[lane] = x + half;
        let y = labels_top + LANE_H * (lane as f64 + 1.0) - 3.0;
        let _ = writeln!(
            svg,
            r##"<g class="event" data-event="{e}" data-at-ms="{at}"><title>{e} at {}</title><line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{bottom:.1}" stroke="#222" stroke-width="1" stroke-dasharray="3,2"/><text x="{x:.1}" y="{y:.1}" font-size="10" text-anchor="middle" fill="#222">{e}</text></g>"##,
            fmt_ms(*at),
            y + 2.0,
            e = escape(label),
        );
    }
}

/// What the colours and marks mean, and the clients of the drawn rows (at most
/// [`MAX_LEGEND_CLIENTS`]); returns the y under it.
fn legend(svg: &mut String, timeline: &timeline::Timeline, names: &Names<'_>, y: f64) -> f64 {
    let marks = [
        (
            r##"fill="url(#unowned)" stroke="#c62828" stroke-width="0.8""##,
            "nobody holds the queue",
        ),
        (r#"fill="black""#, "black bar: two or more clients hold it"),
        (r##"fill="#000" fill-opacity="0.12""##, "name server down"),
    ];
    let mut x = 20.0;
    for (style, text) in marks {
        let _ = writeln!(
            svg,
            r#"<rect x="{x:.1}" y="{:.1}" width="18" height="10" {style}/><text x="{:.1}" y="{y:.1}" font-size="11">{text}</text>"#,
            y - 9.0,
            x + 24.0
        );
        x += 24.0 + text.len() as f64 * 6.0 + 24.0;
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="#222" stroke-dasharray="3,2"/><text x="{:.1}" y="{y:.1}" font-size="11">scripted event</text>"##,
        y - 11.0,
        y + 2.0,
        x + 8.0
    );
    let mut clients: Vec<usize> = timeline
        .queues
        .iter()
        .flat_map(|q| q.holds.iter().map(|h| h.client))
        .collect();
    clients.sort_unstable();
    clients.dedup();
    let mut y = y + 20.0;
    const COLUMNS: usize = 3;
    const COLUMN_W: f64 = 320.0;
    for (k, c) in clients.iter().take(MAX_LEGEND_CLIENTS).enumerate() {
        let (cx, cy) = (
            20.0 + COLUMN_W * (k % COLUMNS) as f64,
            y + 16.0 * (k / COLUMNS) as f64,
        );
        let _ = writeln!(
            svg,
            r#"<rect class="legend-client" data-client="{c}" x="{cx:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{cy:.1}" font-size="11">{}</text>"#,
            cy - 10.0,
            series_color(*c),
            cx + 18.0,
            escape(&names.describe(*c))
        );
    }
    let shown = clients.len().min(MAX_LEGEND_CLIENTS);
    y += 16.0 * shown.div_ceil(COLUMNS) as f64;
    if clients.len() > shown {
        let _ = writeln!(
            svg,
            r##"<text class="note" x="20" y="{y:.1}" font-size="11" fill="#555">and {} more clients: a stretch's tooltip names its client; the number on it is the client's index.</text>"##,
            clients.len() - shown
        );
        y += 16.0;
    }
    y
}

#[cfg(test)]
mod tests;
