//! The JSON Lines loop shared by the batch commands: one case per line, one answer per line.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Opens `path` for reading, or standard input when it is absent or `-`.
pub fn open_input(path: Option<&Path>) -> Result<Box<dyn BufRead>, BatchError> {
    match path {
        None => Ok(Box::new(BufReader::new(io::stdin()))),
        Some(p) if p.as_os_str() == "-" => Ok(Box::new(BufReader::new(io::stdin()))),
        Some(p) => match File::open(p) {
            Ok(f) => Ok(Box::new(BufReader::new(f))),
            Err(source) => Err(BatchError::Open {
                path: p.to_path_buf(),
                source,
            }),
        },
    }
}

/// The name of the input in messages: the file's path, or `standard input`.
pub fn input_name(path: Option<&Path>) -> String {
    match path {
        Some(p) if p.as_os_str() != "-" => format!("`{}`", p.display()),
        _ => "standard input".into(),
    }
}

/// Why a batch run stopped (a bad line does not stop it).
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// The input file could not be opened.
    #[error("cannot open `{}`: {source}", path.display())]
    Open {
        /// The file named on the command line.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Reading the input failed (other than a line that is not UTF-8, which is reported as
    /// that line's error).
    #[error("reading line {line} of {input} failed: {source}")]
    Read {
        /// What was read: `the input`, until [`BatchError::reading`] names it.
        input: String,
        /// The line that could not be read.
        line: usize,
        /// Why.
        source: io::Error,
    },
    /// Writing an answer to standard output failed.
    #[error("writing standard output failed: {0}")]
    Write(#[source] io::Error),
}

impl BatchError {
    /// Whether the arguments are at fault (exit status 2: the file named cannot be opened or
    /// read) rather than the run (exit status 1: writing the answers failed).
    pub fn is_usage(&self) -> bool {
        matches!(self, BatchError::Open { .. } | BatchError::Read { .. })
    }

    /// Names the input a read error comes from (see [`input_name`]).
    pub fn reading(self, name: String) -> Self {
        match self {
            BatchError::Read { line, source, .. } => BatchError::Read {
                input: name,
                line,
                source,
            },
            other => other,
        }
    }
}

/// What a batch run did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Cases answered.
    pub answered: usize,
    /// Lines that could not be processed.
    pub failed: usize,
}

/// Why one line could not be processed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError(pub String);

impl<E: std::fmt::Display> From<E> for LineError {
    fn from(e: E) -> Self {
        LineError(e.to_string())
    }
}

/// The longest input line read (a case far larger than any real group); a longer one is
/// reported as that line's error and skipped without being held (found by review: a line
/// without an end grew the memory without bound).
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// One input line.
enum Line {
    Text(String),
    NotUtf8(std::string::FromUtf8Error),
    TooLong,
}

/// Reads the next line (without its `\n` or `\r\n`), holding at most [`MAX_LINE_BYTES`] of
/// it; `None` at the end of the input.
fn read_line(input: &mut impl BufRead) -> io::Result<Option<Line>> {
    let mut bytes = Vec::new();
    let limit = MAX_LINE_BYTES as u64 + 1;
    let read = Read::take(&mut *input, limit).read_until(b'\n', &mut bytes)?;
    if read == 0 {
        return Ok(None);
    }
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    } else if bytes.len() > MAX_LINE_BYTES {
        drop(bytes);
        skip_line(input)?;
        return Ok(Some(Line::TooLong));
    }
    Ok(Some(match String::from_utf8(bytes) {
        Ok(text) => Line::Text(text),
        Err(e) => Line::NotUtf8(e),
    }))
}

/// Skips the rest of a line without holding it.
fn skip_line(input: &mut impl BufRead) -> io::Result<()> {
    loop {
        let available = input.fill_buf()?;
        if available.is_empty() {
            return Ok(());
        }
        match available.iter().position(|&b| b == b'\n') {
            Some(at) => {
                input.consume(at + 1);
                return Ok(());
            }
            None => {
                let len = available.len();
                input.consume(len);
            }
        }
    }
}

/// Runs `handle` on every non-blank line parsed as JSON and writes what it returns (one complete
/// line each). A line that is not JSON, or that `handle` rejects, becomes
/// `{"line": n, "id": ..., "error": "line n: problem"}` and the loop goes on. `out` is flushed
/// after every line, so what was answered is out even if a later line brings the process down.
pub fn run<R, W, F>(input: R, out: W, mut handle: F) -> Result<Summary, BatchError>
where
    R: BufRead,
    W: Write,
    F: FnMut(&Value, &mut Vec<u8>) -> Result<(), LineError>,
{
    run_lines(input, out, |_, case, buf| handle(case, buf))
}

