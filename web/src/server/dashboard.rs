//! The dashboard's static assets, embedded at build time (web/build.rs): `/` serves the Leptos
//! app's page, `/dashboard/*` its script, wasm and style sheet. If the wasm was not built when
//! this binary was compiled, `/` serves a page that says how to build it.

use actix_web::{HttpRequest, HttpResponse, http::header};

macro_rules! asset {
    ($name:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/dashboard/", $name))
    };
}

const INDEX: &[u8] = asset!("index.html");
const STYLE: &[u8] = asset!("style.css");
const JS: &[u8] = asset!("pkg/amdahl_dashboard.js");
const WASM: &[u8] = asset!("pkg/amdahl_dashboard_bg.wasm");

const BUILT: bool = matches!(env!("AMDAHL_DASHBOARD_BUILT").as_bytes(), b"1");

/// Whether the wasm dashboard was embedded in this binary.
pub fn embedded() -> bool {
    BUILT
}

const NOT_BUILT: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>amdahl: dashboard not built</title></head>
<body style="font-family:system-ui,sans-serif;max-width:46em;margin:3em auto;line-height:1.5">
<h1>The dashboard was not built into this binary</h1>
<p>The server works (try <a href="/v1/profile">/v1/profile</a>, <a href="/metrics">/metrics</a>
or the WebSocket <code>/v1/ws/telemetry</code>); only the wasm dashboard is missing.</p>
<p>Build it, then rebuild the server:</p>
<pre>bash tools/build_dashboard.sh      # Debian rustc-web + wasm-bindgen-cli, see the script
cargo run --release -p amdahl -- serve</pre>
<p>With rustup and network access, <code>rustup target add wasm32-unknown-unknown</code> plus
the matching <code>wasm-bindgen-cli</code> works too (README.md, "Dashboard").</p>
</body></html>
"#;

fn ok(ct: &'static str, body: &'static [u8]) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(ct)
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(body)
}

pub async fn index() -> HttpResponse {
    if BUILT {
        ok("text/html; charset=utf-8", INDEX)
    } else {
        ok("text/html; charset=utf-8", NOT_BUILT.as_bytes())
    }
}

pub async fn asset(req: HttpRequest) -> HttpResponse {
    let name = req.match_info().get("file").unwrap_or_default();
    match (BUILT, name) {
        (true, "amdahl_dashboard.js") => ok("text/javascript; charset=utf-8", JS),
        (true, "amdahl_dashboard_bg.wasm") => ok("application/wasm", WASM),
        (_, "style.css") => ok("text/css; charset=utf-8", STYLE),
        _ => super::routes::not_found(req).await,
    }
}
