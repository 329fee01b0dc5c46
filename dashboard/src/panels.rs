//! The panels, each a view of one snapshot: where step time goes per stage (per device, for the
//! chosen phase), achieved bandwidth against the device's peak, kernel blocks against SMs, the
//! serving numbers and the bottleneck report in words.

use amdahl_protocol::telemetry::{Bound, DeviceTelemetry, PhaseReport, Snapshot};
use leptos::prelude::*;

use crate::charts::{Meter, Sparkline, StackedBar, color};
use crate::format::{ms, pct, si};

fn phase_of<'a>(d: &'a DeviceTelemetry, phase: &str) -> Option<&'a PhaseReport> {
    d.phases.iter().find(|p| p.phase == phase)
}

fn none_yet(phase: &str) -> AnyView {
    view! { <p class="muted">{format!("No {phase} steps in the window yet.")}</p> }.into_any()
}

/// Share of step time per stage, per device.
pub fn stages(s: &Snapshot, phase: &str) -> AnyView {
    s.devices
        .iter()
        .map(|d| {
            let Some(p) = phase_of(d, phase) else {
                return view! { <h3>{d.device.clone()}</h3> {none_yet(phase)} }.into_any();
            };
            let parts = p.stages.iter().map(|x| (x.stage.clone(), x.share)).collect();
            let steps = p.steps.max(1) as f64;
            let rows = p
                .stages
                .iter()
                .filter(|x| x.seconds > 0.0)
                .map(|x| {
                    view! {
                        <tr>
                            <td><span class="swatch" style=format!("background:{}", color(&x.stage))></span>
                                {x.stage.clone()}</td>
                            <td class="num">{pct(x.share)}</td>
                            <td class="num">{ms(1e3 * x.seconds / steps)}</td>
                            <td class="bar"><Meter fraction=x.share color=color(&x.stage)/></td>
                            <td class="num">{format!("+{:.0}%", 100.0 * x.gain_if_2x)}</td>
                        </tr>
                    }
                })
                .collect_view();
            view! {
                <h3>{format!("{}: {} {phase} step{}, {} per step", d.device, p.steps,
                    if p.steps == 1 { "" } else { "s" }, ms(p.mean_step_ms))}</h3>
                <StackedBar parts=parts/>
                <table class="stages">
                    <tr><th>"stage"</th><th class="num">"share"</th><th class="num">"per step"</th><th></th>
                        <th class="num" title="tok/s gain if this stage ran 2× faster">"2× gives"</th></tr>
                    {rows}
                </table>
            }
            .into_any()
        })
        .collect_view()
        .into_any()
}

/// Achieved bandwidth per stage against the device's measured copy bandwidth.
pub fn bandwidth(s: &Snapshot, phase: &str) -> AnyView {
    s.devices
        .iter()
        .map(|d| {
            let peak = d.peaks.map(|p| p.bandwidth_bytes_per_second).unwrap_or(0.0);
            let flops = d.peaks.map(|p| p.flops_per_second).unwrap_or(0.0);
            let head = format!(
                "{}: peak {} copy, {} matmul",
                d.device,
                si(peak, "B/s"),
                si(flops, "FLOP/s")
            );
            let Some(p) = phase_of(d, phase) else {
                return view! { <h3>{head}</h3> {none_yet(phase)} }.into_any();
            };
            let rows = p
                .stages
                .iter()
                .filter(|x| x.bytes > 0 || x.flops > 0)
                .map(|x| {
                    let frac = if peak > 0.0 { x.bandwidth_bytes_per_second / peak } else { 0.0 };
                    let eff = match (x.efficiency, x.bound) {
                        (Some(e), Bound::Flops) => format!("{} of FLOP floor", pct(e)),
                        (Some(e), _) => format!("{} of byte floor", pct(e)),
                        (None, _) => "no peaks".into(),
                    };
                    view! {
                        <tr>
                            <td>{x.stage.clone()}</td>
                            <td class="num">{si(x.bandwidth_bytes_per_second, "B/s")}</td>
                            <td class="bar"><Meter fraction=frac color=color(&x.stage)/></td>
                            <td class="num">{pct(frac)}</td>
                            <td>{eff}</td>
                        </tr>
                    }
                })
                .collect_view();
            view! {
                <h3>{head}</h3>
                <table class="stages">
                    <tr><th>"stage"</th><th class="num">"achieved"</th><th>"of peak bandwidth"</th><th></th>
                        <th>"roofline"</th></tr>
                    {rows}
                </table>
            }
            .into_any()
        })
        .collect_view()
        .into_any()
}

