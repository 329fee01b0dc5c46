//! SVG charts drawn by Leptos (no JS charting library): a stacked share bar, a meter against a
//! limit, and a sparkline. Each takes plain values; the panels re-render them from snapshots.

use leptos::prelude::*;

/// The fixed stage labels (ARCHITECTURE.md) and their colours.
pub const STAGES: [(&str, &str); 8] = [
    ("mhc", "#8e6cef"),
    ("attn_proj", "#4c9be8"),
    ("indexer", "#35c2c2"),
    ("attention", "#f0a13a"),
    ("moe", "#e8574c"),
    ("head", "#7cc46a"),
    ("comm", "#d06fb0"),
    ("other", "#8a8f98"),
];

pub fn color(stage: &str) -> &'static str {
    STAGES
        .iter()
        .find(|(s, _)| *s == stage)
        .map_or("#888", |(_, c)| c)
}

/// One horizontal bar split into coloured parts by share (`parts`: stage, share in 0..=1).
#[component]
pub fn StackedBar(parts: Vec<(String, f64)>) -> impl IntoView {
    let mut x = 0.0;
    let rects = parts
        .into_iter()
        .filter(|(_, s)| *s > 0.0)
        .map(|(stage, share)| {
            let w = 1000.0 * share;
            let r = view! {
                <rect x=format!("{x:.2}") y="0" width=format!("{w:.2}") height="28"
                    fill=color(&stage)>
                    <title>{format!("{stage}: {:.1}%", 100.0 * share)}</title>
                </rect>
            };
            x += w;
            r
        })
        .collect_view();
    view! {
        <svg class="stacked" viewBox="0 0 1000 28" preserveAspectRatio="none">{rects}</svg>
    }
}

/// A bar filled to `fraction` of its length (clamped to 0..=1).
#[component]
pub fn Meter(fraction: f64, color: &'static str) -> impl IntoView {
    let w = 100.0 * fraction.clamp(0.0, 1.0);
    view! {
        <svg class="meter" viewBox="0 0 100 10" preserveAspectRatio="none">
            <rect x="0" y="0" width="100" height="10" class="track"></rect>
            <rect x="0" y="0" width=format!("{w:.2}") height="10" fill=color></rect>
        </svg>
    }
}

/// A line over recent values, scaled to their maximum.
#[component]
pub fn Sparkline(values: Vec<f64>) -> impl IntoView {
    let max = values.iter().cloned().fold(0.0_f64, f64::max).max(1e-9);
    let n = values.len().max(2) - 1;
    let points = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            format!(
                "{:.1},{:.1}",
                300.0 * i as f64 / n as f64,
                58.0 - 56.0 * v / max
            )
        })
        .collect::<Vec<_>>()
        .join(" ");
    view! {
        <svg class="spark" viewBox="0 0 300 60" preserveAspectRatio="none">
            <polyline points=points fill="none" stroke="#4c9be8" stroke-width="2"></polyline>
        </svg>
    }
}
