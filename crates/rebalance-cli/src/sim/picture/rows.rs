//! The queue rows of the picture: each hold as a stretch in its client's colour, unowned
//! stretches hatched in red, double ownership split between the holders' colours under a
//! black bar. A row with more to draw than its share of the budget is drawn by columns.

use std::collections::HashMap;
use std::fmt::Write as _;

use rebalance_core::MessageQueue;

use super::{Frame, Names, fmt_ms};
use crate::sim::timeline::{QueueTimeline, Span};
use crate::svg::{escape, series_color};

/// The narrowest mark drawn (px), so that a millisecond of double ownership still shows.
const MIN_MARK_PX: f64 = 2.0;
/// The narrowest stretch labelled with its client's index (px).
const LABEL_PX: f64 = 18.0;
/// The most queue-label characters shown.
const MAX_LABEL_CHARS: usize = 36;

/// How a row is written in the picture and its `data-queue` attributes: `topic/broker/id`.
pub fn queue_name(q: &MessageQueue) -> String {
    format!("{}/{}/{}", q.topic, q.broker_name, q.queue_id)
}

fn short(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= MAX_LABEL_CHARS {
        return text.to_string();
    }
    let tail: String = chars[chars.len() - (MAX_LABEL_CHARS - 1)..]
        .iter()
        .collect();
    format!("…{tail}")
}

/// Where a row is and how much it may draw.
pub struct RowBox {
    /// The top of the row.
    pub top: f64,
    /// Its height (the stretches leave a pixel above and below).
    pub height: f64,
    /// How many shapes it may draw before being drawn by columns.
    pub budget: usize,
}

/// Draws one row; whether it had to be drawn by columns.
pub fn draw(
    svg: &mut String,
    frame: &Frame,
    names: &Names<'_>,
    row: &QueueTimeline,
    at: &RowBox,
) -> bool {
    let name = queue_name(&row.queue);
    let (y, h) = (at.top + 1.0, (at.height - 2.0).max(1.0));
    let _ = writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end" fill="#333">{}</text>"##,
        frame.left - 6.0,
        y + h / 2.0 + 3.5,
        escape(&short(&name))
    );
    let _ = writeln!(
        svg,
        r##"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" fill="#f3f3f3"/>"##,
        frame.left, frame.width
    );
    let shapes = row.holds.len() + row.unowned.len() + row.doubled.len();
    if shapes > at.budget {
        draw_columns(svg, frame, names, row, &name, y, h, at.budget);
        return true;
    }
    for hold in &row.holds {
        let (x, w) = frame.stretch(hold.span, 0.5);
        let who = names.describe(hold.client);
        let _ = writeln!(
            svg,
            r#"<rect class="hold" data-queue="{q}" data-client="{c}" data-from-ms="{from}" data-to-ms="{to}" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{fill}"><title>{who} held {q} from {} to {}: {}</title></rect>"#,
            fmt_ms(hold.span.start_ms),
            fmt_ms(hold.span.end_ms),
            hold.end.describe(),
            q = escape(&name),
            c = hold.client,
            from = hold.span.start_ms,
            to = hold.span.end_ms,
            fill = series_color(hold.client),
            who = escape(&who),
        );
        if w >= LABEL_PX && h >= 10.0 {
            label(
                svg,
                x + w / 2.0,
                y + h / 2.0 + 3.0,
                &hold.client.to_string(),
            );
        }
    }
    for gap in &row.unowned {
        unowned(svg, frame, &name, *gap, y, h, true);
    }
    for overlap in &row.doubled {
        let (x, w) = frame.stretch(overlap.span, MIN_MARK_PX);
        let list: Vec<String> = overlap.clients.iter().map(usize::to_string).collect();
        let who: Vec<String> = overlap.clients.iter().map(|c| names.describe(*c)).collect();
        let _ = writeln!(
            svg,
            r#"<g class="doubled" data-queue="{q}" data-clients="{}" data-from-ms="{}" data-to-ms="{}"><title>{q} double-owned from {} to {} by {}</title>"#,
            list.join(","),
            overlap.span.start_ms,
            overlap.span.end_ms,
            fmt_ms(overlap.span.start_ms),
            fmt_ms(overlap.span.end_ms),
            escape(&who.join(", ")),
            q = escape(&name),
        );
        let part = h / overlap.clients.len().max(1) as f64;
        for (k, c) in overlap.clients.iter().enumerate() {
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.1}" y="{:.1}" width="{w:.1}" height="{part:.1}" fill="{}"/>"#,
                y + part * k as f64,
                series_color(*c)
            );
        }
        doubled_bar(svg, x, w, y);
        svg.push_str("</g>\n");
    }
    false
}

fn label(svg: &mut String, x: f64, y: f64, text: &str) {
    let _ = writeln!(
        svg,
        r##"<text x="{x:.1}" y="{y:.1}" font-size="9" text-anchor="middle" fill="#111" stroke="#fff" stroke-width="2" paint-order="stroke">{}</text>"##,
        escape(text)
    );
}

fn doubled_bar(svg: &mut String, x: f64, w: f64, y: f64) {
    let _ = writeln!(
        svg,
        r#"<rect x="{x:.1}" y="{:.1}" width="{w:.1}" height="3" fill="black"/>"#,
        y - 1.0
    );
}

