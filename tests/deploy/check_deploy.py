#!/usr/bin/env python3
"""The deployment kit of deploy/ (issue 22) against the binary it deploys.

Every YAML file under deploy/k8s parses (all documents, and the EndpointPickerConfig embedded in the
ConfigMap); the kinds a scale-out needs are there (Deployment with a readiness probe on /health,
Service, PodMonitor, ServiceMonitor, InferencePool, the endpoint-picker config); every flag the
Deployment's container args and the Dockerfile's CMD name is one `tinyserve serve --help` lists;
the --kv-events-config value is a JSON object of vLLM's KVEventsConfig keys; the Grafana dashboard
is JSON with at least one PromQL expression per panel. Exit 0 on success, 1 with the reasons, 77
(skip) only when PyYAML is missing.

  check_deploy.py TINYSERVE_BINARY DEPLOY_DIR
"""
import json
import pathlib
import re
import subprocess
import sys

try:
    import yaml
except ImportError:
    print("SKIP: PyYAML not installed (Debian package python3-yaml; scripts/setup.sh installs it)")
    sys.exit(77)

KV_EVENTS_KEYS = {"enable_kv_cache_events", "publisher", "endpoint", "replay_endpoint",
                  "buffer_steps", "hwm", "max_queue_size", "topic"}


def main(binary, deploy_dir):
    deploy = pathlib.Path(deploy_dir)
    errors = []
    helped = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True)
    if helped.returncode != 0:
        return [f"`{binary} serve --help` exited {helped.returncode}: {helped.stderr}"]
    known_flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", helped.stdout))
    if "--kv-events-config" not in known_flags or "--port" not in known_flags:
        return [f"`serve --help` lists no --port/--kv-events-config:\n{helped.stdout}"]

    docs = []
    for path in sorted((deploy / "k8s").glob("*.yaml")):
        try:
            for doc in yaml.safe_load_all(path.read_text()):
                if doc is not None:
                    docs.append((path.name, doc))
        except yaml.YAMLError as e:
            errors.append(f"{path.name}: not valid YAML: {e}")
    kinds = {}
    for name, doc in docs:
        kinds.setdefault(doc.get("kind"), []).append((name, doc))
    for kind in ("Deployment", "Service", "PodMonitor", "ServiceMonitor", "InferencePool",
                 "ConfigMap"):
        if kind not in kinds:
            errors.append(f"no {kind} in deploy/k8s")

    def check_args(where, args):
        for i, arg in enumerate(args):
            if not isinstance(arg, str):
                errors.append(f"{where}: argument {arg!r} is not a string")
                continue
            if arg.startswith("--"):
                flag = arg.split("=", 1)[0]
                if flag not in known_flags:
                    errors.append(f"{where}: flag {flag} is not one `tinyserve serve --help` lists")
                if flag == "--kv-events-config":
                    value = arg.split("=", 1)[1] if "=" in arg else args[i + 1]
                    try:
                        cfg = json.loads(value)
                    except json.JSONDecodeError as e:
                        errors.append(f"{where}: --kv-events-config is not JSON: {e}")
                        continue
                    if not isinstance(cfg, dict) or not set(cfg) <= KV_EVENTS_KEYS:
                        errors.append(f"{where}: --kv-events-config keys {sorted(cfg)} are not "
                                      f"vLLM's KVEventsConfig keys")

    for name, dep in kinds.get("Deployment", []):
        containers = dep["spec"]["template"]["spec"]["containers"]
        for c in containers:
            args = c.get("args", [])
            if not args or args[0] != "serve":
                errors.append(f"{name}: container {c['name']} does not run `serve`")
            check_args(f"{name} ({c['name']})", args[1:])
            probe = c.get("readinessProbe", {}).get("httpGet", {})
            if probe.get("path") != "/health":
                errors.append(f"{name}: the readiness probe is not GET /health: {probe}")
        labels = dep["spec"]["template"]["metadata"]["labels"]
        for _, pool in kinds.get("InferencePool", []):
            sel = pool["spec"]["selector"]["matchLabels"]
            if any(labels.get(k) != v for k, v in sel.items()):
                errors.append(f"the InferencePool selector {sel} does not select the pods {labels}")

    for name, cm in kinds.get("ConfigMap", []):
        for key, text in cm.get("data", {}).items():
            try:
                epp = yaml.safe_load(text)
            except yaml.YAMLError as e:
                errors.append(f"{name}: {key} is not valid YAML: {e}")
                continue
            if epp.get("kind") != "EndpointPickerConfig":
                errors.append(f"{name}: {key} is not an EndpointPickerConfig")
            refs = {p["pluginRef"] for prof in epp.get("schedulingProfiles", [])
                    for p in prof.get("plugins", [])}
            types = {p["type"] for p in epp.get("plugins", [])}
            if not refs <= types:
                errors.append(f"{name}: profiles name plugins that are not declared: {refs - types}")

    dockerfile = (deploy / "Dockerfile").read_text()
    cmd = re.search(r'^CMD (\[.*\])$', dockerfile, re.M)
    if not cmd:
        errors.append("Dockerfile: no CMD [...] line")
    else:
        argv = json.loads(cmd.group(1))
        if argv[0] != "serve":
            errors.append("Dockerfile: CMD does not run `serve`")
        check_args("Dockerfile CMD", argv[1:])

    dashboard = json.loads((deploy / "grafana" / "tinyserve-dashboard.json").read_text())
    panels = dashboard.get("panels", [])
    if not panels:
        errors.append("the dashboard has no panels")
    for p in panels:
        if not [t.get("expr") for t in p.get("targets", []) if t.get("expr")]:
            errors.append(f"dashboard panel {p.get('title')!r} has no PromQL expression")
    return errors


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    errs = main(sys.argv[1], sys.argv[2])
    for e in errs:
        print("FAIL:", e)
    if not errs:
        print("deploy/: manifests, Dockerfile and dashboard agree with `tinyserve serve --help`")
    sys.exit(1 if errs else 0)
