//! The JSON Lines loop shared by the batch commands: one case per line, one answer per line.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::Path;

use serde_json::Value;

/// Opens `path` for reading, or standard input when it is absent or `-`.
pub fn open_input(path: Option<&Path>) -> io::Result<Box<dyn BufRead>> {
    match path {
        None => Ok(Box::new(BufReader::new(io::stdin()))),
        Some(p) if p.as_os_str() == "-" => Ok(Box::new(BufReader::new(io::stdin()))),
        Some(p) => Ok(Box::new(BufReader::new(File::open(p)?))),
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

/// Runs `handle` on every non-blank line parsed as JSON and writes what it returns (one complete
/// line each). A line that is not JSON, or that `handle` rejects, becomes
/// `{"line": n, "id": ..., "error": "line n: problem"}` and the loop goes on.
pub fn run<R, W, F>(input: R, out: W, mut handle: F) -> io::Result<Summary>
where
    R: BufRead,
    W: Write,
    F: FnMut(&Value, &mut Vec<u8>) -> Result<(), LineError>,
{
    run_lines(input, out, |_, case, buf| handle(case, buf))
}

/// Like [`run`], also handing `handle` the line's text, for commands that must read something
/// [`Value`] does not keep (such as the order of an object's keys).
pub fn run_lines<R, W, F>(input: R, mut out: W, mut handle: F) -> io::Result<Summary>
where
    R: BufRead,
    W: Write,
    F: FnMut(&str, &Value, &mut Vec<u8>) -> Result<(), LineError>,
{
    let mut summary = Summary::default();
    let mut buf = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line_no = n + 1;
        let line = match line {
            Ok(l) => l,
            // Not UTF-8: report the line and keep going; any other I/O error ends the run.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                summary.failed += 1;
                write_error(
                    &mut out,
                    line_no,
                    &Value::Null,
                    &format!("not valid UTF-8: {e}"),
                )?;
                continue;
            }
            Err(e) => return Err(e),
        };
        if line.trim().is_empty() {
            continue;
        }
        let case: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                summary.failed += 1;
                write_error(&mut out, line_no, &Value::Null, &format!("bad JSON: {e}"))?;
                continue;
            }
        };
        buf.clear();
        match handle(&line, &case, &mut buf) {
            Ok(()) => {
                summary.answered += 1;
                out.write_all(&buf)?;
            }
            Err(LineError(problem)) => {
                summary.failed += 1;
                let id = case.get("id").cloned().unwrap_or(Value::Null);
                write_error(&mut out, line_no, &id, &problem)?;
            }
        }
    }
    out.flush()?;
    Ok(summary)
}

fn write_error<W: Write>(out: &mut W, line_no: usize, id: &Value, problem: &str) -> io::Result<()> {
    let line = serde_json::json!({
        "line": line_no,
        "id": id,
        "error": format!("line {line_no}: {problem}"),
    });
    writeln!(out, "{line}")
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
    use super::*;

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