fn unowned(svg: &mut String, frame: &Frame, name: &str, gap: Span, y: f64, h: f64, exact: bool) {
    let (x, w) = frame.stretch(gap, MIN_MARK_PX);
    let _ = writeln!(
        svg,
        r##"<rect class="unowned" data-queue="{q}" data-from-ms="{}" data-to-ms="{}" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="url(#unowned)" stroke="#c62828" stroke-width="0.8"><title>{q}: {}nobody held it from {} to {}</title></rect>"##,
        gap.start_ms,
        gap.end_ms,
        if exact { "" } else { "in these columns, " },
        fmt_ms(gap.start_ms),
        fmt_ms(gap.end_ms),
        q = escape(name),
    );
}

/// A row with too much to draw: `columns` columns (at most one per 2 px), each in the colour
/// of the client that held the queue longest in it, with a mark where nobody held it, or two
/// clients did, for any time in the column. At most three shapes a column.
#[allow(clippy::too_many_arguments)]
fn draw_columns(
    svg: &mut String,
    frame: &Frame,
    names: &Names<'_>,
    row: &QueueTimeline,
    name: &str,
    y: f64,
    h: f64,
    budget: usize,
) {
    let columns = (budget / 3).clamp(10, (frame.width / 2.0).max(10.0) as usize);
    let duration = frame.duration_ms.max(1);
    let col_ms = duration.div_ceil(columns as u64).max(1);
    let columns = duration.div_ceil(col_ms) as usize;
    let column = |k: usize| Span {
        start_ms: k as u64 * col_ms,
        end_ms: ((k as u64 + 1) * col_ms).min(duration),
    };
    let covered = |span: Span| column_range(span, col_ms, columns);
    // Per column: time held per client.
    let mut held: Vec<HashMap<usize, u64>> = vec![HashMap::new(); columns];
    for hold in &row.holds {
        for k in covered(hold.span) {
            let c = column(k);
            let overlap = hold.span.end_ms.min(c.end_ms) - hold.span.start_ms.max(c.start_ms);
            *held[k].entry(hold.client).or_default() += overlap;
        }
    }
    let dominant: Vec<Option<usize>> = held
        .iter()
        .map(|m| {
            m.iter()
                .filter(|(_, t)| **t > 0)
                .max_by_key(|(c, t)| (**t, std::cmp::Reverse(**c)))
                .map(|(c, _)| *c)
        })
        .collect();
    let mut k = 0;
    while k < columns {
        let Some(client) = dominant[k] else {
            k += 1;
            continue;
        };
        let run = dominant[k..]
            .iter()
            .take_while(|d| **d == Some(client))
            .count();
        let span = Span {
            start_ms: column(k).start_ms,
            end_ms: column(k + run - 1).end_ms,
        };
        let (x, w) = frame.stretch(span, 0.5);
        let _ = writeln!(
            svg,
            r#"<rect class="hold coarse" data-queue="{q}" data-client="{client}" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{}"><title>{} held {q} longest in each column from {} to {}</title></rect>"#,
            series_color(client),
            escape(&names.describe(client)),
            fmt_ms(span.start_ms),
            fmt_ms(span.end_ms),
            q = escape(name),
        );
        k += run;
    }
    let marked = |spans: &mut dyn Iterator<Item = Span>| -> Vec<Span> {
        let mut any = vec![false; columns];
        for s in spans.filter(|s| s.len_ms() > 0) {
            for k in covered(s) {
                any[k] = true;
            }
        }
        let mut runs: Vec<Span> = Vec::new();
        for (k, _) in any.iter().enumerate().filter(|(_, a)| **a) {
            match runs.last_mut() {
                Some(last) if last.end_ms == column(k).start_ms => last.end_ms = column(k).end_ms,
                _ => runs.push(column(k)),
            }
        }
        runs
    };
    for gap in marked(&mut row.unowned.iter().copied()) {
        unowned(svg, frame, name, gap, y, h, false);
    }
    for span in marked(&mut row.doubled.iter().map(|o| o.span)) {
        let (x, w) = frame.stretch(span, MIN_MARK_PX);
        let _ = writeln!(
            svg,
            r#"<g class="doubled coarse" data-queue="{q}" data-from-ms="{}" data-to-ms="{}"><title>{q}: two or more clients held it in these columns, from {} to {}</title>"#,
            span.start_ms,
            span.end_ms,
            fmt_ms(span.start_ms),
            fmt_ms(span.end_ms),
            q = escape(name),
        );
        doubled_bar(svg, x, w, y);
        svg.push_str("</g>\n");
    }
}

/// The columns (of `col_ms` each, `columns` in all) a span touches; a zero-length span
/// touches the column of its instant.
fn column_range(span: Span, col_ms: u64, columns: usize) -> std::ops::Range<usize> {
    let first = ((span.start_ms / col_ms) as usize).min(columns.saturating_sub(1));
    let last = if span.end_ms > span.start_ms {
        ((span.end_ms - 1) / col_ms) as usize
    } else {
        first
    };
    first..last.min(columns.saturating_sub(1)) + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_of_a_span() {
        let span = |a, b| Span {
            start_ms: a,
            end_ms: b,
        };
        assert_eq!(column_range(span(0, 10), 10, 5), 0..1);
        assert_eq!(column_range(span(5, 21), 10, 5), 0..3);
        assert_eq!(column_range(span(20, 20), 10, 5), 2..3);
        assert_eq!(column_range(span(40, 60), 10, 5), 4..5);
    }

    #[test]
    fn long_names_keep_their_end() {
        let long = "%RETRY%a-very-long-consumer-group-name/room0@broker-0/0";
        let s = short(long);
        assert_eq!(s.chars().count(), MAX_LABEL_CHARS);
        assert!(s.starts_with('…') && s.ends_with("room0@broker-0/0"), "{s}");
        assert_eq!(short("topic-0/b/1"), "topic-0/b/1");
    }
}
