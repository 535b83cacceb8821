#!/usr/bin/env bash
# One prepared check of the Triton kernels on a CUDA machine (torch + triton already installed):
#   1. make radixlm importable (pip install -e . offline; else a symlink shim on PYTHONPATH)
#   2. tests/kernels/test_cuda_kernels.py on the GPU (compiled kernels vs torch references)
#   3. benchmarks/bench_kernels.py: kernel throughput vs torch SDPA / the gather-then-attend path
#   4. the engine end to end on the `small` checkpoint in bfloat16, triton vs torch backends
#   5. decode tokens/s at batch 1/16/64 and prefill tokens/s (benchmarks/bench_decode.py) on `small`
#      and the real shapes (Qwen2.5-0.5B, Llama-3.2-1B), CUDA graphs + overlap on and off
#   6. the CPU-checked GPU features' tests, then the agent and raw (decode) suites
#   7. one summary table, also written to $RES/summary.txt
# Each phase has its own timeout and records pass/fail; the script always reaches the summary.
#
#   bash benchmarks/gpu_check.sh                 # results under ${OUT:-results/gpu_check}
#   QUICK=1 bash benchmarks/gpu_check.sh         # fewer benchmark sizes, shorter engine run
#   DRY_RUN=1 bash benchmarks/gpu_check.sh       # exercise the plumbing on a CPU machine (tiny model)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
RES="${OUT:-$ROOT/results/gpu_check}"
E2E="cuda small bfloat16"
DECODE_ARGS=(--device cuda --dtype bfloat16 --models llama:small,qwen2:0.5b,llama:1b --batches 1,16,64)
SUITE_ARGS=(--size small --reps 1)
if [[ -n "${DRY_RUN:-}" ]]; then
  QUICK=1; E2E="cpu tiny float32"
  DECODE_ARGS=(--device cpu --dtype float32 --models llama:tiny --batches 1,4 --max-total-tokens 4096)
  SUITE_ARGS=(--size tiny --reps 1)
fi
# the machine is offline: checkpoints and llama.cpp fixtures come from a carried cache when there is one
if [[ -d "$ROOT/.device_cache" ]]; then export RADIXLM_CACHE="$ROOT/.device_cache"; fi
export PY ROOT RES QUICK E2E
mkdir -p "$RES"
unset TRITON_INTERPRET  # the compiled kernels are what is being checked
export TRITON_DEFAULT_FP_FUSION="${TRITON_DEFAULT_FP_FUSION:-1}"
declare -A STATUS

phase() {  # phase NAME TIMEOUT_S CMD...: run with a timeout, log to $RES/NAME.log, record the status
  local name="$1" limit="$2"
  shift 2
  echo "=== $name (timeout ${limit}s)"
  local start=$SECONDS rc=0
  timeout --kill-after=10 "$limit" "$@" > "$RES/$name.log" 2>&1 || rc=$?
  tail -n 25 "$RES/$name.log"
  if [[ $rc -eq 0 ]]; then STATUS[$name]="ok ($((SECONDS - start))s)"
  elif [[ $rc -eq 124 || $rc -eq 137 ]]; then STATUS[$name]="TIMEOUT after ${limit}s"
  else STATUS[$name]="FAILED rc=$rc ($((SECONDS - start))s)"; fi
}

# ---- 0. the machine
"$PY" - <<'EOF' | tee "$RES/device.log"
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("gpu", p.name, f"{p.total_memory / 2**30:.0f} GiB", "SMs", p.multi_processor_count)
try:
    import triton
    print("triton", triton.__version__)
except ImportError as e:
    print("triton MISSING", e)
EOF
if [[ -z "${DRY_RUN:-}" ]] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "no CUDA device: nothing to check here (run the CPU tests instead)"; exit 2
fi

