"""The served dtype's numerics bounds (observatory/model/numerics.py; docs/design.md 3.6): which dtype a launch
serves in, and the answer_fields gate judging a bf16 pair by the bf16 bounds measured on the H200
(examples/h200-numerics/) while float32 and unknown dtypes keep the float32 ones."""

from __future__ import annotations

import json
from pathlib import Path

from observatory.model.gates import Output, default_registry
from observatory.model.numerics import BOUNDS, bounds_for, served_dtype, served_platform
from observatory.model.probes import Probe
from tests.support.paths import REPO

FIELDS = default_registry().get("answer_fields")
PROBE = Probe(name="p", category="prose_en", prompt="x", max_tokens=4)
FIELD_MODEL = REPO / "observatory" / "field_model"


def test_served_dtype_from_the_flag_else_the_checkpoint_with_vllms_auto_rule(tmp_path: Path) -> None:
    assert served_dtype(["--model", "m", "--dtype", "bfloat16"]) == "bfloat16"
    assert served_dtype(["--model", "m", "--dtype=float32"]) == "float32"
    assert served_dtype(["--model", "m", "--dtype", "half"]) == "float16"
    # auto (or no flag): the checkpoint's float32 is served in bf16 (vLLM's _resolve_auto_dtype)
    assert served_dtype(["--model", str(FIELD_MODEL)]) == "bfloat16"
    assert served_dtype(["--model", str(FIELD_MODEL), "--dtype", "auto"]) == "bfloat16"
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    assert served_dtype(["--model", str(tmp_path)]) == "bfloat16"
    assert served_dtype(["--model", str(tmp_path / "missing")]) is None
    assert served_dtype([]) is None


def test_unknown_and_unmeasured_dtypes_keep_the_float32_bounds() -> None:
    assert bounds_for(None) == bounds_for("float16") == BOUNDS["float32"]
    assert bounds_for("bfloat16").logprob_floor > bounds_for("float32").logprob_floor


def _answer(shift: float = 0.0, top_shift: float = 0.0, **kw: object) -> Output:
    ids = [5, 6, 7]
    lps = [-0.1 * (i + 1) - shift for i in range(3)]
    tops = [[(t, lp), (t + 100, lp - 1.0 - top_shift), (t + 200, lp - 2.0)] for t, lp in zip(ids, lps)]
    return Output(text="abc", content="abc", token_ids=ids, logprobs=lps, top_logprobs=tops, finish_reason="stop",
                  usage={"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}, generated=3, **kw)  # type: ignore[arg-type]


def test_a_bf16_pair_is_judged_by_the_bf16_bounds() -> None:
    # the H200's clean spec arms: emitted logprobs off by up to 0.0645, a shared top-k entry by 0.1875
    clean = _answer(shift=0.0645, top_shift=0.1875 - 0.0645)
    bf16, fp32, unknown = _answer(served_dtype="bfloat16"), _answer(served_dtype="float32"), _answer()
    r = FIELDS.check(clean, bf16, PROBE)
    assert r.verdict == "PASS", r.reason
    assert "bfloat16 numerics bound 0.25" in r.details["tolerance_from"]
    # the same differences on a float32 pair (or one of unknown dtype) are what they were: beyond 1e-3, WARN
    assert FIELDS.check(clean, fp32, PROBE).verdict == FIELDS.check(clean, unknown, PROBE).verdict == "WARN"
    # beyond the bf16 floor WARN, beyond its FAIL bound FAIL
    assert FIELDS.check(_answer(shift=0.3), bf16, PROBE).verdict == "WARN"
    assert FIELDS.check(_answer(shift=0.6), bf16, PROBE).verdict == "FAIL"
    assert FIELDS.check(_answer(shift=0.3), fp32, PROBE).verdict == "FAIL"


def test_a_float32_pair_served_on_cuda_is_judged_by_the_cuda_float32_bounds() -> None:
    """docs/design.md 3.7: on the H200 in float32 clean spec arms' shared top-k logprobs differ from base's by up
    to 0.00507 nats (A/A 0): under the CUDA floor 0.02 a PASS; on the CPU (bit-identical there) still a WARN."""
    clean = _answer(top_shift=0.00507)
    cuda = _answer(served_dtype="float32", served_platform="cuda")
    cpu = _answer(served_dtype="float32")
    r = FIELDS.check(clean, cuda, PROBE)
    assert r.verdict == "PASS", r.reason
    assert "float32 on CUDA numerics bound 0.02" in r.details["tolerance_from"]
    assert FIELDS.check(clean, cpu, PROBE).verdict == "WARN"
    # negative controls on CUDA: beyond the floor WARN, beyond float32's FAIL bound FAIL
    assert FIELDS.check(_answer(top_shift=0.03), cuda, PROBE).verdict == "WARN"
    assert FIELDS.check(_answer(shift=0.3), cuda, PROBE).verdict == "FAIL"
    # bf16 on CUDA keeps the bf16 bounds; float32 with no platform keeps the CPU's
    assert bounds_for("bfloat16", "cuda") == BOUNDS["bfloat16"] and bounds_for("float32") == BOUNDS["float32"]


def test_the_platform_is_cuda_only_where_the_observatory_gave_the_arm_gpus() -> None:
    assert served_platform({"gpus": [0], "url": None}) == "cuda"
    assert served_platform({"gpus": None, "url": None}) is None  # the CPU engine
    assert served_platform({"gpus": [0], "url": "http://h:8000"}) is None  # a server the observatory did not start
    assert served_platform(None) is None
