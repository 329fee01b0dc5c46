// Browser test of the dashboard: starts a real `amdahl serve` (the embedded default model) on
// 127.0.0.1 port 0, loads `/` in headless Debian Chromium (playwright-core, no downloaded
// browser), sends "17*23=" from the playground, asserts the answer streams in ("391", in more
// than one delta) and that the stage panel updates with the new steps, and saves a screenshot.
// Env: AMDAHL_BIN (default target/debug/amdahl), ARTIFACTS (default target/dashboard-artifacts).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const bin = process.env.AMDAHL_BIN || path.join(root, "target/debug/amdahl");
const artifacts = process.env.ARTIFACTS || path.join(root, "target/dashboard-artifacts");

function startServer() {
  const child = spawn(bin, ["serve", "--host", "127.0.0.1", "--port", "0"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const url = new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`no listening line: ${out}`)), 60_000);
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on("exit", (code) => reject(new Error(`amdahl exited (${code}): ${out}`)));
  });
  return { child, url };
}

async function stopServer(child) {
  if (child.exitCode !== null) return;
  const done = new Promise((r) => child.on("exit", r));
  child.kill("SIGTERM");
  const t = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await done;
  clearTimeout(t);
}

test("dashboard streams a playground answer and updates the stage panel", { timeout: 180_000 }, async () => {
  const { child, url } = startServer();
  let browser;
  try {
    const base = await url;
    browser = await chromium.launch({
      executablePath: "/usr/bin/chromium",
      args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
    });
    const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    // Every request.delta the playground's socket receives (for the failure message).
    const deltas = [];
    page.on("websocket", (ws) => ws.on("framereceived", (f) => {
      if (typeof f.payload === "string" && f.payload.includes('"request.delta"')) {
        deltas.push(JSON.parse(f.payload).text);
      }
    }));
    await page.goto(base + "/");
    // The telemetry socket is live and snapshots are arriving.
    await page.waitForFunction(() => document.querySelector("#conn")?.textContent.startsWith("live"),
      null, { timeout: 30_000 });
    const stepsBefore = Number(await page.getAttribute("#stage-panel", "data-steps"));

    // Record every value the answer takes while it streams.
    await page.evaluate(() => {
      window.__seen = [];
      const out = document.querySelector("#playground-output");
      new MutationObserver(() => window.__seen.push(out.textContent))
        .observe(out, { childList: true, characterData: true, subtree: true });
    });
    await page.fill("#playground-prompt", "17*23=");
    await page.click("#playground-send");
    await page.waitForFunction(() => document.querySelector("#playground-status")?.textContent.startsWith("done"),
      null, { timeout: 60_000 });
    const answer = await page.textContent("#playground-output");
    assert.match(answer, /^391/, `answer: ${JSON.stringify(answer)}`);
    const seen = [...new Set(await page.evaluate(() => window.__seen))].filter((s) => s.length > 0);
    assert.ok(deltas.length >= 2, `the server sent one delta: ${JSON.stringify(deltas)}`);
    assert.ok(seen.length >= 2,
      `rendered in one piece: ${JSON.stringify(seen)} from deltas ${JSON.stringify(deltas)}`);
    for (const s of seen) assert.ok(answer.startsWith(s), `${JSON.stringify(s)} is not a prefix`);

    // The stage panel shows the new decode steps (the answer's tokens after the first), with a
    // row per busy stage, and the report has sentences.
    const tokens = Number((await page.textContent("#playground-status")).match(/(\d+) tokens/)[1]);
    await page.waitForFunction(([before, n]) =>
      Number(document.querySelector("#stage-panel")?.dataset.steps) >= before + n - 1,
      [stepsBefore, tokens], { timeout: 10_000 });
    const rows = await page.locator("#stage-panel table.stages tr").count();
    assert.ok(rows >= 4, `stage rows: ${rows}`);
    const moe = await page.locator("#stage-panel td", { hasText: "moe" }).count();
    assert.ok(moe >= 1, "moe row");
    await page.waitForSelector("#report li");
    const report = await page.textContent("#report");
    assert.match(report, /of decode: making it 2× faster gives \+\d+% tok\/s/);
    assert.deepEqual(errors, []);

    mkdirSync(artifacts, { recursive: true });
    const shot = path.join(artifacts, "dashboard.png");
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`screenshot: ${shot}`);
  } finally {
    if (browser) await browser.close();
    await stopServer(child);
  }
});