/// Like [`run`], also handing `handle` the line's text, for commands that must read something
/// [`Value`] does not keep (such as the order of an object's keys).
pub fn run_lines<R, W, F>(input: R, out: W, handle: F) -> Result<Summary, BatchError>
where
    R: BufRead,
    W: Write,
    F: FnMut(&str, &Value, &mut Vec<u8>) -> Result<(), LineError>,
{
    run_lines_with(input, out, ErrorStyle::Json, handle)
}

/// How a line that cannot be answered is reported among the answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorStyle {
    /// A JSON line `{"line": n, "id": ..., "error": "line n: problem"}`, among JSON answers.
    #[default]
    Json,
    /// A text line `error: line n (case ID): problem`, among tables (`--pretty`).
    Text,
}

/// [`run_lines`], reporting bad lines in `style`.
pub fn run_lines_with<R, W, F>(
    input: R,
    mut out: W,
    style: ErrorStyle,
    mut handle: F,
) -> Result<Summary, BatchError>
where
    R: BufRead,
    W: Write,
    F: FnMut(&str, &Value, &mut Vec<u8>) -> Result<(), LineError>,
{
    let write_error = |buf: &mut Vec<u8>, line_no: usize, id: &Value, problem: &str| match style {
        ErrorStyle::Json => write_error(buf, line_no, id, problem),
        ErrorStyle::Text => write_text_error(buf, line_no, id, problem),
    };
    let mut summary = Summary::default();
    let mut buf = Vec::new();
    let mut input = input;
    let mut line_no = 0;
    loop {
        line_no += 1;
        buf.clear();
        let read = read_line(&mut input).map_err(|source| BatchError::Read {
            input: "the input".into(),
            line: line_no,
            source,
        })?;
        let line = match read {
            None => break,
            Some(Line::Text(l)) => l,
            // Not UTF-8, or too long: report the line and keep going; any other I/O error ends
            // the run.
            Some(Line::NotUtf8(e)) => {
                summary.failed += 1;
                write_error(
                    &mut buf,
                    line_no,
                    &Value::Null,
                    &format!("not valid UTF-8: {e}"),
                );
                emit(&mut out, &buf)?;
                continue;
            }
            Some(Line::TooLong) => {
                summary.failed += 1;
                write_error(
                    &mut buf,
                    line_no,
                    &Value::Null,
                    &format!(
                        "longer than {} MiB; skipped (split the case, or check that the input is JSON Lines)",
                        MAX_LINE_BYTES >> 20
                    ),
                );
                emit(&mut out, &buf)?;
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let case: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                summary.failed += 1;
                write_error(&mut buf, line_no, &Value::Null, &format!("bad JSON: {e}"));
                emit(&mut out, &buf)?;
                continue;
            }
        };
        match handle(&line, &case, &mut buf) {
            Ok(()) => summary.answered += 1,
            Err(LineError(problem)) => {
                summary.failed += 1;
                // Whatever the handler wrote before failing is dropped: never a partial line.
                buf.clear();
                let id = case.get("id").cloned().unwrap_or(Value::Null);
                write_error(&mut buf, line_no, &id, &problem);
            }
        }
        emit(&mut out, &buf)?;
    }
    out.flush().map_err(BatchError::Write)?;
    Ok(summary)
}

/// Writes one line's answer and flushes it.
fn emit<W: Write>(out: &mut W, bytes: &[u8]) -> Result<(), BatchError> {
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(BatchError::Write)
}

fn write_error(buf: &mut Vec<u8>, line_no: usize, id: &Value, problem: &str) {
    let line = serde_json::json!({
        "line": line_no,
        "id": id,
        "error": format!("line {line_no}: {problem}"),
    });
    buf.extend_from_slice(format!("{line}\n").as_bytes());
}

fn write_text_error(buf: &mut Vec<u8>, line_no: usize, id: &Value, problem: &str) {
    let case = if id.is_null() {
        String::new()
    } else {
        format!(" (case {id})")
    };
    buf.extend_from_slice(format!("error: line {line_no}{case}: {problem}\n").as_bytes());
}

/// A required field of a case.
pub fn field<'v>(case: &'v Value, key: &str) -> Result<&'v Value, LineError> {
    match case.get(key) {
        Some(v) => Ok(v),
        None if case.is_object() => Err(LineError(format!("missing field `{key}`"))),
        None => Err(LineError("a case must be a JSON object".into())),
    }
}

