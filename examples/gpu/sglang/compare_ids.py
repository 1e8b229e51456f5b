"""Token ids of two SGLang arms of probe_h200.sh, side by side: /generate's output_ids and,
where the server gave them, the OpenAI answers' choices[].token_ids; and mtp2's own counters.
   python3 compare_ids.py OUT base mtp2"""
import json
import sys
from pathlib import Path

out, a, b = Path(sys.argv[1]), sys.argv[2], sys.argv[3]


def load(arm: str, name: str) -> object:
    p = out / f"{arm}-{name}.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError) as e:
        return {"unreadable": f"{p.name}: {e}"}


for name in ("gen", "cmpl", "chat"):
    x, y = load(a, name), load(b, name)
    def ids(d: object) -> object:
        if not isinstance(d, dict):
            return None
        if "output_ids" in d:
            return d["output_ids"]
        ch = d.get("choices") or [{}]
        return ch[0].get("token_ids", "not in the answer")
    ix, iy = ids(x), ids(y)
    print(f"{name}: {a} {ix}\n{name}: {b} {iy}\n{name}: identical={ix == iy and isinstance(ix, list)}")
gy = load(b, "gen")
if isinstance(gy, dict):
    mi = gy.get("meta_info", {})
    print("mtp meta_info spec fields:", {k: v for k, v in mi.items() if "spec" in k})
