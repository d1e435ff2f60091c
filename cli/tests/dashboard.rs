//! The Grafana dashboard (`docs/grafana/leasehold.json`) queries only what leasehold
//! exports: every series it names is in the telemetry table (`src/telemetry.rs`), with the
//! labels that table gives it, a counter only through `rate`/`increase`, and a histogram only
//! by the quantiles the Prometheus exporter's default summary has.

use std::collections::{BTreeMap, BTreeSet};

const DASHBOARD: &str = include_str!("../../docs/grafana/leasehold.json");
const TELEMETRY: &str = include_str!("../../src/telemetry.rs");

/// The quantiles `metrics-exporter-prometheus` renders a histogram's summary with, unless
/// configured otherwise (the CLI's `--metrics-addr` does not configure it).
const SUMMARY_QUANTILES: [&str; 7] = ["0", "0.5", "0.9", "0.95", "0.99", "0.999", "1"];
/// Labels Prometheus adds to every scraped series.
const TARGET_LABELS: [&str; 2] = ["instance", "job"];

#[derive(Debug)]
struct Series {
    kind: String,
    labels: BTreeSet<String>,
}

/// The module table of `src/telemetry.rs`: name → kind and labels.
fn telemetry_table() -> BTreeMap<String, Series> {
    let table: BTreeMap<String, Series> = TELEMETRY
        .lines()
        .filter_map(|line| line.strip_prefix("//! | `leasehold_"))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let name = format!("leasehold_{}", cells[0].trim_end_matches('`'));
            let labels = cells[2]
                .split(',')
                .map(|label| label.trim().trim_matches('`').to_owned())
                .filter(|label| !label.is_empty() && label != "—")
                .collect();
            let kind = cells[1].to_owned();
            (name, Series { kind, labels })
        })
        .collect();
    assert!(
        table.len() >= 10,
        "the telemetry table was not found: {table:?}"
    );
    table
}

/// Every PromQL expression of the dashboard: panel targets and template variable queries.
fn expressions() -> Vec<String> {
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).expect("valid JSON");
    let mut exprs = Vec::new();
    let panels = dashboard["panels"].as_array().expect("panels");
    for panel in panels {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().expect("a target's expr").to_owned());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if let Some(query) = variable["query"]["query"].as_str() {
            exprs.push(query.to_owned());
        }
    }
    assert!(
        exprs.len() >= 10,
        "the dashboard has {} queries",
        exprs.len()
    );
    exprs
}

/// The `leasehold_*` names an expression uses, each with the label matchers after it.
fn series_used(expr: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut used = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("leasehold_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].to_owned();
        let mut matchers = Vec::new();
        if let Some(inner) = tail[end..].strip_prefix('{') {
            let inner = &inner[..inner.find('}').expect("a closed matcher")];
            for matcher in inner.split(',') {
                let split = matcher.find(['=', '!']).expect("label op value");
                let value = matcher[split..].trim_start_matches(['=', '!', '~']);
                matchers.push((
                    matcher[..split].trim().to_owned(),
                    value.trim_matches('"').to_owned(),
                ));
            }
        }
        used.push((name, matchers));
        rest = &tail[end..];
    }
    used
}

/// The labels of every `by (…)` clause of an expression.
fn grouped_by(expr: &str) -> Vec<String> {
    expr.split("by (")
        .skip(1)
        .flat_map(|clause| {
            let clause = &clause[..clause.find(')').expect("a closed by clause")];
            clause
                .split(',')
                .map(|label| label.trim().to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn every_series_the_dashboard_queries_is_exported_with_those_labels() {
    let table = telemetry_table();
    let mut seen = BTreeSet::new();
    for expr in expressions() {
        // A template variable's values: Grafana's `label_values(series, label)`.
        if let Some(args) = expr.strip_prefix("label_values(") {
            let (name, label) = args
                .trim_end_matches(')')
                .split_once(',')
                .expect("two args");
            let labels = &table.get(name).expect("a series of the table").labels;
            assert!(labels.contains(label.trim()), "{name} has no label {label}");
            continue;
        }
        let used = series_used(&expr);
        assert!(!used.is_empty(), "a query of no leasehold series: {expr}");
        for (name, matchers) in &used {
            let series = table
                .get(name)
                .unwrap_or_else(|| panic!("{name} is not in the telemetry table: {expr}"));
            seen.insert(name.clone());
            for (label, value) in matchers {
                if label == "quantile" {
                    assert_eq!(
                        series.kind, "histogram",
                        "quantile of a {}: {expr}",
                        series.kind
                    );
                    assert!(
                        SUMMARY_QUANTILES.contains(&value.as_str()),
                        "the exporter's summary has no quantile {value}: {expr}"
                    );
                } else {
                    assert!(
                        series.labels.contains(label),
                        "{name} has no label {label}: {expr}"
                    );
                }
            }
            let rated = expr.contains(&format!("rate({name}"))
                || expr.contains(&format!("increase({name}"));
            match series.kind.as_str() {
                "counter" => assert!(rated, "a counter read without rate or increase: {expr}"),
                "histogram" => assert!(
                    matchers.iter().any(|(label, _)| label == "quantile"),
                    "a histogram read without a quantile: {expr}"
                ),
                _ => assert!(!rated, "a rate of a {}: {expr}", series.kind),
            }
        }
        for label in grouped_by(&expr) {
            assert!(
                TARGET_LABELS.contains(&label.as_str())
                    || used
                        .iter()
                        .all(|(name, _)| table[name].labels.contains(&label)),
                "grouped by {label}, which its series lack: {expr}"
            );
        }
    }
    // The dashboard shows every series leasehold exports.
    let missing: Vec<_> = table.keys().filter(|name| !seen.contains(*name)).collect();
    assert!(missing.is_empty(), "series no panel shows: {missing:?}");
}

#[test]
fn the_telemetry_table_names_exactly_the_exported_constants() {
    let constants: BTreeSet<String> = TELEMETRY
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub const "))
        .filter_map(|decl| decl.split('"').nth(1))
        .map(str::to_owned)
        .collect();
    let table: BTreeSet<String> = telemetry_table().into_keys().collect();
    assert_eq!(constants, table);
}