# ---- 1. install (no network on the GPU machine: no deps, no build isolation; shim as a fallback)
install_pkg() {
  if "$PY" -c "import radixlm.kernels" 2>/dev/null; then echo "radixlm already importable"; return 0; fi
  if "$PY" -m pip install -q --no-deps --no-build-isolation -e "$ROOT"; then return 0; fi
  echo "pip install failed; using a symlink shim on PYTHONPATH"
  local shim="$RES/shim/radixlm"
  rm -rf "$RES/shim" && mkdir -p "$shim"
  ln -s "$ROOT/radixlm/__init__.py" "$shim/__init__.py"
  ln -s "$ROOT/radixlm/__main__.py" "$shim/__main__.py"
  for pkg in radix_cache constrained lang runtime kernels; do ln -s "$ROOT/$pkg" "$shim/$pkg"; done
}
export -f install_pkg
phase install 300 bash -c install_pkg
if ! "$PY" -c "import radixlm.kernels" 2>/dev/null; then export PYTHONPATH="$RES/shim${PYTHONPATH:+:$PYTHONPATH}"; fi

# ---- 2. kernel tests on the GPU
phase cuda_tests 420 "$PY" -m pytest -q -p no:cacheprovider tests/kernels/test_cuda_kernels.py \
  --junitxml="$RES/cuda_tests.xml" -o junit_family=xunit1

# ---- 3. kernel throughput
phase bench 300 "$PY" benchmarks/bench_kernels.py ${QUICK:+--quick} --json "$RES/bench.json"

