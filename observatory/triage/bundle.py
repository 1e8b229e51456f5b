"""A reproduction bundle: what an upstream bug report needs, and nothing else.

`write_bundle` writes into one folder:

- ``README.md``: what fails, under which knob, the first divergence with its
  margin, engine and hardware versions, how to re-check;
- ``launch.sh``: the engine launch command of the failing arm (the model is
  ``$MODEL``, the port ``$PORT``);
- ``requests/NN-PROBE.json``: each request body as sent, and ``curl.sh`` with
  one ``curl`` line per request;
- ``expected/NN-PROBE.json``: base's token ids and text, the spec arm's, and
  the first divergence with its margins;
- ``sequence.json`` + ``check.py``: the order to send them in and a stdlib
  script that re-checks it against a running server (exit 1: reproduced);
- ``triage.json``: the triage's result.

Nothing of this machine leaks: no host name, no absolute path (the model
path becomes ``$MODEL``, the interpreter ``python``, any other absolute path
its last component), and no environment variable whose name looks like a
secret (listed as omitted instead).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from observatory.client.send import request_params
from observatory.engines.server import engine_argv, engine_env
from observatory.model.probes import Probe
from observatory.triage.source import Target

SERVED_NAME = "repro-model"
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASS|CREDENTIAL|AUTH|COOKIE", re.IGNORECASE)


def request_body(probe: Probe, stream: bool) -> dict[str, Any]:
    """The JSON body the observatory sends for PROBE (extra_body flattened, as on the wire)."""
    params = request_params(probe)
    extra = params.pop("extra_body", {}) or {}
    body: dict[str, Any] = {"model": SERVED_NAME}
    if probe.kind == "chat":
        body["messages"] = probe.messages
    else:
        body["prompt"] = probe.prompt or ""
    body.update(params)
    body.update(extra)
    body["stream"] = stream
    return body


def scrub(value: str, model: str) -> str:
    """VALUE with the model path as $MODEL and any other absolute path reduced to its last component."""
    if model and value == model:
        return "$MODEL"
    if value.startswith("/"):
        return Path(value).name or value
    return value


def launch_command(target: Target) -> tuple[list[str], dict[str, str], list[str]]:
    """(argv, env overrides, omitted env names) of the failing arm, scrubbed of this machine."""
    t = target
    argv = engine_argv(t.arm, t.settings, 8000, engine_env(t.arm, t.settings))
    out: list[str] = []
    for i, a in enumerate(argv):
        if i == 0 and not t.settings.image:
            out.append("python")
        elif i > 0 and argv[i - 1] == "--port":
            out.append("$PORT")
        else:
            out.append(scrub(a, t.settings.model))
    out += ["--served-model-name", SERVED_NAME]
    env, omitted = {}, []
    for k, v in sorted(engine_env(t.arm, t.settings).items()):
        if _SECRET.search(k):
            omitted.append(k)
        elif k != "CUDA_VISIBLE_DEVICES":
            env[k] = scrub(v, t.settings.model)
    return out, env, omitted


def _shell_line(argv: list[str]) -> str:
    return " ".join(a if a in ("$MODEL", "$PORT") else shlex.quote(a) for a in argv).replace(
        "$MODEL", '"${MODEL:?set MODEL to the model folder or hub name}"').replace("$PORT", '"${PORT:-8000}"')


def write_bundle(target: Target, triage: dict[str, Any], out: Path | str) -> Path:
    """Write the reproduction bundle of TARGET's failures and TRIAGE's result into OUT; return OUT."""
    out = Path(out)
    (out / "requests").mkdir(parents=True, exist_ok=True)
    (out / "expected").mkdir(parents=True, exist_ok=True)
    by_name = {p.name: p for p in target.probes}
    files: dict[tuple[str, bool], str] = {}

    def add_request(probe: Probe, stream: bool) -> str:
        key = (probe.name, stream)
        if key not in files:
            safe = re.sub(r"[^A-Za-z0-9_.-]", "_", probe.name)
            files[key] = f"{len(files):02d}-{safe}{'' if stream else '-nonstream'}.json"
            (out / "requests" / files[key]).write_text(json.dumps(request_body(probe, stream), indent=2,
                                                                  ensure_ascii=False) + "\n", encoding="utf-8")
        return files[key]

    steps: list[dict[str, Any]] = [{"send": [add_request(target.probes[0], True)], "check": [], "why": "warm-up"}]
    for f in target.failures:
        if f.channel != "batch":
            name = add_request(by_name[f.probe], f.channel == "stream")
            steps.append({"send": [name], "check": [name], "why": f"{f.probe} alone ({f.channel})"})
    batch = [f for f in target.failures if f.channel == "batch"]
    if batch:
        names = [add_request(p, True) for p in target.probes]
        checked = [files[(f.probe, True)] for f in batch]
        steps.append({"send": names, "check": checked, "why": "the session's probes at once (the failing batch)"})
    for f in target.failures:
        name = files[(f.probe, f.channel != "nonstream")]
        d = f.details
        (out / "expected" / name).write_text(json.dumps({
            "probe": f.probe, "channel": f.channel,
            "base": {"token_ids": f.expected_ids, "text": f.expected_text},
            "spec": {"arm": target.arm_row.name, "token_ids": f.got_ids, "text": f.got_text},
            "first_divergence": {k: d.get(k) for k in (
                "position", "base_token_id", "spec_token_id", "margin", "margin_is_lower_bound", "near_tie_nats",
                "prefix", "base_continuation", "spec_continuation")},
            "verdict": f.verdict, "reason": d.get("reason"),
        }, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "sequence.json").write_text(json.dumps(steps, indent=2) + "\n", encoding="utf-8")
    argv, env, omitted = launch_command(target)
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    (out / "launch.sh").write_text("#!/bin/sh\n# The failing arm's engine, as the session launched it.\n"
                                   + exports + "exec " + _shell_line(argv) + "\n", encoding="utf-8")
    curl = "".join(
        f"curl -sS \"http://127.0.0.1:${{PORT:-8000}}/v1/{'chat/completions' if 'messages' in json.loads((out / 'requests' / n).read_text()) else 'completions'}\" "
        f"-H 'Content-Type: application/json' -d @requests/{n}\n"
        for step in steps for n in step["send"])
    (out / "curl.sh").write_text("#!/bin/sh\n# Each request, in the order check.py sends them.\ncd \"$(dirname \"$0\")\"\n"
                                 + curl, encoding="utf-8")
    (out / "check.py").write_text((Path(__file__).parent / "bundle_check.py").read_text(encoding="utf-8"),
                                  encoding="utf-8")
    (out / "triage.json").write_text(json.dumps(_public(triage), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "README.md").write_text(_readme(target, triage, omitted), encoding="utf-8")
    for script in ("launch.sh", "curl.sh", "check.py"):
        (out / script).chmod(0o755)
    return out


def _public(triage: dict[str, Any]) -> dict[str, Any]:
    """The triage result without log paths (they are paths of this machine)."""
    return {k: v for k, v in triage.items() if k not in ("reason",)}


def versions(target: Target) -> dict[str, Any]:
    """Engine and hardware versions (no host name)."""
    m = target.session.machine or {}
    return {"engine": target.arm_row.engine_version, "observatory": target.session.observatory_version,
            "image": target.session.image, "cpu": m.get("cpu"), "cpus": m.get("cpus"), "gpus": m.get("gpus"),
            "driver": m.get("driver"), "python": m.get("python"), "platform": m.get("platform"),
            "model": scrub(target.settings.model, "") if target.settings.model else None}


def _readme(target: Target, triage: dict[str, Any], omitted: list[str]) -> str:
    v = versions(target)
    lines = [f"# Speculative decoding changes greedy output: arm `{target.arm_row.name}`", "",
             f"Greedy output of the speculative arm differs from the non-speculative (base) output "
             f"on {len(target.failures)} request(s).", ""]
    for f in target.failures:
        d = f.details
        margin = "unknown" if f.margin is None else f"{f.margin:.3f} nats" + (
            " (lower bound)" if d.get("margin_is_lower_bound") else "")
        lines.append(f"- `{f.probe}` ({f.channel}): first divergence at generated token {f.first_divergence}, "
                     f"base token {d.get('base_token_id')} vs spec token {d.get('spec_token_id')}, base logprob "
                     f"margin {margin}.")
    lines += ["", "## Which engine setting it depends on", "", triage.get("summary") or "(not triaged)", ""]
    for r in triage.get("runs", []):
        change = ", ".join(f"{k}={val}" for k, val in r["change"].items()) or "as launched"
        at = "" if r["first_divergence"] is None else f", first divergence at token {r['first_divergence']}"
        lines.append(f"- {change}: {r['verdict']}{at}")
    if triage.get("flips"):
        lines += ["", f"Changing any one of these alone makes it disappear: {', '.join(triage['flips'])}."]
    if triage.get("minimal"):
        lines += [f"Minimal change: `{json.dumps(triage['minimal'])}`."]
    lines += ["", "## Versions", ""] + [f"- {k}: {val}" for k, val in v.items() if val not in (None, [], "")]
    lines += ["", "## Reproduce", "", "```sh", "MODEL=/path/to/model PORT=8000 ./launch.sh &",
              "python check.py --url http://127.0.0.1:8000   # exit 1: reproduced, 0: output equals base", "```", "",
              "`curl.sh` sends the same requests by hand; `expected/` holds base's and the spec arm's token ids.", ""]
    if "OBSERVATORY_FAULT" in launch_command(target)[1]:
        lines += ["`launch.sh` sets `OBSERVATORY_FAULT`: this failure was injected on purpose by the observatory's "
                  "fault plugin (a negative control), which must be installed in the engine's environment.", ""]
    if omitted:
        lines += [f"Environment variables left out (they look like secrets): {', '.join(omitted)}.", ""]
    return "\n".join(lines)
