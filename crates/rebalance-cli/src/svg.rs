//! What the commands' SVG pictures share (`compare --svg`, `simulate --svg`): escaping, axis
//! bounds, colours, the document's frame and the output file. Plain SVG text, no plotting
//! library.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The colours of the first few series (strategies in `compare`, clients in `simulate`).
pub const PALETTE: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f",
];

/// Escapes text for an SVG text node or attribute value.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" upper bound for an axis: 1, 2 or 5 times a power of ten, at least `max`.
pub fn nice_max(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|&v| v >= max)
        .unwrap_or(10.0 * magnitude)
}

/// A tighter upper bound than [`nice_max`], for an axis labelled at 0, half and the top: 1,
/// 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten, at least `max`.
pub fn nice_ceiling(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(max.log10().floor());
    [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|&v| v >= max * (1.0 - 1e-12))
        .unwrap_or(10.0 * magnitude)
}

/// The colour of series `i` among many (hundreds of clients): the palette's colours without
/// its red (`#e15759`, which the pictures keep for marks), then hues a golden angle apart, in
/// three lightnesses, so that neighbouring indices never look alike.
pub fn series_color(i: usize) -> String {
    const FIRST: [&str; 7] = [
        PALETTE[0], PALETTE[1], PALETTE[3], PALETTE[4], PALETTE[5], PALETTE[6], PALETTE[7],
    ];
    if let Some(c) = FIRST.get(i) {
        return (*c).to_string();
    }
    let k = i - FIRST.len();
    // Hues from 20 to 340 degrees: the reds near 0 are left to the marks.
    let hue = 20.0 + (k as f64 * 137.507_764) % 320.0;
    let lightness = [52, 38, 66][k % 3];
    let saturation = [60, 70, 50][(k / 3) % 3];
    format!("hsl({hue:.0},{saturation}%,{lightness}%)")
}

/// Writes the opening `<svg>` element of a `width` x `height` picture on a white background,
/// with its title in bold at the top left (`left` from the edge).
pub fn begin(svg: &mut String, width: f64, height: f64, left: f64, title: &str) {
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{left}" y="22" font-size="16" font-weight="bold">{}</text>"#,
        escape(title)
    );
}

/// Closes the document [`begin`] opened.
pub fn end(svg: &mut String) {
    svg.push_str("</svg>\n");
}

/// An `--svg` file that could not be created or written.
#[derive(Debug, thiserror::Error)]
#[error("--svg `{}`: {source}", path.display())]
pub struct SvgFileError {
    /// The file named with `--svg`.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// An `--svg` file, created before the command runs so that a bad path fails at once; a file
/// that did not exist before is removed again if the command fails ([`SvgFile::abandon`]).
#[derive(Debug)]
pub struct SvgFile {
    path: PathBuf,
    file: std::fs::File,
    created: bool,
}

impl SvgFile {
    /// Opens (or creates) the file, without truncating it yet.
    pub fn open(path: &Path) -> Result<Self, SvgFileError> {
        let created = !path.exists();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|source| SvgFileError {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            created,
        })
    }

    /// Replaces the file's content with `text`.
    pub fn write(mut self, text: &str) -> Result<(), SvgFileError> {
        let result = self
            .file
            .set_len(0)
            .and_then(|()| self.file.write_all(text.as_bytes()))
            .and_then(|()| self.file.flush());
        result.map_err(|source| SvgFileError {
            path: self.path.clone(),
            source,
        })
    }

    /// Gives up: removes the file if this command created it.
    pub fn abandon(self) {
        if self.created {
            // Best effort: the command's own error is the one reported.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_axis_bounds() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(3.0), 5.0);
        assert_eq!(nice_max(10.0), 10.0);
        assert_eq!(nice_max(101.0), 200.0);
        assert_eq!(nice_max(f64::NAN), 1.0);
        assert_eq!(nice_ceiling(501.0), 600.0);
        assert_eq!(nice_ceiling(5.0), 5.0);
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(81.0), 100.0);
    }

    #[test]
    fn escapes_text() {
        assert_eq!(escape("a<b>&\"c\""), "a&lt;b&gt;&amp;&quot;c&quot;");
    }

    #[test]
    fn hundreds_of_series_get_distinct_colors_and_no_red() {
        let colors: Vec<String> = (0..600).map(series_color).collect();
        let distinct: std::collections::HashSet<&String> = colors.iter().collect();
        assert_eq!(distinct.len(), colors.len());
        assert!(!colors.iter().any(|c| c == PALETTE[2]));
        // Neighbours differ in hue by far more than a shade.
        for k in 0..300 {
            let hue = |c: &str| -> f64 {
                c.trim_start_matches("hsl(")
                    .split(',')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            };
            let (a, b) = (hue(&colors[7 + k]), hue(&colors[8 + k]));
            let d = (a - b).abs();
            assert!(d.min(360.0 - d) > 30.0, "{k}: {a} {b}");
        }
    }

    #[test]
    fn a_file_the_command_created_is_removed_when_abandoned() {
        let dir = std::env::temp_dir().join(format!("rebalance-svg-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.svg");
        let _ = std::fs::remove_file(&path);
        SvgFile::open(&path).unwrap().abandon();
        assert!(!path.exists());
        std::fs::write(&path, "old").unwrap();
        SvgFile::open(&path).unwrap().abandon();
        assert!(path.exists(), "a file that was there before is kept");
        SvgFile::open(&path).unwrap().write("<svg/>").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "<svg/>");
        let err = SvgFile::open(&dir.join("no/such/dir.svg")).unwrap_err();
        assert!(err.to_string().starts_with("--svg `"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