/// A required string field.
pub fn str_field<'v>(case: &'v Value, key: &str) -> Result<&'v str, LineError> {
    field(case, key)?
        .as_str()
        .ok_or_else(|| LineError(format!("field `{key}` must be a string")))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;

    /// Keeps what was written apart from what was flushed.
    #[derive(Default, Clone)]
    struct Flushed {
        pending: Rc<RefCell<Vec<u8>>>,
        out: Rc<RefCell<Vec<u8>>>,
    }

    impl Write for Flushed {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.pending.borrow_mut().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            let pending = std::mem::take(&mut *self.pending.borrow_mut());
            self.out.borrow_mut().extend(pending);
            Ok(())
        }
    }

    /// A line longer than the limit is that line's error, skipped without being held whole;
    /// the lines around it are answered.
    #[test]
    fn a_line_too_long_is_reported_and_skipped() {
        let long = io::repeat(b' ').take(MAX_LINE_BYTES as u64 + 10);
        let input = BufReader::new(
            io::Cursor::new(&b"{\"id\": 1}\n"[..])
                .chain(long)
                .chain(io::Cursor::new(&b"\r\n{\"id\": 3}\r\n"[..])),
        );
        let mut out = Vec::new();
        let summary = run(input, &mut out, |case, buf| {
            writeln!(buf, "{}", case["id"]).map_err(LineError::from)
        })
        .unwrap();
        assert_eq!(
            summary,
            Summary {
                answered: 2,
                failed: 1
            }
        );
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "1");
        assert!(
            lines[1].contains("\"line\":2") && lines[1].contains("longer than 64 MiB"),
            "{}",
            lines[1]
        );
        assert_eq!(lines[2], "3");
    }

    #[test]
    fn every_line_is_flushed_before_the_next_is_handled() {
        let input = "{\"id\": 1}\nnot json\n{\"id\": 3}\n{\"id\": 4}\n";
        let out = Flushed::default();
        let seen = out.clone();
        let mut flushed_before = Vec::new();
        run(input.as_bytes(), out, |case, buf| {
            flushed_before.push(String::from_utf8(seen.out.borrow().clone()).unwrap());
            if case["id"] == 3 {
                buf.extend_from_slice(b"partial");
                return Err(LineError("three".into()));
            }
            buf.extend_from_slice(format!("answer {}\n", case["id"]).as_bytes());
            Ok(())
        })
        .unwrap();
        assert_eq!(flushed_before[0], "");
        assert!(flushed_before[1].starts_with("answer 1\n{\"error\":\"line 2: bad JSON"));
        assert!(
            flushed_before[2].ends_with("line 3: three\",\"id\":3,\"line\":3}\n"),
            "{}",
            flushed_before[2]
        );
        let all = String::from_utf8(seen.out.borrow().clone()).unwrap();
        assert!(!all.contains("partial"), "{all}");
        assert!(all.ends_with("answer 4\n"), "{all}");
    }

    #[test]
    fn text_errors_for_tables() {
        let input = "not json\n{\"id\": \"x\"}\n";
        let mut out = Vec::new();
        let summary = run_lines_with(input.as_bytes(), &mut out, ErrorStyle::Text, |_, _, _| {
            Err(LineError("bad case".into()))
        })
        .unwrap();
        assert_eq!(summary.failed, 2);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("error: line 1: bad JSON: "), "{text}");
        assert_eq!(lines[1], "error: line 2 (case \"x\"): bad case");
    }

    #[test]
    fn a_missing_file_is_named() {
        let err = open_input(Some(Path::new("/nonexistent/cases.jsonl")))
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .starts_with("cannot open `/nonexistent/cases.jsonl`: "),
            "{err}"
        );
    }

    #[test]
    fn bad_lines_are_reported_and_the_run_goes_on() {
        let input = "{\"id\": 1}\nnot json\n\n{\"id\": 2, \"bad\": true}\n";
        let mut out = Vec::new();
        let summary = run(input.as_bytes(), &mut out, |case, buf| {
            if case.get("bad").is_some() {
                return Err(LineError("bad case".into()));
            }
            buf.extend_from_slice(b"ok\n");
            Ok(())
        })
        .unwrap();
        assert_eq!(
            summary,
            Summary {
                answered: 1,
                failed: 2
            }
        );
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "ok");
        assert!(lines[1].contains("\"line 2: bad JSON"), "{}", lines[1]);
        assert!(
            lines[2].contains("\"id\":2") && lines[2].contains("line 4: bad case"),
            "{}",
            lines[2]
        );
    }
}
