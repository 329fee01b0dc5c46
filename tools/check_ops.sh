#!/usr/bin/env bash
# Validates the ops files without a Docker engine (none on our machines):
#   - docker/prometheus.yml with promtool (Debian `prometheus`);
#   - every PromQL query of grafana/dashboards/amdahl.json, parsed by promtool as a rule
#     (Grafana's $__rate_interval and $device filled in);
#   - docker/compose.yaml against the compose spec (PyPI check-jsonschema, vendor.compose-spec),
#     plus what the schema cannot see: depends_on naming defined services, the files the
#     compose file mounts and builds from existing, every service having a health check.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! command -v promtool >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
promtool check config docker/prometheus.yml

venv=${CARGO_TARGET_DIR:-$root/target}/ops-venv
if [ ! -x "$venv/bin/check-jsonschema" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check check-jsonschema
fi
py=$venv/bin/python

"$py" - "$tmp/grafana-rules.yml" <<'PY'
import json, sys
board = json.load(open("grafana/dashboards/amdahl.json"))
exprs = []
def walk(v):
    if isinstance(v, dict):
        if isinstance(v.get("expr"), str):
            exprs.append(v["expr"])
        for x in v.values():
            walk(x)
    elif isinstance(v, list):
        for x in v:
            walk(x)
walk(board)
with open(sys.argv[1], "w") as f:
    f.write("groups:\n  - name: grafana\n    rules:\n")
    for i, e in enumerate(exprs):
        e = e.replace("$__rate_interval", "1m").replace("$device", ".*")
        f.write(f"      - record: grafana:query{i}\n        expr: {json.dumps(e)}\n")
print(f"{len(exprs)} Grafana queries")
PY
promtool check rules "$tmp/grafana-rules.yml"

"$venv/bin/check-jsonschema" --builtin-schema vendor.compose-spec docker/compose.yaml
"$py" - <<'PY'
import os, sys
from ruamel.yaml import YAML
c = YAML(typ="safe").load(open("docker/compose.yaml"))
services = c["services"]
bad = []
for name, s in services.items():
    deps = s.get("depends_on", {})
    for d in (deps if isinstance(deps, list) else deps.keys()):
        if d not in services:
            bad.append(f"{name}: depends_on {d} is not a service")
    if "healthcheck" not in s:
        bad.append(f"{name}: no healthcheck")
    for v in s.get("volumes", []):
        src = v.split(":")[0]
        if src.startswith("."):
            if not os.path.exists(os.path.join("docker", src)):
                bad.append(f"{name}: mounts missing {src}")
    b = s.get("build")
    if b:
        ctx = os.path.join("docker", b["context"])
        if not os.path.isfile(os.path.join(ctx, b["dockerfile"])):
            bad.append(f"{name}: no {b['dockerfile']} in {ctx}")
profiles = {p for s in services.values() for p in s.get("profiles", [])}
if not {"gpu", "cpu"} <= profiles:
    bad.append(f"profiles: {profiles}, want gpu and cpu")
gpu = services["amdahl-gpu"]["deploy"]["resources"]["reservations"]["devices"][0]
if "gpu" not in gpu.get("capabilities", []):
    bad.append("amdahl-gpu reserves no GPU")
if bad:
    print("\n".join(bad)); sys.exit(1)
print(f"compose: {len(services)} services, depends_on, mounts, health checks and profiles ok")
PY
