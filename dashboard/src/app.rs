//! The page: header with the connection state, the panels (re-rendered from each snapshot) and
//! the playground. A phase switch picks which steps (decode, prefill, mixed) the stage panels
//! show.

use leptos::prelude::*;

use crate::panels;
use crate::playground::Playground;
use crate::telemetry::{Live, connect};

const PHASES: [&str; 3] = ["decode", "prefill", "mixed"];

#[component]
pub fn App() -> impl IntoView {
    let live = Live::new();
    connect(live);
    let phase = RwSignal::new("decode");
    // How many steps of the chosen phase the stage panel shows (the browser test watches it).
    let steps = move || {
        live.snap.with(|s| {
            s.as_ref().map_or(0, |s| {
                s.devices
                    .iter()
                    .flat_map(|d| d.phases.iter())
                    .filter(|p| p.phase == phase.get())
                    .map(|p| p.steps)
                    .sum::<u64>()
            })
        })
    };
    let panel = move |f: fn(&amdahl_protocol::telemetry::Snapshot, &str) -> AnyView| {
        move || {
            live.snap.with(|s| match s {
                Some(s) => f(s, phase.get()),
                None => view! { <p class="muted">"connecting…"</p> }.into_any(),
            })
        }
    };
    let switch = PHASES
        .iter()
        .map(|p| {
            let p = *p;
            view! {
                <button class:active=move || phase.get() == p on:click=move |_| phase.set(p)>{p}</button>
            }
        })
        .collect_view();
    view! {
        <header>
            <h1>"amdahl"</h1>
            <span class="model">{move || live.snap.with(|s| s.as_ref().map(|s| s.model.clone()).unwrap_or_default())}</span>
            <span class="switch">{switch}</span>
            <span id="conn" class=move || format!("conn {}", live.status.get())>
                {move || format!("{} ({} snapshots)", live.status.get(), live.received.get())}
            </span>
        </header>
        <main class="grid">
            <section class="panel wide" id="stage-panel" data-steps=move || steps().to_string()>
                <h2>{move || format!("Where {} time goes", phase.get())}</h2>
                {panel(panels::stages)}
            </section>
            <section class="panel" id="report-panel">
                <h2>"Bottleneck report"</h2>
                {move || live.snap.with(|s| s.as_ref().map(panels::report))}
            </section>
            <section class="panel" id="bandwidth-panel">
                <h2>"Bandwidth per stage vs peak"</h2>
                {panel(panels::bandwidth)}
            </section>
            <section class="panel" id="serving-panel">
                <h2>"Serving"</h2>
                {move || live.snap.with(|s| s.as_ref().map(|s| panels::serving(s, live.tps.get())))}
            </section>
            <section class="panel" id="occupancy-panel">
                <h2>"Blocks vs SMs"</h2>
                {panel(panels::occupancy)}
            </section>
            <section class="panel wide" id="playground">
                <h2>"Playground"</h2>
                <Playground/>
            </section>
        </main>
    }
}