/// Blocks per launch against the device's SMs (GPU backends fill it).
pub fn occupancy(s: &Snapshot, phase: &str) -> AnyView {
    s.devices
        .iter()
        .map(|d| {
            let launches = phase_of(d, phase).map(|p| p.occupancy.clone()).unwrap_or_default();
            if launches.is_empty() {
                let why = if d.multiprocessors.is_none() {
                    "no kernel launches: this device is a CPU (GPU backends report blocks per launch against SMs here)"
                } else {
                    "no launches recorded in the window"
                };
                return view! { <h3>{d.device.clone()}</h3><p class="muted">{why}</p> }.into_any();
            }
            let rows = launches
                .into_iter()
                .map(|o| {
                    let fill = o.blocks_mean / f64::from(o.sms.max(1));
                    view! {
                        <tr>
                            <td>{o.stage.clone()}</td>
                            <td class="num">{o.launches}</td>
                            <td class="num">{format!("{:.0} ({}–{})", o.blocks_mean, o.blocks_min, o.blocks_max)}</td>
                            <td class="num">{o.sms}</td>
                            <td class="bar"><Meter fraction=fill color=color(&o.stage)/></td>
                            <td class="num">{o.under_filled_launches}</td>
                        </tr>
                    }
                })
                .collect_view();
            view! {
                <h3>{d.device.clone()}</h3>
                <table class="stages">
                    <tr><th>"stage"</th><th>"launches"</th><th>"blocks mean (min–max)"</th>
                        <th>"SMs"</th><th>"blocks / SMs"</th><th>"under-filled"</th></tr>
                    {rows}
                </table>
            }
            .into_any()
        })
        .collect_view()
        .into_any()
}

/// tok/s, latencies, queue, cache and batch.
pub fn serving(s: &Snapshot, tps: Vec<f64>) -> AnyView {
    let lat = |name: &str, p: amdahl_protocol::telemetry::Percentiles| {
        view! {
            <tr><td>{name.to_string()}</td><td class="num">{ms(p.p50)}</td>
                <td class="num">{ms(p.p90)}</td><td class="num">{ms(p.p99)}</td>
                <td class="num">{p.count}</td></tr>
        }
    };
    view! {
        <div class="cards">
            <div class="card"><div class="big" id="tps">{format!("{:.1}", s.tokens_per_second)}</div>
                <div class="muted">"tok/s"</div><Sparkline values=tps/></div>
            <div class="card"><div class="big">{s.requests.running}</div><div class="muted">"running"</div>
                <div class="big">{s.requests.waiting}</div><div class="muted">"waiting"</div></div>
            <div class="card"><div class="big">{pct(s.cache.usage_ratio)}</div>
                <div class="muted">{format!("cache slots, {}", si(s.cache.bytes as f64, "B"))}</div>
                <Meter fraction=s.cache.usage_ratio color="#4c9be8"/></div>
            <div class="card"><div class="big">{s.batch.last}</div>
                <div class="muted">{format!("batch (mean {:.1}, max {})", s.batch.mean, s.batch.max)}</div></div>
        </div>
        <table class="latency">
            <tr><th></th><th class="num">"p50"</th><th class="num">"p90"</th><th class="num">"p99"</th>
                <th class="num">"n"</th></tr>
            {lat("TTFT", s.ttft_ms)}
            {lat("ITL", s.itl_ms)}
        </table>
        <p class="muted">{format!(
            "window {:.1} s, {} steps since start; stage timing every {} step(s), {} profiled, overhead {}",
            s.window_seconds, s.steps_total, s.profile.every, s.profile.profiled_steps,
            pct(s.profile.overhead_ratio))}</p>
    }
    .into_any()
}

/// The bottleneck report in words.
pub fn report(s: &Snapshot) -> AnyView {
    if s.report.is_empty() {
        return view! { <p class="muted">"Waiting for traffic: send a prompt below."</p> }
            .into_any();
    }
    let items = s
        .report
        .iter()
        .map(|w| view! { <li>{w.clone()}</li> })
        .collect_view();
    view! { <ul id="report">{items}</ul> }.into_any()
}
