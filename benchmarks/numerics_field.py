"""Numerics of the field model on a real engine: A/A and spec-vs-base, measured (issue 27 item 3).

Three steps, each its own subcommand:

``prompts OUT.json``
    The prompts: the 30 probes of probes/field.toml, then `EXTRA_PER_CATEGORY`
    more per category made by the corpus's own example makers
    (`training.field.corpus.MAKERS`) from the documents the corpus holds out
    (`training.field.corpus.pools(..., held=True)`), seed `PROMPT_SEED`, none
    equal to a probe or to a corpus prompt. Needs /tmp/field-src
    (``python -m training.field.sources``).
``run``
    Starts one vLLM OpenAI server per arm as child processes (all at once by
    default: one GPU serves them side by side; numerics depend on kernel
    shapes, not on the neighbour), then sends every prompt to every arm one
    request at a time (as the observatory's correctness requests go), greedy,
    ``logprobs`` with top-`TOP` alternatives, token ids returned, for
    ``--repeats`` repeats, reading vLLM's spec counters (per position too)
    around each repeat. Repeat 0 meets an empty prefix cache, later repeats
    a warm one (prefix caching stays the engine's default: on). Then, on
    ``--teacher-arms``, each repeat-0 answer teacher-forced: prompt ids +
    answer ids as one prompt, ``prompt_logprobs`` `TOP`, ``max_tokens`` 1
    (the ``teacher`` channel's second request). Raw answers go to
    OUT/raw-ARM.json.gz as they come, the log to stdout.
``analyze OUT.json.gz RAW_DIR...``
    The figures: per pair of runs (A/A across servers, repeat vs repeat on one
    server, spec vs base), the share of prompts whose ids differ, the first
    divergence's position and margins (base's top-1 minus top-2, and base's
    token minus the other arm's, from base's logprobs), logprob differences
    of identical tokens (emitted and shared top-k entries, over the common
    prefix), per-position acceptance per repeat, and the teacher-forced gaps.
    Prints a markdown summary; writes the compact figures as JSON.
``gate RAW_DIR``
    The ``answer_fields`` gate replayed on one run's raw answers: clean arms
    judged with base's dtype unknown and as bfloat16, and mtp2 with shifted
    logprob rows (a stand-in for the ``logprob_shift`` fault).

Usage (H200, vLLM 0.26 bundle; see examples/h200-numerics/README.md):
    python benchmarks/numerics_field.py prompts /tmp/numerics-prompts.json
    python benchmarks/numerics_field.py run --model observatory/field_model \
        --prompts /tmp/numerics-prompts.json --out $OUT --repeats 3 \
        --extra-args="--attention-backend TRITON_ATTN" --spec-extra='{"attention_backend": "TRITON_ATTN"}'
    python benchmarks/numerics_field.py analyze examples/h200-numerics/figures.json.gz RUN1 [RUN2 ...]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TOP = 5
PROMPT_SEED = 2028
EXTRA_PER_CATEGORY = 36
MAX_TOKENS = 128
ARMS: dict[str, dict[str, Any] | None] = {
    "base": None, "base2": None,
    "mtp1": {"method": "mtp", "num_speculative_tokens": 1},
    "mtp2": {"method": "mtp", "num_speculative_tokens": 2},
}


# ---------------------------------------------------------------- prompts

def make_prompts(out: Path) -> None:
    import tomllib

    sys.path.insert(0, str(ROOT))
    from training.field.corpus import MAKERS, generate, pools
    from training.field.sources import documents

    suite = tomllib.loads((ROOT / "probes" / "field.toml").read_text(encoding="utf-8"))
    prompts: list[dict[str, Any]] = []
    for p in suite["probe"]:
        prompts.append({"name": p["name"], "category": p["category"], "messages": p["messages"],
                        "tools": p.get("tools"), "source": "probe"})
    seen = {json.dumps(p["messages"], ensure_ascii=False) for p in prompts}
    docs = documents()
    corpus_prompts = {ex.user_text for ex in generate(pools(docs))}
    held = pools(docs, held=True)
    rng = random.Random(PROMPT_SEED)
    for category, maker in MAKERS.items():
        n, tries = 0, 0
        while n < EXTRA_PER_CATEGORY and tries < 5000:
            tries += 1
            ex = maker(held, rng)
            if ex is None or ex.user_text in corpus_prompts:
                continue
            messages = [{"role": "user", "content": ex.user_text}]
            key = json.dumps(messages, ensure_ascii=False)
            if key in seen:
                continue
            seen.add(key)
            n += 1
            prompts.append({"name": f"{category}-x{n}", "category": ex.category, "messages": messages,
                            "tools": ex.tools or None, "source": f"held-out seed {PROMPT_SEED}"})
    out.write_text(json.dumps(prompts, ensure_ascii=False, indent=0), encoding="utf-8")
    counts: dict[str, int] = {}
    for p in prompts:
        counts[p["category"]] = counts.get(p["category"], 0) + 1
    print(f"{len(prompts)} prompts -> {out}: {counts}")


# ---------------------------------------------------------------- run

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


_SPEC = re.compile(r'^(vllm:spec_decode_num_(?:drafts|draft_tokens|accepted_tokens|accepted_tokens_per_pos)'
                   r'(?:_total)?)(\{[^}]*\})?\s+(\S+)', re.M)


def spec_counters(client: Any, url: str) -> dict[str, float]:
    text = client.get(f"{url}/metrics", timeout=30).text
    out: dict[str, float] = {}
    for name, labels, value in _SPEC.findall(text):
        pos = re.search(r'position="(\d+)"', labels or "")
        key = name.removesuffix("_total") + (f"[{pos.group(1)}]" if pos else "")
        out[key] = out.get(key, 0.0) + float(value)
    return out


def start_server(arm: str, args: argparse.Namespace, port: int, logdir: Path) -> subprocess.Popen[bytes]:
    argv = [args.python, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model,
            "--host", "127.0.0.1", "--port", str(port), "--seed", "0", "--max-logprobs", "20",
            "--dtype", args.dtype, "--max-model-len", str(args.max_model_len),
            "--enable-auto-tool-choice", "--tool-call-parser", "hermes", *args.extra_args.split()]
    if args.gpu_mem:
        argv += ["--gpu-memory-utilization", str(args.gpu_mem)]
    spec = ARMS[arm]
    if spec is not None:
        argv += ["--speculative-config", json.dumps({**spec, **json.loads(args.spec_extra)})]
    env = dict(os.environ)
    for var in ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        env[var] = f"/tmp/{arm}-{var.lower()}"  # servers starting side by side do not share compile caches
    log(f"{arm}: {' '.join(argv)}")
    fh = open(logdir / f"server-{arm}.log", "wb")
    return subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=False)


def wait_ready(client: Any, url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited {proc.returncode}")
        try:
            if client.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except Exception:
            pass
        time.sleep(2)
    raise RuntimeError(f"{url}: not ready after {timeout} s")


def _entry(e: dict[str, Any]) -> tuple[int, float, list[list[float]]]:
    tid = int(e["token"].removeprefix("token_id:"))
    tops = [[int(t["token"].removeprefix("token_id:")), float(t["logprob"])] for t in e.get("top_logprobs") or []]
    return tid, float(e["logprob"]), tops


def ask(client: Any, url: str, model: str, p: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": p["messages"], "temperature": 0.0, "max_tokens": max_tokens,
                            "logprobs": True, "top_logprobs": TOP, "return_token_ids": True,
                            "return_tokens_as_token_ids": True}
    if p.get("tools"):
        body["tools"], body["tool_choice"] = p["tools"], "auto"
    r = client.post(f"{url}/v1/chat/completions", json=body, timeout=300)
    r.raise_for_status()
    d = r.json()
    c = d["choices"][0]
    entries = [_entry(e) for e in (c.get("logprobs") or {}).get("content") or []]
    ids = c.get("token_ids") or [e[0] for e in entries]
    return {"ids": ids, "lp": [e[1] for e in entries], "top": [e[2] for e in entries],
            "prompt_ids": d.get("prompt_token_ids") or c.get("prompt_token_ids"),
            "finish": c.get("finish_reason"), "usage": d.get("usage")}


def teacher(client: Any, url: str, model: str, ans: dict[str, Any]) -> list[float | None] | None:
    """Teacher-forced logprob of each answer token (prefill of prompt + answer), None where not returned."""
    if not ans.get("prompt_ids") or not ans["ids"]:
        return None
    ids = list(ans["prompt_ids"]) + list(ans["ids"])
    r = client.post(f"{url}/v1/completions", json={"model": model, "prompt": ids, "max_tokens": 1,
                                                   "temperature": 0.0, "prompt_logprobs": TOP}, timeout=300)
    r.raise_for_status()
    plp = r.json()["choices"][0].get("prompt_logprobs") or []
    n0 = len(ans["prompt_ids"])
    out: list[float | None] = []
    for i, tid in enumerate(ans["ids"]):
        row = plp[n0 + i] if n0 + i < len(plp) else None
        v = (row or {}).get(str(tid))
        out.append(float(v["logprob"]) if isinstance(v, dict) else None)
    return out


def save(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        json.dump(data, f, separators=(",", ":"))
    tmp.replace(path)


def drive(arm: str, url: str, args: argparse.Namespace, prompts: list[dict[str, Any]], out: Path) -> None:
    import httpx

    data: dict[str, Any] = {"arm": arm, "spec": ARMS[arm], "dtype": args.dtype, "engine": args.engine_label,
                            "repeats": [], "teacher": None}
    with httpx.Client() as client:
        for rep in range(args.repeats):
            t0 = time.time()
            before = spec_counters(client, url)
            answers = []
            for i, p in enumerate(prompts):
                try:
                    answers.append(ask(client, url, args.model, p, args.max_tokens))
                except Exception as e:  # kept as an error row: one bad request does not end the run
                    body = getattr(getattr(e, "response", None), "text", "")[:300]
                    log(f"{arm} repeat {rep} prompt {i}: {type(e).__name__}: {e} {body}")
                    answers.append({"ids": [], "lp": [], "top": [], "prompt_ids": None, "finish": None,
                                    "usage": None, "error": f"{type(e).__name__}: {e}"[:300]})
            after = spec_counters(client, url)
            delta = {k: after[k] - before.get(k, 0.0) for k in after}
            data["repeats"].append({"answers": answers, "counters": delta, "wall_s": round(time.time() - t0, 1)})
            save(out / f"raw-{arm}.json.gz", data)
            toks = sum(len(a["ids"]) for a in answers)
            acc = {k: round(v / delta["vllm:spec_decode_num_drafts"], 4) for k, v in delta.items()
                   if "per_pos" in k and delta.get("vllm:spec_decode_num_drafts")}
            log(f"{arm} repeat {rep}: {len(answers)} answers, {toks} tokens, {time.time() - t0:.0f} s, per-pos {acc}")
            if time.time() > args.deadline:
                log(f"{arm}: deadline reached after repeat {rep}")
                break
        if arm in args.teacher_arms.split(",") and time.time() < args.deadline:
            t0 = time.time()
            tf: list[Any] = []
            for a in data["repeats"][0]["answers"]:
                try:
                    tf.append(teacher(client, url, args.model, a))
                except Exception as e:
                    log(f"{arm} teacher: {type(e).__name__}: {e}")
                    tf.append(None)
            data["teacher"] = tf
            save(out / f"raw-{arm}.json.gz", data)
            log(f"{arm}: teacher-forced {len(data['teacher'])} answers, {time.time() - t0:.0f} s")


def run(args: argparse.Namespace) -> None:
    import httpx

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logdir = Path(args.logdir or out)
    logdir.mkdir(parents=True, exist_ok=True)
    prompts = json.loads(Path(args.prompts).read_text(encoding="utf-8"))[: args.limit or None]
    args.deadline = time.time() + args.budget_s
    arms = args.arms.split(",")
    procs: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    try:
        groups = [arms] if args.parallel else [[a] for a in arms]
        for group in groups:
            for arm in group:
                port = free_port()
                procs[arm] = (start_server(arm, args, port, logdir), f"http://127.0.0.1:{port}")
            t0 = time.time()
            with httpx.Client() as client:
                for arm in group:
                    wait_ready(client, procs[arm][1], procs[arm][0], args.ready_timeout)
                    log(f"{arm}: ready after {time.time() - t0:.0f} s")
            threads = [threading.Thread(target=drive, args=(arm, procs[arm][1], args, prompts, out)) for arm in group]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for arm in group:
                procs[arm][0].terminate()
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()


# ---------------------------------------------------------------- analyze

def _q(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def _dist(xs: list[float]) -> dict[str, Any]:
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "min": min(xs), "p50": _q(xs, 0.5), "p90": _q(xs, 0.9), "p99": _q(xs, 0.99),
            "max": max(xs), "mean": statistics.fmean(xs)}


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]], prompts: list[dict[str, Any]]) -> dict[str, Any]:
    """A against reference B, prompt by prompt (B's logprobs give the margins)."""
    n = min(len(a), len(b))
    divs: list[dict[str, Any]] = []
    lp_emit: list[float] = []
    lp_top: list[float] = []
    nonzero_emit = 0
    set_only: list[float] = []  # a top-k entry listed on one side only: its height above its row's lowest entry
    for i in range(n):
        x, ref = a[i], b[i]
        d = next((j for j, (s, t) in enumerate(zip(x["ids"], ref["ids"])) if s != t), None)
        if d is None and len(x["ids"]) != len(ref["ids"]):
            d = min(len(x["ids"]), len(ref["ids"]))
        common = len(x["ids"]) if d is None else d
        for j in range(min(common, len(x["lp"]), len(ref["lp"]))):
            e = abs(x["lp"][j] - ref["lp"][j])
            lp_emit.append(e)
            nonzero_emit += e > 0
            ta, tb = dict((t, v) for t, v in x["top"][j]), dict((t, v) for t, v in ref["top"][j])
            for t in ta.keys() & tb.keys():
                if math.isfinite(ta[t]) and math.isfinite(tb[t]):
                    lp_top.append(abs(ta[t] - tb[t]))
            for row, other in ((ta, tb), (tb, ta)):
                set_only += [row[t] - min(row.values()) for t in row.keys() - other.keys()]
        if d is None:
            continue
        rec: dict[str, Any] = {"prompt": i, "name": prompts[i]["name"] if i < len(prompts) else str(i),
                               "category": prompts[i]["category"] if i < len(prompts) else None, "pos": d,
                               "len": len(ref["ids"])}
        if d < len(ref["top"]) and d < len(x["ids"]):
            tops = sorted(ref["top"][d], key=lambda t: -t[1])
            lps = dict((t, v) for t, v in tops)
            rec["top12"] = tops[0][1] - tops[1][1] if len(tops) > 1 else None
            chosen, other = ref["ids"][d], x["ids"][d]
            if chosen in lps and other in lps:
                rec["margin"], rec["lower_bound"] = lps[chosen] - lps[other], False
            elif chosen in lps:
                rec["margin"], rec["lower_bound"] = lps[chosen] - min(lps.values()), True
        else:
            rec["margin"] = None  # one answer ends where the other goes on
        divs.append(rec)
    margins = [r["margin"] for r in divs if r.get("margin") is not None and not r.get("lower_bound")]
    return {"prompts": n, "diverged": len(divs), "mismatch_rate": len(divs) / n if n else None,
            "positions": _dist([float(r["pos"]) for r in divs]), "margin": _dist(margins),
            "top12": _dist([r["top12"] for r in divs if r.get("top12") is not None]),
            "lower_bound_margins": sum(bool(r.get("lower_bound")) for r in divs),
            "lp_emitted": {**_dist(lp_emit), "nonzero": nonzero_emit},
            "lp_topk": {**_dist(lp_top), "nonzero": sum(v > 0 for v in lp_top)},
            "topk_set_only": _dist(set_only),
            "divergences": divs}


def acceptance(reps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in reps:
        c = r["counters"]
        drafts = c.get("vllm:spec_decode_num_drafts")
        if not drafts:
            continue
        per_pos = {k: c[k] / drafts for k in sorted(c) if "per_pos" in k}
        out.append({"drafts": drafts, "draft_tokens": c.get("vllm:spec_decode_num_draft_tokens"),
                    "accepted": c.get("vllm:spec_decode_num_accepted_tokens"),
                    "alpha": c.get("vllm:spec_decode_num_accepted_tokens", 0) / c["vllm:spec_decode_num_draft_tokens"],
                    "per_pos": per_pos})
    return out


def analyze(raw_dirs: list[Path], out: Path, prompts_path: Path | None) -> None:
    raws = {}
    for k, raw_dir in enumerate(raw_dirs):  # a second run's arms are ARM@2 (fresh servers), judged against base
        for f in sorted(raw_dir.glob("raw-*.json.gz")):
            with gzip.open(f, "rt", encoding="utf-8") as fh:
                d = json.load(fh)
            raws[d["arm"] + (f"@{k + 1}" if k else "")] = d
    prompts = json.loads(prompts_path.read_text(encoding="utf-8")) if prompts_path else []
    base = raws["base"]["repeats"]
    pairs: dict[str, Any] = {}
    for arm, d in raws.items():
        for r, rep in enumerate(d["repeats"]):
            if arm == "base" and r == 0:
                continue
            if r < len(base) and arm != "base":
                pairs[f"{arm}#r{r} vs base#r{r}"] = compare(rep["answers"], base[r]["answers"], prompts)
            if r > 0:
                pairs[f"{arm}#r{r} vs {arm}#r0"] = compare(rep["answers"], d["repeats"][0]["answers"], prompts)
    acc = {arm: acceptance(d["repeats"]) for arm, d in raws.items() if d["spec"]}
    teach = {}
    for arm, d in raws.items():
        if not d.get("teacher"):
            continue
        gaps = []
        for ans, tf in zip(d["repeats"][0]["answers"], d["teacher"]):
            for lp, t in zip(ans["lp"], tf or []):
                if t is not None:
                    gaps.append(abs(lp - t))
        teach[arm] = {**_dist(gaps), "nonzero": sum(g > 0 for g in gaps)}
    meta = {arm: {"dtype": d["dtype"], "engine": d["engine"], "repeats": len(d["repeats"]),
                  "answers": sum(len(r["answers"]) for r in d["repeats"]),
                  "tokens": sum(len(a["ids"]) for r in d["repeats"] for a in r["answers"]),
                  "wall_s": [r["wall_s"] for r in d["repeats"]]} for arm, d in raws.items()}
    result = {"arms": meta, "pairs": pairs, "acceptance": acc, "teacher": teach}
    with gzip.open(out, "wt", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    print(summary(result))


def _f(x: Any, nd: int = 3) -> str:
    return "-" if x is None else (f"{x:.{nd}g}" if isinstance(x, float) else str(x))


def summary(res: dict[str, Any]) -> str:
    lines = ["| pair | prompts | diverged | first div. pos p50 / min | margin p50 / max | top1-top2 max "
             "| identical-token |dlp| emitted max (nonzero/n) | top-k max | top-k p99 | set-only entries, max height |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, p in res["pairs"].items():
        lines.append(f"| {name} | {p['prompts']} | {p['diverged']} ({_f(p['mismatch_rate'])}) | "
                     f"{_f(p['positions'].get('p50'))} / {_f(p['positions'].get('min'))} | "
                     f"{_f(p['margin'].get('p50'))} / {_f(p['margin'].get('max'))} | {_f(p['top12'].get('max'))} | "
                     f"{_f(p['lp_emitted'].get('max'))} ({p['lp_emitted']['nonzero']}/{p['lp_emitted']['n']}) | "
                     f"{_f(p['lp_topk'].get('max'))} | {_f(p['lp_topk'].get('p99'))} | "
                     f"{p['topk_set_only']['n']}, {_f(p['topk_set_only'].get('max'))} |")
    lines.append("")
    for arm, reps in res["acceptance"].items():
        for i, r in enumerate(reps):
            pp = ", ".join(f"{v:.4f}" for v in r["per_pos"].values())
            lines.append(f"- {arm} repeat {i}: drafts {r['drafts']:.0f}, alpha {r['alpha']:.4f}, per position {pp}")
    for arm, t in res["teacher"].items():
        lines.append(f"- teacher {arm}: |decode - prefill| emitted max {_f(t.get('max'))}, p99 {_f(t.get('p99'))}, "
                     f"nonzero {t['nonzero']}/{t['n']}")
    return "\n".join(lines)


# ---------------------------------------------------------------- gate replay

def gate_replay(raw_dir: Path) -> None:
    """The answer_fields gate on the raw answers: each arm's answers with base's ids, judged with base's
    dtype unknown (the float32 floor) and as bfloat16; then mtp2's with every second position carrying the
    next one's logprob row (a stand-in for the logprob_shift fault, ids intact), as bfloat16."""
    from collections import Counter

    sys.path.insert(0, str(ROOT))
    from observatory.model.gates import Output, default_registry
    from observatory.model.probes import Probe

    check = default_registry().get("answer_fields").check
    probe = Probe(name="p", category="prose_en", prompt="x", max_tokens=MAX_TOKENS)

    def load(arm: str) -> dict[str, Any]:
        with gzip.open(raw_dir / f"raw-{arm}.json.gz", "rt", encoding="utf-8") as fh:
            return dict(json.load(fh))

    def out(a: dict[str, Any], dtype: str | None = None) -> Output:
        return Output(text="", content="", token_ids=a["ids"], logprobs=list(a["lp"]),
                      top_logprobs=[[(int(t), float(v)) for t, v in row] for row in a["top"]],
                      finish_reason=a["finish"], served_dtype=dtype, aa_logprob_spread=0.0)

    base = load("base")["repeats"]
    for arm in ("base2", "mtp1", "mtp2"):
        reps = load(arm)["repeats"]
        for dtype in (None, "bfloat16"):
            c: Counter[str] = Counter()
            for r, rep in enumerate(reps[: len(base)]):
                for x, y in zip(rep["answers"], base[r]["answers"]):
                    if x["ids"] == y["ids"]:
                        c[check(out(x), out(y, dtype), probe).verdict] += 1
            print(f"{arm}, base's dtype {dtype or 'unknown (float32 bounds)'}: {dict(c)}")
    c = Counter()
    for x, y in zip(load("mtp2")["repeats"][0]["answers"], base[0]["answers"]):
        if x["ids"] != y["ids"] or len(x["ids"]) < 3:
            continue
        o = out(x)
        for i in range(0, len(o.logprobs) - 1, 2):
            o.logprobs[i], o.top_logprobs[i] = o.logprobs[i + 1], o.top_logprobs[i + 1]
        c[check(o, out(y, "bfloat16"), probe).verdict] += 1
    print(f"mtp2, rows shifted (logprob_shift stand-in), bfloat16: {dict(c)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prompts")
    p.add_argument("out", type=Path)
    r = sub.add_parser("run")
    r.add_argument("--model", default="observatory/field_model")
    r.add_argument("--prompts", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--logdir")
    r.add_argument("--arms", default="base,base2,mtp1,mtp2")
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--limit", type=int, default=0, help="first N prompts only (0: all)")
    r.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    r.add_argument("--dtype", default="bfloat16")
    r.add_argument("--max-model-len", type=int, default=1024)
    r.add_argument("--gpu-mem", type=float, default=0.2, help="0: not passed (CPU engine)")
    r.add_argument("--python", default=sys.executable)
    r.add_argument("--extra-args", default="")
    r.add_argument("--spec-extra", default="{}")
    r.add_argument("--engine-label", default="vllm")
    r.add_argument("--teacher-arms", default="base,mtp2")
    r.add_argument("--parallel", action=argparse.BooleanOptionalAction, default=True)
    r.add_argument("--ready-timeout", type=float, default=400)
    r.add_argument("--budget-s", type=float, default=480, help="no new repeat starts after this")
    a = sub.add_parser("analyze")
    a.add_argument("out", type=Path)
    a.add_argument("raw_dirs", type=Path, nargs="+", help="one per run; the first run's base is the reference")
    a.add_argument("--prompts", type=Path)
    g = sub.add_parser("gate", help="replay the answer_fields gate on one run's raw answers")
    g.add_argument("raw_dir", type=Path)
    args = ap.parse_args()
    if args.cmd == "prompts":
        make_prompts(args.out)
    elif args.cmd == "run":
        run(args)
    elif args.cmd == "gate":
        gate_replay(args.raw_dir)
    else:
        analyze(args.raw_dirs, args.out, args.prompts)


if __name__ == "__main__":
    main()