# ---- 4. the engine end to end (small checkpoint, bfloat16), guarded on the engine existing
engine_e2e() {
  # shellcheck disable=SC2086
  "$PY" - "$RES/engine.json" "${QUICK:-}" $E2E <<'EOF'
import json, sys, time
try:
    from radixlm.runtime.testing import checkpoint_path
    from radixlm.runtime.engine import Engine
except ImportError as e:
    json.dump({"skipped": f"engine unavailable: {e}"}, open(sys.argv[1], "w"))
    sys.exit(0)
quick, device, size, dtype = bool(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
path = checkpoint_path("llama", size)
shared = "System: you are a careful assistant that answers in one paragraph. " * 8
prompts = [shared + f"Question {i}: describe the number {i} in detail." for i in range(16 if quick else 64)]
params = {"temperature": 0.0, "max_new_tokens": 32 if quick else 128, "ignore_eos": True}
res = {}
for backend in ("triton", "torch"):
    if device == "cpu" and backend == "triton":
        continue  # the interpreter is far too slow for an end-to-end run
    with Engine(path, dtype=dtype, device=device, attention_backend=backend, max_total_tokens=131072) as eng:
        eng.generate(prompts[:4], {"temperature": 0.0, "max_new_tokens": 8})  # warm-up: compiles kernels
        eng.flush_cache()
        start = time.perf_counter()
        outs = eng.generate(prompts, params)
        secs = time.perf_counter() - start
        toks = sum(o["meta_info"]["completion_tokens"] for o in outs)
        res[backend] = {"seconds": round(secs, 2), "out_tok_per_s": round(toks / secs, 1),
                        "cached_tokens": sum(o["meta_info"]["cached_tokens"] for o in outs),
                        "ids": [o["output_ids"] for o in outs]}
        print(backend, {k: v for k, v in res[backend].items() if k != "ids"}, flush=True)
if "triton" in res:
    same = sum(a == b for a, b in zip(res["triton"].pop("ids"), res["torch"]["ids"]))
    res["greedy_identical"] = f"{same}/{len(prompts)} (bf16: small drift between backends is expected)"
    res["speedup"] = round(res["torch"]["seconds"] / res["triton"]["seconds"], 2)
res["torch"].pop("ids")
res["run"] = {"device": device, "checkpoint": size, "dtype": dtype, "prompts": len(prompts)}
print(res)
json.dump(res, open(sys.argv[1], "w"), indent=1)
EOF
}
export -f engine_e2e
phase engine 420 bash -c engine_e2e

# ---- 5. decode / prefill throughput, CUDA graphs + overlap on and off
phase decode 600 "$PY" benchmarks/bench_decode.py "${DECODE_ARGS[@]}" ${QUICK:+--quick} --json "$RES/decode.json"

# ---- 6. the graph-bucketing and overlap tests, then the agent and decode (raw) suites
phase gpu_feature_tests 300 "$PY" -m pytest -q -p no:cacheprovider tests/model/test_decode_graphs.py \
  tests/engine/test_overlap_loop.py
phase suites 600 "$PY" benchmarks/run.py --suite agent --suite raw --systems radixlm "${SUITE_ARGS[@]}" \
  ${QUICK:+--quick} --out "$RES/suites"

# ---- 7. summary
"$PY" - "$RES" <<'EOF' | tee "$RES/summary.txt"
import json, os, sys
import xml.etree.ElementTree as ET
res = sys.argv[1]
print("\n" + "=" * 100 + "\nGPU check summary  (" + open(os.path.join(res, "device.log")).read().replace("\n", "; ") + ")")
print("=" * 100)
xml = os.path.join(res, "cuda_tests.xml")
if os.path.exists(xml):
    suites = ET.parse(xml).getroot()
    suite = suites if suites.tag == "testsuite" else suites.find("testsuite")
    a = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    print(f"kernel tests on GPU: {a['tests']} run, {a['failures']} failed, {a['errors']} errors, {a['skipped']} skipped")
    for case in suite.iter("testcase"):
        if any(c.tag in ("failure", "error") for c in case):
            print("   FAILED", case.get("name"))
bench = os.path.join(res, "bench.json")
if os.path.exists(bench):
    rows = json.load(open(bench))["rows"]
    ratio = lambda sp, k: f"{sp[k]}x" if k in sp else "-"  # noqa: E731
    print(f"\n{'op':9} {'size':30} {'triton us':>10} {'sdpa dense us':>14} {'torch paged us':>15} "
          f"{'vs sdpa':>8} {'vs paged':>9} {'KV GB/s':>8}")
    for r in rows:
        us, sp = r["us"], r["speedup_vs"]
        print(f"{r['op']:9} {r['size']:30} {us.get('triton', '-'):>10} {us.get('sdpa_dense', '-'):>14} "
              f"{us.get('torch_paged', '-'):>15} {ratio(sp, 'sdpa_dense'):>8} "
              f"{ratio(sp, 'torch_paged'):>9} {r.get('kv_GBps', ''):>8}")
eng = os.path.join(res, "engine.json")
if os.path.exists(eng):
    e = json.load(open(eng))
    print("\nengine end to end:", json.dumps(e))
dec = os.path.join(res, "decode.json")
if os.path.exists(dec):
    d = json.load(open(dec))
    print(f"\ndecode ({d['device']}, {d['dtype']}): CUDA graphs + overlap on vs off")
    print(f"{'model':12} {'batch':>5} {'mode':4} {'graphs':>6} {'overlap':>7} {'prefill tok/s':>14} "
          f"{'decode tok/s':>13} {'on/off':>7} {'greedy same':>11}")
    for r in d["rows"]:
        if "skipped" in r:
            print(f"{r['model']:12} skipped: {r['skipped']}")
            continue
        print(f"{r['model']:12} {r['batch']:>5} {r['mode']:4} {str(r['cuda_graph']):>6} {str(r['overlap']):>7} "
              f"{r['prefill_tok_s']:>14} {r['decode_tok_s']:>13} {r.get('speedup_on_vs_off', ''):>7} "
              f"{r['greedy_same']:>11}")
suites = os.path.join(res, "suites")
for name in sorted(os.listdir(suites)) if os.path.isdir(suites) else []:
    if name.endswith(".md") and name != "summary.md":  # summary.md repeats the suites
        print(f"\nsuite {name}:\n" + open(os.path.join(suites, name)).read().strip())
EOF
echo
for name in install cuda_tests bench engine decode gpu_feature_tests suites; do printf '%-12s %s\n' "$name" "${STATUS[$name]:-not run}"; done \
  | tee -a "$RES/summary.txt"
for name in cuda_tests bench engine decode gpu_feature_tests suites; do [[ "${STATUS[$name]:-}" == ok* ]] || exit 1; done
