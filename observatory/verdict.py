"""The session's overall verdict, as the nightly gate and the report banner state it.

PASS or WARN: every spec-arm verdict is PASS, WARN, SKIP or NOT_DISCRIMINATING
and every arm is valid; WARN also when no probe discriminates at all. FAIL: a spec arm fails a probe (a hard token
divergence, or a correctness gate the base arm passes). INVALID: nothing
failed, but a measurement cannot be trusted (the session was interrupted, an
arm crashed, hung, failed to start, did not speculate, was confounded, or
produced the same output for different prompts).
"""

from __future__ import annotations

from typing import Any

INVALID_CODES = ("INVALID", "CONFOUNDED", "CRASHED", "HUNG")
EXIT = {"PASS": 0, "WARN": 0, "FAIL": 1, "INVALID": 2}


def session_verdict(data: dict[str, Any]) -> tuple[str, list[str]]:
    """(PASS | WARN | FAIL | INVALID, the reasons) for one `report_data.build` dict."""
    fails: list[str] = []
    warns: list[str] = []
    invalid: list[str] = []
    if data["session"]["status"] in ("interrupted", "failed", "running"):
        invalid.append(f"the session is {data['session']['status']}: {data['session'].get('reason') or ''}".strip())
    judged = discriminating = 0
    for arm in data["arms"]:
        for v in arm.get("validity", []):
            if v["code"] in INVALID_CODES:
                invalid.append(f"{arm['name']}: {v['code']} {v['detail']}")
        if arm["status"] != "ok" and not any(v["code"] in INVALID_CODES for v in arm.get("validity", [])):
            invalid.append(f"{arm['name']}: {arm['status']} {arm.get('reason') or ''}".strip())
        if not arm["is_spec"] and not arm.get("copy_of"):
            continue  # the base arm's failures make probes non-discriminating, not failures
        for r in arm["results"]:
            if not r["ok"]:
                invalid.append(f"{arm['name']} / {r['probe']}: request failed: {r['error']}")
                continue
            judged += 1
            discriminating += any(v["verdict"] != "NOT_DISCRIMINATING" and not g.startswith("token_diff")
                                  and v["verdict"] != "SKIP" for g, v in r["verdicts"].items())
            for gate, v in r["verdicts"].items():
                if v["verdict"] == "FAIL":
                    fails.append(f"{arm['name']} / {r['probe']}: {gate}: {v['reason']}")
                elif v["verdict"] == "WARN":
                    warns.append(f"{arm['name']} / {r['probe']}: {gate}: {v['reason']}")
    if fails:
        return "FAIL", fails + invalid
    if invalid:
        return "INVALID", invalid
    if judged and not discriminating:
        warns.append("no probe discriminates: the base arm fails every correctness gate the probes declare, "
                     "so only the token diffs judge the spec arms")
    if warns:
        return "WARN", warns
    return "PASS", []
