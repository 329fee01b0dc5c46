//! The provisioned Grafana board asks only for what a live server exports: every `amdahl_*`
//! series named in grafana/dashboards/amdahl.json appears in /metrics of a real server after a
//! real request, and every panel uses the provisioned Prometheus datasource.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

fn exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(e)) = m.get("expr") {
                out.push(e.clone());
            }
            m.values().for_each(|x| exprs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| exprs(x, out)),
        _ => {}
    }
}

fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while let Some(off) = expr[i..].find("amdahl_") {
        let start = i + off;
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
            end += 1;
        }
        out.push(expr[start..end].to_string());
        i = end;
    }
    out
}

fn datasource_uids(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let Some(ds) = m.get("datasource") {
                out.insert(ds["uid"].as_str().unwrap_or("<none>").to_string());
            }
            m.values().for_each(|x| datasource_uids(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| datasource_uids(x, out)),
        _ => {}
    }
}

#[actix_web::test]
async fn every_metric_the_grafana_board_queries_is_exported() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let board: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("grafana/dashboards/amdahl.json")).unwrap(),
    )
    .unwrap();
    let mut all = Vec::new();
    exprs(&board, &mut all);
    assert!(all.len() >= 12, "{} queries", all.len());
    let wanted: BTreeSet<String> = all.iter().flat_map(|e| metric_names(e)).collect();
    assert!(wanted.len() >= 12, "{wanted:?}");

    let dir = model_dir();
    let s = serve(dir.path(), Opts::default());
    let base = s.url();
    let c = client();
    let (st, _, _) = post(
        &c,
        &format!("{base}/v1/completions"),
        &greedy_completion(json!("1+2="), 8),
    )
    .await;
    assert_eq!(st, 200);
    // Window gauges refresh at 5 Hz: poll until the last of them shows up.
    let mut missing = Vec::new();
    for _ in 0..50 {
        let mut res = c.get(format!("{base}/metrics")).send().await.unwrap();
        let text = String::from_utf8(res.body().limit(8 << 20).await.unwrap().to_vec()).unwrap();
        let exported: BTreeSet<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .collect();
        missing = wanted
            .iter()
            .filter(|n| !exported.contains(n.as_str()))
            .cloned()
            .collect();
        if missing.is_empty() {
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(missing.is_empty(), "queried but not exported: {missing:?}");
    s.shutdown().await.unwrap();

    // Every panel and query names the provisioned datasource.
    let prov =
        std::fs::read_to_string(root.join("grafana/provisioning/datasources/prometheus.yaml"))
            .unwrap();
    let mut uids = BTreeSet::new();
    datasource_uids(&board, &mut uids);
    assert_eq!(uids.len(), 1, "{uids:?}");
    let uid = uids.into_iter().next().unwrap();
    assert!(
        prov.contains(&format!("uid: {uid}")),
        "datasource uid {uid} is not provisioned"
    );
}
