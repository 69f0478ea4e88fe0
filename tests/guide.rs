//! The guide (`docs/guide/`) and the README stay whole:
//! - every page of the guide is compiled as doc tests (it is listed in `src/lib.rs`'s `guide`);
//! - every relative link of the README, ARCHITECTURE.md and the guide leads to a file that exists,
//!   and an anchor (`page.md#a-heading`) to one of its headings, as GitHub spells them;
//! - the production page names every metric the runtime and the consume layer record, and no
//!   other.
//!
//! (The command's page is checked against `rebalance --help` by `crates/rebalance-cli/tests/guide.rs`;
//! the citations of the deviations page by `tests/architecture_map.rs`.)

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The guide's pages, as paths from the repository's root, sorted.
fn guide_pages() -> Vec<String> {
    let mut pages: Vec<String> = fs::read_dir(root().join("docs/guide"))
        .expect("read docs/guide")
        .map(|entry| entry.expect("a directory entry").file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/guide/{name}"))
        .collect();
    pages.sort();
    pages
}

/// The lines of `markdown` outside fenced code blocks.
fn prose(markdown: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    markdown.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// `line` without its code spans (`` `a](b)` `` is no link).
fn without_code(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// The targets of the inline links and images of `markdown` (`[text](target)`).
fn links(markdown: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(markdown) {
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some(start) = rest.find("](") {
            rest = &rest[start + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            targets.push(target.to_owned());
            rest = &rest[end..];
        }
    }
    targets
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped (but `-` and `_`),
/// spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of `markdown`'s headings.
fn anchors(markdown: &str) -> BTreeSet<String> {
    prose(markdown)
        .filter(|line| line.starts_with('#'))
        .map(|line| slug(line.trim_start_matches('#')))
        .collect()
}

/// What is wrong with the relative links of `document` (read from `base`, the directory its
/// links are relative to), one line per broken link.
fn broken_links(document: &str, text: &str, base: &Path) -> Vec<String> {
    let mut broken = Vec::new();
    for target in links(text) {
        if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        let (file, linked): (PathBuf, String) = if path.is_empty() {
            (PathBuf::from(document), text.to_owned())
        } else {
            let file = base.join(path);
            if !file.exists() {
                broken.push(format!("{document}: `{target}`: no {}", file.display()));
                continue;
            }
            let linked = if path.ends_with(".md") {
                fs::read_to_string(&file).unwrap_or_default()
            } else {
                String::new()
            };
            (file, linked)
        };
        if let Some(anchor) = anchor
            && (file.extension().is_some_and(|e| e == "md") || path.is_empty())
            && !anchors(&linked).contains(anchor)
        {
            broken.push(format!(
                "{document}: `{target}`: no heading `#{anchor}` in {}",
                file.display()
            ));
        }
    }
    broken
}

#[test]
fn every_guide_page_is_compiled_as_doc_tests() {
    let lib = fs::read_to_string(root().join("src/lib.rs")).expect("read src/lib.rs");
    let start = lib
        .find("pub mod guide")
        .expect("src/lib.rs has the module `guide`");
    let listed = &lib[start..];
    let missing: Vec<String> = guide_pages()
        .into_iter()
        .filter(|page| {
            let name = page.trim_start_matches("docs/guide/");
            !listed.contains(&format!("=> \"{name}\","))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "pages of the guide that src/lib.rs does not compile (add them to `pages!`): {missing:?}"
    );
}

#[test]
fn every_relative_link_leads_somewhere() {
    let mut documents = vec![
        ("README.md".to_owned(), root().to_path_buf()),
        ("ARCHITECTURE.md".to_owned(), root().to_path_buf()),
    ];
    for page in guide_pages() {
        documents.push((page, root().join("docs/guide")));
    }
    let mut broken = Vec::new();
    for (document, base) in &documents {
        let text = fs::read_to_string(root().join(document))
            .unwrap_or_else(|e| panic!("read {document}: {e}"));
        broken.extend(broken_links(document, &text, base));
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The metric names a `metrics.rs` declares: `pub const X: &str = "rebalance_...";`.
fn declared_metrics(file: &str) -> Vec<String> {
    let text = fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("read {file}: {e}"));
    text.lines()
        .filter(|line| line.starts_with("pub const ") && line.contains(": &str = \"rebalance_"))
        .filter_map(|line| line.split('"').nth(1))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_production_page_names_every_metric_and_no_other() {
    let declared: BTreeSet<String> = [
        "crates/rebalance-runtime/src/metrics.rs",
        "crates/rebalance-consume/src/metrics.rs",
    ]
    .into_iter()
    .flat_map(declared_metrics)
    .collect();
    assert!(
        declared.len() >= 15 && declared.contains("rebalance_rounds_total"),
        "the metric names were not found in the metrics modules: {declared:?}"
    );
    let page = fs::read_to_string(root().join("docs/guide/production.md"))
        .expect("read docs/guide/production.md");
    let named: BTreeSet<String> = prose(&page)
        .filter(|line| line.starts_with("| `rebalance_"))
        .filter_map(|line| line.split('`').nth(1))
        .map(str::to_owned)
        .collect();
    let missing: Vec<&String> = declared.difference(&named).collect();
    let unknown: Vec<&String> = named.difference(&declared).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/guide/production.md's metric tables: missing {missing:?}, not recorded by the code {unknown:?}"
    );
}

#[test]
fn links_and_anchors_are_read_as_github_reads_them() {
    assert_eq!(
        links(
            "See [a](a.md#x) and ![p](../p.svg \"t\"), `[no](code.md)`.\n```\n[no](fenced.md)\n```\n"
        ),
        ["a.md#x", "../p.svg"]
    );
    assert_eq!(
        slug(" `describe`: a group's real state"),
        "describe-a-groups-real-state"
    );
    assert_eq!(
        slug("No start-up storm: settling"),
        "no-start-up-storm-settling"
    );
    assert_eq!(slug("`rebalance local-cluster`"), "rebalance-local-cluster");
    let broken = broken_links(
        "x.md",
        "# Top\n[self](#top) [gone](#gone) [none](missing.md)\n",
        root(),
    );
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(
        broken[0].contains("#gone") && broken[1].contains("missing.md"),
        "{broken:?}"
    );
}
