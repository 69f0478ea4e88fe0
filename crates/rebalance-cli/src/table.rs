//! Plain-text tables for people.

use std::io::Write;

use rebalance_core::MessageQueue;

/// Writes a left-aligned table with a header row.
pub fn write<W, I>(out: &mut W, header: &[&str], rows: I) -> std::io::Result<()>
where
    W: Write + ?Sized,
    I: IntoIterator<Item = Vec<String>>,
{
    let rows: Vec<Vec<String>> = rows.into_iter().collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let padded: Vec<String> = cells
            .zip(&widths)
            .map(|(c, &w)| format!("{c}{}", " ".repeat(w.saturating_sub(c.chars().count()))))
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    writeln!(out, "{}", line(&mut header.iter().copied()))?;
    for row in &rows {
        writeln!(out, "{}", line(&mut row.iter().map(String::as_str)))?;
    }
    Ok(())
}

/// `topic/broker:0-3,7 topic/broker2:1`: queues grouped by topic and broker, runs of ids joined.
pub fn compact_queues(queues: &[MessageQueue]) -> String {
    let mut groups: Vec<(String, Vec<i32>)> = Vec::new();
    for q in queues {
        let key = format!("{}/{}", q.topic, q.broker_name);
        match groups.last_mut() {
            Some((k, ids)) if *k == key => ids.push(q.queue_id),
            _ => groups.push((key, vec![q.queue_id])),
        }
    }
    groups
        .into_iter()
        .map(|(key, ids)| format!("{key}:{}", runs(&ids)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn runs(ids: &[i32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j].checked_add(1) == Some(ids[j + 1]) {
            j += 1;
        }
        parts.push(if j > i + 1 {
            format!("{}-{}", ids[i], ids[j])
        } else if j == i + 1 {
            format!("{},{}", ids[i], ids[j])
        } else {
            ids[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacts_runs() {
        let q = |b: &str, i| MessageQueue::new("T", b, i);
        let got = compact_queues(&[
            q("a", 0),
            q("a", 1),
            q("a", 2),
            q("a", 5),
            q("a", 6),
            q("b", 1),
        ]);
        assert_eq!(got, "T/a:0-2,5,6 T/b:1");
    }

    #[test]
    fn runs_do_not_wrap_around_the_integer_range() {
        let q = |i| MessageQueue::new("T", "b", i);
        assert_eq!(
            compact_queues(&[q(i32::MAX), q(i32::MIN), q(i32::MIN + 1)]),
            "T/b:2147483647,-2147483648,-2147483647"
        );
        assert_eq!(
            compact_queues(&[q(i32::MAX - 1), q(i32::MAX), q(i32::MIN)]),
            "T/b:2147483646,2147483647,-2147483648"
        );
    }

    #[test]
    fn aligns_columns() {
        let mut out = Vec::new();
        write(
            &mut out,
            &["a", "bb"],
            [vec!["xxx".to_string(), "y".to_string()]],
        )
        .unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "a    bb\nxxx  y\n");
    }
}
