//! The lag panel under the rows, with `--produce`: how many messages had been sent and not yet
//! consumed successfully, the most at any instant of each column.

use std::fmt::Write as _;

use super::Frame;
use crate::sim::timeline::Lag;
use crate::svg::nice_ceiling;

/// The panel's height (px).
pub const HEIGHT: f64 = 100.0;

/// Draws the panel with its top at `top`.
pub fn draw(svg: &mut String, frame: &Frame, lag: &Lag, top: f64) {
    let peak = lag.max_waiting.iter().copied().max().unwrap_or(0);
    let top_value = nice_ceiling(peak as f64);
    let bottom = top + HEIGHT;
    let y = |v: f64| bottom - v / top_value * HEIGHT;
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" font-weight="bold">Messages waiting (sent, not yet consumed successfully): at most {peak}</text>"#,
        frame.left,
        top - 8.0
    );
    for k in 0..=2 {
        let v = top_value * f64::from(k) / 2.0;
        let _ = writeln!(
            svg,
            r##"<line x1="{:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{v}</text>"##,
            frame.left,
            frame.left + frame.width,
            y(v),
            y(v),
            frame.left - 6.0,
            y(v) + 3.5,
        );
    }
    // A step line over the buckets, closed down to the axis.
    let mut path = format!("M{:.1},{bottom:.1}", frame.left);
    for (b, waiting) in lag.max_waiting.iter().enumerate() {
        let from = b as u64 * lag.bucket_ms;
        let to = (from + lag.bucket_ms).min(frame.duration_ms);
        let level = y(*waiting as f64);
        let _ = write!(
            path,
            " L{:.1},{level:.1} L{:.1},{level:.1}",
            frame.x(from),
            frame.x(to)
        );
    }
    let _ = write!(path, " L{:.1},{bottom:.1} Z", frame.x(frame.duration_ms));
    let _ = writeln!(
        svg,
        r##"<path class="lag" data-max="{peak}" d="{path}" fill="#4e79a7" fill-opacity="0.35" stroke="#4e79a7" stroke-width="1"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<line x1="{:.1}" x2="{:.1}" y1="{bottom:.1}" y2="{bottom:.1}" stroke="black"/>"#,
        frame.left,
        frame.left + frame.width
    );
}
