"""SGLang frontend programs, run by SGLang's own package against a radixlm server (a script, not a
test module: ``tests/lang/test_sglang_client.py`` runs it in a subprocess whose path holds ``sglang``).

``python tests/sglang_client_programs.py URL`` prints one JSON object: each program's results.
"""

from __future__ import annotations

import json
import sys

import sglang as sgl

GREEDY = {"temperature": 0.0}


@sgl.function
def plain(s, prompt):
    s += prompt + sgl.gen("out", max_tokens=8, stop="\n\n")


@sgl.function
def choose(s):
    s += "The colour of the sky is " + sgl.select("colour", choices=["red", "green", "blue"])


@sgl.function
def forked(s):
    s += "Two ideas:"
    forks = s.fork(2)
    for i, f in enumerate(forks):
        f += f" idea {i}:" + sgl.gen("idea", max_tokens=5)
    forks.join()
    s["ideas"] = [f["idea"] for f in forks]


@sgl.function
def numbers(s):
    s += "Pick a number: " + sgl.gen("n", regex=r"[0-9]{3}", max_tokens=8)
    s += "\nAnd an integer: " + sgl.gen("i", dtype=int, max_tokens=6)


@sgl.function
def chat(s):
    s += sgl.system("You are terse.")
    s += sgl.user("Say something.")
    s += sgl.assistant(sgl.gen("reply", max_tokens=6))


def main(url: str) -> None:
    backend = sgl.RuntimeEndpoint(url)
    sgl.set_default_backend(backend)
    out: dict = {"version": sgl.__version__}
    out["plain"] = plain.run(prompt="The lighthouse keeper", **GREEDY)["out"]
    state = plain.run(prompt="The lighthouse keeper", stream=True, **GREEDY)
    out["stream_pieces"] = list(state.text_iter("out"))
    out["stream_final"] = state["out"]
    state = choose.run(**GREEDY)
    out["select"] = state["colour"]
    out["select_meta"] = sorted(state.get_meta_info("colour") or {})
    out["fork"] = forked.run(**GREEDY)["ideas"]
    state = numbers.run(**GREEDY)
    out["regex"], out["int"] = state["n"], state["i"]
    out["chat"] = chat.run(**GREEDY)["reply"]
    batch = plain.run_batch([{"prompt": "One:"}, {"prompt": "Two:"}], **GREEDY)
    out["batch"] = [s["out"] for s in batch]
    backend.flush_cache()
    out["server_info_version"] = backend.get_server_info().get("version")
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
